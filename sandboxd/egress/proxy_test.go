package egress_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/egress"
)

func TestDenyAllWithAllowRule(t *testing.T) {
	up := newUpstream(t, false)
	e := startProxy(t, egress.Config{Token: testToken, Policy: &egress.Policy{
		DefaultAction: egress.Deny, Egress: []egress.Rule{{Action: egress.Allow, Target: "Allowed.Test"}},
	}})
	c := e.client(nil)
	allowed := "http://allowed.test:" + up.port() + "/x"
	denied := "http://denied.test:" + up.port() + "/y"

	code, body, err := get(t, c, allowed)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "hello from upstream allowed.test") {
		t.Fatalf("allowed: %d %q %v, want 200 from upstream", code, body, err)
	}
	code, body, err = get(t, c, denied)
	if err != nil || code != http.StatusForbidden || !strings.Contains(body, "denied by policy") {
		t.Fatalf("denied: %d %q %v, want 403 denied by policy", code, body, err)
	}
	if got, want := up.hits, 1; got != want {
		t.Fatalf("upstream hits = %d, want %d", got, want)
	}

	// A rule added at runtime takes effect at once; removing it takes it away.
	if code, body := e.call(t, "PATCH", "/policy", `[{"action":"allow","target":"denied.test"}]`); code != http.StatusOK || !strings.Contains(body, `"mode":"enforcing"`) {
		t.Fatalf("PATCH = %d %s", code, body)
	}
	if code, _, err := get(t, c, denied); err != nil || code != http.StatusOK {
		t.Fatalf("after allow rule: %d %v, want 200", code, err)
	}
	if code, body := e.call(t, "DELETE", "/policy", `["DENIED.test","never.added"]`); code != http.StatusOK {
		t.Fatalf("DELETE = %d %s", code, body)
	}
	if code, _, err := get(t, c, denied); err != nil || code != http.StatusForbidden {
		t.Fatalf("after removing the rule: %d %v, want 403", code, err)
	}
	if code, _, err := get(t, c, allowed); err != nil || code != http.StatusOK {
		t.Fatalf("allowed after removal of the other: %d %v, want 200", code, err)
	}
	if !strings.Contains(e.logs.String(), "egress denied") {
		t.Errorf("logs do not record the denial:\n%s", e.logs)
	}
}

func TestConnectTunnel(t *testing.T) {
	up := newUpstream(t, true)
	e := startProxy(t, egress.Config{Policy: &egress.Policy{Egress: []egress.Rule{{Action: egress.Allow, Target: "*.test"}}}})
	// Without a binding the tunnel is not terminated: the client sees the
	// upstream's own certificate.
	c := e.client(pool(t, up.Certificate()))
	code, _, err := get(t, c, "https://allowed.test:"+up.port()+"/")
	if err == nil || code != 0 {
		// allowed.test is not in httptest's certificate, so TLS must fail,
		// which proves the proxy passed the upstream's certificate through.
		t.Fatalf("GET allowed.test = %d, %v; want a certificate error", code, err)
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("err = %v, want a certificate error", err)
	}
	e.call(t, "PATCH", "/policy", `[{"action":"allow","target":"example.com"}]`)
	code, body, err := get(t, c, "https://example.com:"+up.port()+"/tunnel")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "/tunnel") {
		t.Fatalf("GET example.com = %d %q %v, want 200", code, body, err)
	}
	_, _, err = get(t, c, "https://other.example.org:"+up.port()+"/")
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("CONNECT denied.test err = %v, want Forbidden", err)
	}
}

