package egress_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/internal/testutil"

	"github.com/alineo-labs/alineo/sandboxd/egress"
)

const testToken = "egress-token-for-tests"

// mapResolver resolves test names; anything else does not exist.
type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[strings.ToLower(host)]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

var loop = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// testResolver maps the names the tests use to loopback. example.com is the name
// in httptest's TLS certificate.
var testResolver = mapResolver{"example.com": loop, "allowed.test": loop, "denied.test": loop, "api.example.com": loop}

// syncBuffer collects output from several goroutines.
type syncBuffer = testutil.SyncBuffer

// upstream is a test server that records the headers of the last request.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	last http.Header
	hits int
}

func (u *upstream) handler(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.last = r.Header.Clone()
	u.hits++
	u.mu.Unlock()
	io.WriteString(w, "hello from upstream "+r.Host+r.URL.Path)
}

func (u *upstream) lastHeader() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last
}

func (u *upstream) port() string {
	_, p, _ := net.SplitHostPort(u.Listener.Addr().String())
	return p
}

func newUpstream(t testing.TB, useTLS bool) *upstream {
	t.Helper()
	u := &upstream{}
	if useTLS {
		u.Server = httptest.NewTLSServer(http.HandlerFunc(u.handler))
	} else {
		u.Server = httptest.NewServer(http.HandlerFunc(u.handler))
	}
	t.Cleanup(u.Close)
	return u
}

// env is a running proxy with its API and a log buffer.
type env struct {
	p     *egress.Proxy
	proxy *url.URL
	api   *httptest.Server
	logs  *syncBuffer
}

func startProxy(t testing.TB, cfg egress.Config) *env {
	t.Helper()
	logs := &syncBuffer{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if cfg.Resolver == nil {
		cfg.Resolver = testResolver
	}
	p, err := egress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(l) }()
	api := httptest.NewServer(p.Handler())
	t.Cleanup(func() {
		api.Close()
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return &env{p: p, proxy: &url.URL{Scheme: "http", Host: l.Addr().String()}, api: api, logs: logs}
}

// client returns an HTTP client that goes through the proxy and trusts roots
// (nil: the host's).
func (e *env) client(roots *x509.CertPool) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:           http.ProxyURL(e.proxy),
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
}

// call sends an API request and returns status and body.
func (e *env) call(t testing.TB, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.api.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(egress.AuthHeader, testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func get(t testing.TB, c *http.Client, u string) (int, string, error) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func pool(t testing.TB, pemOrCert any) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	switch v := pemOrCert.(type) {
	case []byte:
		if !p.AppendCertsFromPEM(v) {
			t.Fatal("no certificate in PEM")
		}
	case *x509.Certificate:
		p.AddCert(v)
	}
	return p
}
