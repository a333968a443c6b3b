package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/testenv"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunServesWithToken(t *testing.T) {
	env := map[string]string{"ALINEO_API_TOKEN": "tok", "NATS_URL": testenv.NATS(t)}
	getenv := func(k string) string { return env[k] }
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"--listen", "127.0.0.1:0", "--sqlite", testenv.SQLitePath(t), "--projector"}, getenv, out)
	}()
	var base string
	testenv.Eventually(t, 10*time.Second, func() error {
		m := regexp.MustCompile(`listening on (http://\S+)`).FindStringSubmatch(out.String())
		if m == nil {
			return fmt.Errorf("not listening yet: %q", out.String())
		}
		base = m[1]
		return nil
	})
	status := func(path, tok string) int {
		req, _ := http.NewRequest("GET", base+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tt := range []struct {
		path, tok string
		want      int
	}{
		{"/healthz", "", 200}, {"/v1/sandboxes", "", 401}, {"/v1/sandboxes", "tok", 200}, {"/metrics", "", 200},
	} {
		if got := status(tt.path, tt.tok); got != tt.want {
			t.Errorf("GET %s (token %q) = %d, want %d", tt.path, tt.tok, got, tt.want)
		}
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop")
	}
}

func TestRunRefusesOpenPublicAddress(t *testing.T) {
	err := run(context.Background(), []string{"--listen", "0.0.0.0:0"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "without a token") {
		t.Fatalf("run = %v, want a refusal", err)
	}
}