func TestIPAndCIDRRules(t *testing.T) {
	up := newUpstream(t, false)
	var mu sync.Mutex
	var dialed []string
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, addr)
		mu.Unlock()
		if strings.HasPrefix(addr, "127.") {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
		return nil, errors.New("test dialer: unreachable " + addr)
	}
	res := mapResolver{
		"example.com": loop,
		// Two answers, only one inside the allowed prefix: the proxy must dial
		// exactly the checked one.
		"mixed.test":    {netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("127.0.0.1")},
		"outside.test":  {netip.MustParseAddr("198.51.100.7")},
		"loopback.test": loop,
	}
	e := startProxy(t, egress.Config{Resolver: res, Dial: dial, Policy: &egress.Policy{Egress: []egress.Rule{
		{Action: egress.Deny, Target: "127.0.0.2"},
		{Action: egress.Allow, Target: "127.0.0.0/8"},
	}}})
	c := e.client(nil)
	tests := []struct {
		host string
		want int
	}{
		{"127.0.0.1", http.StatusOK},
		{"127.0.0.2", http.StatusForbidden},
		{"loopback.test", http.StatusOK},
		{"mixed.test", http.StatusOK},
		{"outside.test", http.StatusForbidden},
		{"[::ffff:127.0.0.1]", http.StatusOK},
	}
	for _, tt := range tests {
		code, body, err := get(t, c, "http://"+tt.host+":"+up.port()+"/")
		if err != nil || code != tt.want {
			t.Errorf("GET %s = %d %q %v, want %d", tt.host, code, body, err, tt.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range dialed {
		if strings.HasPrefix(a, "198.51.100.7") || strings.HasPrefix(a, "127.0.0.2") {
			t.Errorf("dialed %s, which the policy denies", a)
		}
	}
}

func TestBindingInjectsOverHTTP(t *testing.T) {
	up := newUpstream(t, false)
	e := startProxy(t, egress.Config{Token: testToken, CredentialProxy: true, Policy: &egress.Policy{
		Egress: []egress.Rule{{Action: egress.Allow, Target: "example.com"}, {Action: egress.Allow, Target: "allowed.test"}},
	}})
	const secret = "sk-test-0123456789abcdef"
	body := mustJSON(t, map[string]any{
		"credentials": []any{cred("api", secret)},
		"bindings": []egress.Binding{{Name: "api-bearer", Match: egress.Match{
			Hosts: []string{"example.com"}, Schemes: []string{"http"}, Ports: []int{mustPort(t, up.port())}, Paths: []string{"/v1/*"},
		}, Auth: egress.Auth{Type: "bearer", Credential: "api"}}},
	})
	if code, resp := e.call(t, "POST", "/credential-vault", body); code != http.StatusCreated {
		t.Fatalf("POST vault = %d %s", code, resp)
	}
	c := e.client(nil)
	req, _ := http.NewRequest("GET", "http://example.com:"+up.port()+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer forged-by-the-sandbox")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := up.lastHeader().Get("Authorization"), "Bearer "+secret; got != want {
		t.Fatalf("upstream Authorization = %q, want %q", got, want)
	}
	// Outside the binding's paths and hosts: nothing injected.
	for _, u := range []string{"http://example.com:" + up.port() + "/v2/x", "http://allowed.test:" + up.port() + "/v1/x"} {
		if code, _, err := get(t, c, u); err != nil || code != http.StatusOK {
			t.Fatalf("GET %s = %d %v", u, code, err)
		}
		if got := up.lastHeader().Get("Authorization"); got != "" {
			t.Fatalf("GET %s: upstream Authorization = %q, want none", u, got)
		}
	}
	if strings.Contains(e.logs.String(), secret) {
		t.Fatalf("logs contain the secret:\n%s", e.logs)
	}
}

// cred is a credential as a client sends it (egress.Credential never encodes
// its value).
func cred(name, value string) map[string]any {
	return map[string]any{"name": name, "source": map[string]string{"type": "inline", "value": value}}
}

func mustPort(t testing.TB, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestBindingInjectsOverHTTPS(t *testing.T) {
	up := newUpstream(t, true)
	e := startProxy(t, egress.Config{
		Token: testToken, CredentialProxy: true, Name: "sb-1",
		UpstreamTLS: &tls.Config{RootCAs: pool(t, up.Certificate())},
		Policy:      &egress.Policy{Egress: []egress.Rule{{Action: egress.Allow, Target: "example.com"}}},
	})
	const apiKey, user = "AKIA-very-secret-key", "dXNlcjpwYXNz"
	body := mustJSON(t, map[string]any{
		"credentials": []any{cred("key", apiKey), cred("basic", user)},
		"bindings": []egress.Binding{
			{Name: "k", Match: egress.Match{Hosts: []string{"example.com"}, Ports: []int{mustPort(t, up.port())}, Methods: []string{"GET"}},
				Auth: egress.Auth{Type: "apiKey", Name: "X-Api-Key", Credential: "key"}},
			{Name: "b", Match: egress.Match{Hosts: []string{"example.com"}, Ports: []int{mustPort(t, up.port())}, Methods: []string{"POST"}},
				Auth: egress.Auth{Type: "basic", Credential: "basic"}},
		},
	})
	if code, resp := e.call(t, "POST", "/credential-vault", body); code != http.StatusCreated {
		t.Fatalf("POST vault = %d %s", code, resp)
	}
	// The sandbox trusts only its CA: a terminated tunnel must present a leaf of it.
	c := e.client(pool(t, e.p.CACertPEM()))
	resp, err := c.Get("https://example.com:" + up.port() + "/secure")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got, want := resp.StatusCode, http.StatusOK; got != want {
		t.Fatalf("status = %d, want %d", got, want)
	}
	if got := resp.TLS.PeerCertificates[0].Issuer.CommonName; !strings.Contains(got, "alineo egress CA sb-1") {
		t.Fatalf("leaf issuer = %q, want the sandbox CA", got)
	}
	if got, want := up.lastHeader().Get("X-Api-Key"), apiKey; got != want {
		t.Fatalf("upstream X-Api-Key = %q, want %q", got, want)
	}
	resp, err = c.Post("https://example.com:"+up.port()+"/form", "text/plain", strings.NewReader("data"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got, want := up.lastHeader().Get("Authorization"), "Basic "+user; got != want {
		t.Fatalf("upstream Authorization = %q, want %q", got, want)
	}
	if got := up.lastHeader().Get("X-Api-Key"); got != "" {
		t.Fatalf("POST got X-Api-Key %q from the GET binding", got)
	}
	// Removing the allow rule stops requests on the terminated connection that
	// stayed open (403 per request), and new tunnels (CONNECT refused).
	e.call(t, "DELETE", "/policy", `["example.com"]`)
	if code, _, err := get(t, c, "https://example.com:"+up.port()+"/again"); err != nil || code != http.StatusForbidden {
		t.Fatalf("after rule removal: %d %v, want 403", code, err)
	}
	c.CloseIdleConnections()
	if _, _, err := get(t, c, "https://example.com:"+up.port()+"/new"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("new tunnel after rule removal: err = %v, want Forbidden", err)
	}
	if strings.Contains(e.logs.String(), apiKey) || strings.Contains(e.logs.String(), user) {
		t.Fatalf("logs contain a secret:\n%s", e.logs)
	}
}

func TestCloseEndsTunnels(t *testing.T) {
	up := newUpstream(t, true)
	e := startProxy(t, egress.Config{Policy: &egress.Policy{DefaultAction: egress.Allow}})
	conn, err := net.Dial("tcp", e.proxy.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT 127.0.0.1:%s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n\r\n", up.port(), up.port())
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), "200") {
		t.Fatalf("CONNECT reply %q, %v", buf[:n], err)
	}
	if err := e.p.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waited for the tunnel to end, so the client sees it closed at once.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(buf); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after Close: %v, want the tunnel closed", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.p.Serve(l); !errors.Is(err, egress.ErrClosed) {
		t.Fatalf("Serve after Close = %v, want ErrClosed", err)
	}
}

func TestCloseWithIdleTerminatedConn(t *testing.T) {
	up := newUpstream(t, true)
	e := startProxy(t, egress.Config{Token: testToken, CredentialProxy: true,
		UpstreamTLS: &tls.Config{RootCAs: pool(t, up.Certificate())},
		Policy:      &egress.Policy{Egress: []egress.Rule{{Action: egress.Allow, Target: "example.com"}}}})
	body := mustJSON(t, map[string]any{"credentials": []any{cred("c", "v")}, "bindings": []any{map[string]any{
		"name": "b", "match": map[string]any{"hosts": []string{"example.com"}, "ports": []int{mustPort(t, up.port())}},
		"auth": map[string]any{"type": "bearer", "credential": "c"}}}})
	if code, resp := e.call(t, "POST", "/credential-vault", body); code != http.StatusCreated {
		t.Fatalf("POST vault = %d %s", code, resp)
	}
	c := e.client(pool(t, e.p.CACertPEM()))
	if code, _, err := get(t, c, "https://example.com:"+up.port()+"/"); err != nil || code != http.StatusOK {
		t.Fatalf("GET = %d %v", code, err)
	}
	// The client keeps its terminated connection idle; Close must not wait for it.
	done := make(chan error, 1)
	go func() { done <- e.p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs on an idle terminated connection")
	}
}
