package metricsrv

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var down atomic.Pointer[error]
	check := func(context.Context) error {
		if e := down.Load(); e != nil {
			return *e
		}
		return nil
	}
	addr, done, err := Serve(ctx, "127.0.0.1:0", Handler(NewRegistry(), check))
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, string(b)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics = %d, want 200 with the Go collector's series", code)
	}
	if code, body := get("/healthz"); code != http.StatusOK || !strings.Contains(body, `"ok"`) {
		t.Errorf("/healthz = %d %s, want 200 ok", code, body)
	}
	gone := errors.New("disk gone")
	down.Store(&gone)
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "disk gone") {
		t.Errorf("/healthz with a failing check = %d %s, want 503 naming it", code, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not stop after its context ended")
	}
}
