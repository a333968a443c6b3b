package opensandbox_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/opensandbox"
)

// fakeOpenSandbox serves a lifecycle endpoint lookup and an execd behind it, on one
// server: direct endpoints live under /execd (like execd's own /proxy/44772 path),
// the server proxy under /v1/sandboxes/{id}/proxy/{port}.
func fakeOpenSandbox(t *testing.T, pingFailures int32) (*recorder, *atomic.Int32) {
	var pings atomic.Int32
	var rec *recorder
	rec = newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		p := r.URL.Path
		switch {
		case strings.HasPrefix(p, "/v1/sandboxes/sbx-1/endpoints/"):
			host := strings.TrimPrefix(rec.URL, "http://")
			port := strings.TrimPrefix(p, "/v1/sandboxes/sbx-1/endpoints/")
			if r.URL.Query().Get("use_server_proxy") == "true" {
				writeJSON(w, 200, `{"endpoint":"`+host+`/sandboxes/sbx-1/proxy/`+port+`"}`)
				return
			}
			writeJSON(w, 200, `{"endpoint":"`+host+`/direct/`+port+`","headers":{"X-EXECD-ACCESS-TOKEN":"tok","OPENSANDBOX-EGRESS-AUTH":"eg"}}`)
		case strings.HasSuffix(p, "/ping"):
			if pings.Add(1) <= pingFailures {
				w.WriteHeader(502)
				return
			}
			w.WriteHeader(200)
		case strings.HasSuffix(p, "/command"):
			startStream(w)
			writeEvents(w, observedSuccess...)
		case strings.HasSuffix(p, "/policy"):
			writeJSON(w, 200, `{"status":"ok","mode":"allow_all","enforcementMode":"dns"}`)
		default:
			writeJSON(w, 404, `{"code":"NOT_FOUND","message":"`+p+`"}`)
		}
	})
	return rec, &pings
}

func TestClientExecdDirect(t *testing.T) {
	rec, pings := fakeOpenSandbox(t, 2)
	c := newClient(t, rec.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, err := c.Execd(ctx, "sbx-1")
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	if got := pings.Load(); got != 3 {
		t.Errorf("pings = %d, want 3", got)
	}
	if want := rec.URL + "/direct/44772"; ex.URL() != want {
		t.Errorf("execd URL = %q, want %q", ex.URL(), want)
	}
	s, err := ex.RunCommand(ctx, opensandbox.CommandRequest{Command: "echo hi"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Wait(); err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
	r := rec.last(t)
	if r.Path != "/direct/44772/command" || r.Header.Get("X-EXECD-ACCESS-TOKEN") != "tok" || r.Header.Get("OPEN-SANDBOX-API-KEY") != "" {
		t.Errorf("command request = %s %v", r.Path, r.Header)
	}

	eg, err := c.Egress(ctx, "sbx-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eg.GetPolicy(ctx); err != nil {
		t.Fatal(err)
	}
	if r := rec.last(t); r.Path != "/direct/18080/policy" || r.Header.Get("OPENSANDBOX-EGRESS-AUTH") != "eg" {
		t.Errorf("policy request = %s %v", r.Path, r.Header)
	}
}

func TestClientExecdServerProxy(t *testing.T) {
	rec, _ := fakeOpenSandbox(t, 0)
	c := newClient(t, rec.URL, func(cfg *opensandbox.Config) { cfg.UseServerProxy = true })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, err := c.Execd(ctx, "sbx-1")
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	s, err := ex.RunCommand(ctx, opensandbox.CommandRequest{Command: "echo hi"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	r := rec.last(t)
	if r.Path != "/v1/sandboxes/sbx-1/proxy/44772/command" {
		t.Errorf("path = %s, want the server proxy route", r.Path)
	}
	if got := r.Header.Get("X-EXECD-ACCESS-TOKEN"); got != "key-1" {
		t.Errorf("execd token = %q, want the API key", got)
	}
	eg, err := c.Egress(ctx, "sbx-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eg.GetPolicy(ctx); err != nil {
		t.Fatal(err)
	}
	if r := rec.last(t); r.Path != "/v1/sandboxes/sbx-1/proxy/18080/policy" || r.Header.Get("OPENSANDBOX-EGRESS-AUTH") != "key-1" {
		t.Errorf("policy request = %s %v", r.Path, r.Header)
	}
}

func TestClientExecdReadyTimeout(t *testing.T) {
	rec, _ := fakeOpenSandbox(t, 1<<30)
	c := newClient(t, rec.URL, func(cfg *opensandbox.Config) { cfg.ExecdReadyTimeout = 300 * time.Millisecond })
	start := time.Now()
	_, err := c.Execd(context.Background(), "sbx-1")
	if !errors.Is(err, opensandbox.ErrNotReady) {
		t.Fatalf("err = %v, want ErrNotReady", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	if _, err := c.Execd(context.Background(), "other"); !errors.Is(err, opensandbox.ErrNotFound) {
		t.Errorf("unknown sandbox err = %v, want ErrNotFound", err)
	}
}
