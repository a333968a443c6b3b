package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/testenv"
)

func TestRunServesWithToken(t *testing.T) {
	env := map[string]string{"ALINEO_API_TOKEN": "tok", "NATS_URL": testenv.NATS(t)}
	getenv := func(k string) string { return env[k] }
	r := testutil.Start(t, run, []string{"--listen", "127.0.0.1:0", "--sqlite", testenv.SQLitePath(t), "--projector"}, getenv)
	var base string
	testenv.Eventually(t, 10*time.Second, func() error {
		m, err := r.Match(regexp.MustCompile(`listening on (http://\S+)`))
		if err != nil {
			return err
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
	if err := r.Stop(t, 10*time.Second); err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestRunRefusesOpenPublicAddress(t *testing.T) {
	err := run(context.Background(), []string{"--listen", "0.0.0.0:0"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "without a token") {
		t.Fatalf("run = %v, want a refusal", err)
	}
}
