package testenv

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
)

// ShortTTL is an in-process sandboxd whose sandboxes expire TTL after they
// are created, behind a proxy that can refuse renewals. OpenSandbox refuses
// a create timeout under 60 s, so a test of expirations would last minutes:
// the proxy drops the timeout of every create (refusing a create without
// one: its sandbox would never expire), and the server gives each sandbox
// the TTL instead (its DefaultTimeout), as a server with a shorter minimum
// would. Renewals pass through unchanged unless Blocked, when the proxy
// answers them 503, as a server that cannot be reached.
type ShortTTL struct {
	URL     string // the proxy's
	Direct  string // the server's own, past the proxy
	Blocked atomic.Bool
	Renewed atomic.Int64 // renewals passed through
}

// ShortTTLSandboxd starts a ShortTTL server, stopped when t ends.
func ShortTTLSandboxd(t testing.TB, ttl time.Duration) *ShortTTL {
	t.Helper()
	raw, _ := SandboxdServer(t, sandboxd.Config{DefaultTimeout: ttl, SweepInterval: 50 * time.Millisecond})
	target, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	s := &ShortTTL{Direct: raw}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/renew-expiration"):
			if s.Blocked.Load() {
				http.Error(w, `{"code":"UNAVAILABLE","message":"blocked by the test"}`, http.StatusServiceUnavailable)
				return
			}
			s.Renewed.Add(1)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/sandboxes"):
			var body map[string]any
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if _, ok := body["timeout"]; !ok {
				http.Error(w, `{"code":"TEST","message":"create without a timeout: the sandbox would never expire"}`, http.StatusBadRequest)
				return
			}
			delete(body, "timeout")
			b, _ := json.Marshal(body)
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
			r.Header.Set("Content-Length", strconv.Itoa(len(b)))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}
