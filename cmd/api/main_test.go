package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/api"
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

// TestRunTokensReloadOnHangup: users of --tokens are served by role; a
// SIGHUP sent to the process reads the file again, so a new token is
// accepted and a removed one refused; a file that does not parse keeps the
// tokens as they were; no token reaches the log.
func TestRunTokensReloadOnHangup(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	write := func(lines ...string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const alice, bob, carol = "alice-token-A1", "bob-token-B2", "carol-token-C3"
	write("# name role hash", "alice write "+api.HashToken(alice), "bob read "+api.HashToken(bob))
	env := map[string]string{"ALINEO_API_TOKENS": file, "ALINEO_API_TOKEN": "root-token-R0", "NATS_URL": testenv.NATS(t)}
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
	status := func(method, path, tok string) int {
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader(`{"name":"x","image":"host","steps":[{"exec":{"command":"true"}}]}`)
		}
		req, _ := http.NewRequest(method, base+path, body)
		req.Header.Set("Content-Type", "application/json")
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
	check := func(when string, cases []struct {
		method, path, tok string
		want              int
	}) {
		t.Helper()
		for _, c := range cases {
			if got := status(c.method, c.path, c.tok); got != c.want {
				t.Errorf("%s: %s %s (token %.5s…) = %d, want %d", when, c.method, c.path, c.tok, got, c.want)
			}
		}
	}
	type tc = struct {
		method, path, tok string
		want              int
	}
	check("loaded", []tc{
		{"GET", "/v1/jobs", alice, 200}, {"GET", "/v1/jobs", bob, 200}, {"GET", "/v1/jobs", carol, 401},
		{"GET", "/v1/jobs", "", 401}, {"POST", "/v1/jobs", bob, 403}, {"POST", "/v1/jobs", alice, 202},
		{"GET", "/v1/executors", alice, 403}, {"GET", "/v1/executors", "root-token-R0", 200},
	})

	hangup := func(want string) {
		t.Helper()
		n := strings.Count(r.Out.String(), want)
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, func() error {
			if strings.Count(r.Out.String(), want) <= n {
				return fmt.Errorf("no new %q in the log", want)
			}
			return nil
		})
	}
	write("alice write "+api.HashToken(alice), "carol read "+api.HashToken(carol)) // bob removed, carol added
	hangup("tokens reloaded")
	check("reloaded", []tc{
		{"GET", "/v1/jobs", carol, 200}, {"GET", "/v1/jobs", bob, 401}, {"POST", "/v1/jobs", carol, 403},
		{"GET", "/v1/jobs", alice, 200}, {"GET", "/v1/jobs", "root-token-R0", 200},
	})
	write("carol read " + carol) // a plain token: refused, the tokens stay
	hangup("keeping the previous ones")
	check("bad file", []tc{{"GET", "/v1/jobs", carol, 200}, {"GET", "/v1/jobs", alice, 200}})

	if err := r.Stop(t, 10*time.Second); err != nil {
		t.Fatalf("run: %v", err)
	}
	out := r.Out.String()
	for _, tok := range []string{alice, bob, carol, "root-token-R0"} {
		if strings.Contains(out, tok) {
			t.Errorf("the output holds the token %q:\n%s", tok, out)
		}
	}
}

func TestHashTokenCommand(t *testing.T) {
	stdin = strings.NewReader("s3cret\n")
	defer func() { stdin = os.Stdin }()
	var out strings.Builder
	if err := run(context.Background(), []string{"hash-token"}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), api.HashToken("s3cret")+"\n"; got != want {
		t.Fatalf("hash-token = %q, want %q", got, want)
	}
	stdin = strings.NewReader("")
	if err := run(context.Background(), []string{"hash-token"}, func(string) string { return "" }, &out); err == nil {
		t.Fatal("hash-token of an empty stdin = nil error, want one")
	}
}

func TestRunRefusesBadTokenFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("alice write plain-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"--listen", "127.0.0.1:0", "--tokens", file}, func(string) string { return "" }, io.Discard)
	if !errors.Is(err, api.ErrInvalidTokens) || strings.Contains(err.Error(), "plain-token") {
		t.Fatalf("run with a plain token in the file = %v, want ErrInvalidTokens not quoting it", err)
	}
}
