package sandboxd_test

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/sandboxd/egress"
	"github.com/alineo-labs/alineo/testenv"
)

// upstream is a test server that records the headers of the requests it got.
type upstream struct {
	srv  *httptest.Server
	port string
	mu   sync.Mutex
	seen []http.Header
}

func newUpstream(t testing.TB, tlsOn bool) *upstream {
	t.Helper()
	u := &upstream{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Clone())
		u.mu.Unlock()
		fmt.Fprintf(w, "hello from %s", r.Host)
	})
	if tlsOn {
		u.srv = httptest.NewTLSServer(h)
	} else {
		u.srv = httptest.NewServer(h)
	}
	t.Cleanup(u.srv.Close)
	_, u.port, _ = net.SplitHostPort(u.srv.Listener.Addr().String())
	return u
}

func (u *upstream) last() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return nil
	}
	return u.seen[len(u.seen)-1]
}

// egressServer starts a server whose egress proxies resolve allowed.test,
// other.test and example.com to host loopback and trust tlsUp's certificate.
// The operator opens the host loopback ports of tlsUp and open (no other
// address of the host is reachable from a sandbox). A sandbox created there
// without a policy is on the host network.
func egressServer(t testing.TB, tlsUp *upstream, open ...*upstream) (*sandboxd.Server, string) {
	t.Helper()
	cfg := sandboxd.Config{EgressResolver: testenv.LoopbackHosts{"allowed.test", "other.test", "example.com"}, HostNetwork: true}
	if tlsUp != nil {
		open = append(open, tlsUp)
	}
	for _, u := range open {
		cfg.AllowHosts = append(cfg.AllowHosts, "127.0.0.1:"+u.port)
	}
	if tlsUp != nil {
		pool := x509.NewCertPool()
		pool.AddCert(tlsUp.srv.Certificate())
		cfg.EgressUpstreamTLS = &tls.Config{RootCAs: pool}
	}
	return startServer(t, cfg)
}

// egressEndpoint returns the sandbox's egress API URL and token.
func egressEndpoint(t testing.TB, base, id string, proxy bool) (string, string) {
	t.Helper()
	r := call(t, "GET", fmt.Sprintf("%s/v1/sandboxes/%s/endpoints/%d?use_server_proxy=%v", base, id, egress.Port, proxy), nil)
	wantStatus(t, r, http.StatusOK)
	var ep sandboxd.Endpoint
	r.decode(t, &ep)
	return "http://" + ep.Endpoint, ep.Headers[egress.AuthHeader]
}

// curl runs curl in the sandbox and returns its output and exit code.
func curl(t testing.TB, execdURL, token string, args string) (string, int) {
	t.Helper()
	lines, code := run(t, execdURL, token, "curl -sS -m 10 "+args+" 2>&1")
	return strings.Join(lines, ""), code
}

func TestEgressPolicy(t *testing.T) {
	up := newUpstream(t, false)
	_, base := egressServer(t, nil, up)
	id := create(t, base, map[string]any{"networkPolicy": map[string]any{
		"defaultAction": "deny",
		"egress":        []map[string]string{{"action": "allow", "target": "allowed.test"}},
	}})
	waitState(t, base, id, sandboxd.StateRunning)
	execdURL, token := execdEndpoint(t, base, id, false)

	allowed := "http://allowed.test:" + up.port + "/x"
	other := "http://other.test:" + up.port + "/x"
	if out, code := curl(t, execdURL, token, allowed); code != 0 || out != "hello from allowed.test:"+up.port {
		t.Fatalf("allowed host: output %q, exit %d; want the upstream's answer", out, code)
	}
	if out, code := curl(t, execdURL, token, "-o /dev/null -w '%{http_code}' "+other); out != "403" {
		t.Fatalf("other host: output %q, exit %d; want 403 from the proxy", out, code)
	}
	// Without the proxy there is no way out: the host's loopback is not the
	// sandbox's, and there is no route anywhere else.
	for _, target := range []string{"http://127.0.0.1:" + up.port + "/", "http://192.0.2.1/"} {
		if out, code := curl(t, execdURL, token, "--noproxy '*' "+target); code == 0 {
			t.Fatalf("direct %s: succeeded (%q), want a failure", target, out)
		}
	}

	// A rule added at runtime takes effect, and removing it takes it away.
	egURL, egToken := egressEndpoint(t, base, id, false)
	wantStatus(t, call(t, "PATCH", egURL+"/policy", []map[string]string{{"action": "allow", "target": "other.test"}}, egress.AuthHeader, egToken), http.StatusOK)
	if out, code := curl(t, execdURL, token, other); code != 0 || !strings.HasPrefix(out, "hello from other.test") {
		t.Fatalf("other host after PATCH: output %q, exit %d", out, code)
	}
	// The same API through the server proxy route.
	pxURL, pxToken := egressEndpoint(t, base, id, true)
	if pxToken != egToken {
		t.Fatalf("egress token through the proxy = %q, want %q", pxToken, egToken)
	}
	wantStatus(t, call(t, "GET", pxURL+"/policy", nil), http.StatusUnauthorized)
	wantStatus(t, call(t, "DELETE", pxURL+"/policy", []string{"other.test"}, egress.AuthHeader, pxToken), http.StatusOK)
	if out, _ := curl(t, execdURL, token, "-o /dev/null -w '%{http_code}' "+other); out != "403" {
		t.Fatalf("other host after DELETE: output %q, want 403", out)
	}
	r := call(t, "GET", pxURL+"/policy", nil, egress.AuthHeader, pxToken)
	wantStatus(t, r, http.StatusOK)
	var st egress.PolicyStatus
	r.decode(t, &st)
	if st.Mode != egress.ModeEnforcing || st.Policy == nil || len(st.Policy.Egress) != 1 || st.Policy.Egress[0].Target != "allowed.test" {
		t.Fatalf("policy = %+v, want the one allow rule for allowed.test", st)
	}
}

func TestEgressCredentialInjection(t *testing.T) {
	plain := newUpstream(t, false)
	secure := newUpstream(t, true)
	s, base := egressServer(t, secure, plain)
	id := create(t, base, map[string]any{
		"networkPolicy": map[string]any{"defaultAction": "deny", "egress": []map[string]string{
			{"action": "allow", "target": "allowed.test"}, {"action": "allow", "target": "example.com"},
		}},
		"credentialProxy": map[string]any{"enabled": true},
	})
	waitState(t, base, id, sandboxd.StateRunning)
	execdURL, token := execdEndpoint(t, base, id, false)
	egURL, egToken := egressEndpoint(t, base, id, false)

	var b [16]byte
	_, _ = rand.Read(b[:])
	secret := "sk-test-" + hex.EncodeToString(b[:])
	vault := map[string]any{
		"credentials": []map[string]any{{"name": "api", "source": map[string]string{"type": "inline", "value": secret}}},
		"bindings": []map[string]any{
			{"name": "plain", "match": map[string]any{"hosts": []string{"allowed.test"}, "schemes": []string{"http"}, "ports": []int{atoi(t, plain.port)}},
				"auth": map[string]string{"type": "bearer", "credential": "api"}},
			{"name": "tls", "match": map[string]any{"hosts": []string{"example.com"}, "ports": []int{atoi(t, secure.port)}},
				"auth": map[string]string{"type": "apiKey", "name": "X-Api-Key", "credential": "api"}},
		},
	}
	wantStatus(t, call(t, "POST", egURL+"/credential-vault", vault, egress.AuthHeader, egToken), http.StatusCreated)

	if out, code := curl(t, execdURL, token, "http://allowed.test:"+plain.port+"/v1/models"); code != 0 || !strings.HasPrefix(out, "hello") {
		t.Fatalf("http: output %q, exit %d", out, code)
	}
	if got, want := plain.last().Get("Authorization"), "Bearer "+secret; got != want {
		t.Fatalf("http upstream Authorization = %q, want the bound bearer credential", got)
	}
	// HTTPS: the proxy terminates TLS with the sandbox's CA, which curl
	// trusts through the sandbox's trust store.
	if out, code := curl(t, execdURL, token, "https://example.com:"+secure.port+"/v1/models"); code != 0 || !strings.HasPrefix(out, "hello") {
		t.Fatalf("https: output %q, exit %d", out, code)
	}
	if got := secure.last().Get("X-Api-Key"); got != secret {
		t.Fatalf("https upstream X-Api-Key = %q, want the bound credential", got)
	}
	// A tunnel to an allowed host without a binding passes through untouched
	// (curl -k: the upstream's own certificate, which the sandbox does not
	// trust), with nothing injected; one to a denied host is refused.
	if out, code := curl(t, execdURL, token, "-k https://allowed.test:"+secure.port+"/"); code != 0 || !strings.HasPrefix(out, "hello") {
		t.Fatalf("https pass-through: output %q, exit %d", out, code)
	}
	if h := secure.last(); h.Get("X-Api-Key") != "" || h.Get("Authorization") != "" {
		t.Fatalf("pass-through request got credentials injected: %v", h)
	}
	if out, code := curl(t, execdURL, token, "-k https://other.test:"+secure.port+"/"); code == 0 || !strings.Contains(out, "403") {
		t.Fatalf("https to a denied host: output %q, exit %d; want the proxy's 403", out, code)
	}

	// The value is nowhere in the sandbox: environment, command lines, files.
	// The pattern "[s]k-test-…" matches the secret without holding it, so
	// the command lines of the search itself do not count.
	pattern := "[" + secret[:1] + "]" + secret[1:]
	lines, _ := run(t, execdURL, token, "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c '"+pattern+"' || true")
	if got := strings.Join(lines, ""); got != "0" {
		t.Fatalf("processes holding the secret: %q, want 0", got)
	}
	lines, _ = run(t, execdURL, token, "env; grep -rl '"+pattern+"' /tmp /root /etc /home 2>/dev/null; echo done")
	if all := strings.Join(lines, "\n"); strings.Contains(all, secret) || !strings.Contains(all, "SSL_CERT_FILE=") {
		t.Fatalf("environment or files of the sandbox hold the secret, or SSL_CERT_FILE is missing:\n%s", all)
	}
	// Nor in any file of the sandbox's directory on the host: upper layers,
	// record, log. The CA (not the key) is in the upper layer's trust store,
	// and the host's own trust store is untouched.
	dir := filepath.Join(s.DataDir(), "sandboxes", id)
	cn := "alineo egress CA " + id
	var caFound bool
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "merged" {
			return fs.SkipDir // the mounted root: the upper layers below hold its writes
		}
		if err != nil || !d.Type().IsRegular() || d.Name() == "disk.img" {
			return nil // disk.img is the disk the upper layers live on, mounted
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		if bytes.Contains(data, []byte(secret)) {
			return fmt.Errorf("%s holds the secret", p)
		}
		if d.Name() == "ca-certificates.crt" && bundleHas(data, cn) {
			caFound = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !caFound {
		t.Fatalf("no trust store with %q in the sandbox's upper layers", cn)
	}
	if host, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil && bundleHas(host, cn) {
		t.Fatal("the host's trust store holds the sandbox's CA")
	}
}

// bundleHas reports whether the PEM bundle holds a certificate named cn.
func bundleHas(bundle []byte, cn string) bool {
	for {
		var blk *pem.Block
		blk, bundle = pem.Decode(bundle)
		if blk == nil {
			return false
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil && c.Subject.CommonName == cn {
			return true
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEgressExecdStreams checks that execd stays reachable, streaming, through
// both endpoints of a sandbox in its own network namespace.
func TestEgressExecdStreams(t *testing.T) {
	_, base := egressServer(t, nil)
	id := create(t, base, map[string]any{"networkPolicy": map[string]any{"defaultAction": "deny"}})
	waitState(t, base, id, sandboxd.StateRunning)
	// Slow output arrives line by line, and the sandbox's network namespace
	// has one interface: lo.
	execdURL, token := execdEndpoint(t, base, id, false)
	lines, code := run(t, execdURL, token, "for i in 1 2 3; do echo $i; sleep 0.05; done; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
	if got := strings.Join(lines, ""); code != 0 || got != "123lo" || len(lines) < 4 {
		t.Fatalf("direct: output %q in %d chunks, exit %d; want 1 2 3 lo, line by line", got, len(lines), code)
	}
	// Through the server proxy route.
	execdURL, token = execdEndpoint(t, base, id, true)
	lines, code = run(t, execdURL, token, "for i in 1 2; do echo $i; sleep 0.05; done; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
	if got := strings.Join(lines, ""); code != 0 || got != "12lo" || len(lines) < 3 {
		t.Fatalf("proxy: output %q in %d chunks, exit %d; want 1 2 lo, line by line", got, len(lines), code)
	}
	r := call(t, "GET", fmt.Sprintf("%s/v1/sandboxes/%s/endpoints/%d", base, id, egress.Port), nil)
	wantStatus(t, r, http.StatusOK)
	var ep sandboxd.Endpoint
	r.decode(t, &ep)
	u, err := url.Parse("http://" + ep.Endpoint + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(u.String())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(b) != "ok" {
		t.Fatalf("egress /healthz = %d %q", res.StatusCode, b)
	}
}

func TestEgressCreateValidation(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	for _, c := range []struct {
		name string
		np   any
	}{
		{"bad action", map[string]any{"egress": []map[string]string{{"action": "maybe", "target": "a.com"}}}},
		{"bad target", map[string]any{"egress": []map[string]string{{"action": "allow", "target": "*.*"}}}},
		{"unknown field", map[string]any{"defaultAction": "deny", "ingress": []string{}}},
		{"not an object", []string{"x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := call(t, "POST", base+"/v1/sandboxes", map[string]any{
				"image": map[string]string{"uri": "host"}, "entrypoint": []string{"true"}, "networkPolicy": c.np,
			})
			wantStatus(t, r, http.StatusBadRequest)
		})
	}
	_, plainBase := startServer(t, sandboxd.Config{NoIsolation: true})
	r := call(t, "POST", plainBase+"/v1/sandboxes", map[string]any{
		"image": map[string]string{"uri": "host"}, "entrypoint": []string{"true"}, "networkPolicy": map[string]string{"defaultAction": "deny"},
	})
	wantStatus(t, r, http.StatusBadRequest)
}

// TestEgressCannotReachSandboxd: even an allow-all policy does not let a
// sandbox reach the server's API, its own egress API (whose token would let it
// rewrite its policy and bindings) or execd through the proxy.
func TestEgressCannotReachSandboxd(t *testing.T) {
	up := newUpstream(t, false)
	_, base := egressServer(t, nil, up)
	id := create(t, base, map[string]any{"credentialProxy": map[string]any{"enabled": true}})
	waitState(t, base, id, sandboxd.StateRunning)
	execdURL, token := execdEndpoint(t, base, id, false)
	egURL, _ := egressEndpoint(t, base, id, false)

	// NO_PROXY names 127.0.0.1: --noproxy overrides it, so these go through the proxy.
	px := fmt.Sprintf("-x http://127.0.0.1:%d --noproxy none.invalid ", sandboxd.ProxyPort)
	if out, code := curl(t, execdURL, token, px+"http://127.0.0.1:"+up.port+"/"); code != 0 || !strings.HasPrefix(out, "hello") {
		t.Fatalf("allow-all to a host service: output %q, exit %d", out, code)
	}
	for name, u := range map[string]string{
		"api":        base + "/v1/sandboxes",
		"egress API": egURL + "/policy",
		"execd":      execdURL + "/ping",
		"api by ip":  strings.Replace(base, "127.0.0.1", "0.0.0.0", 1) + "/health",
	} {
		if out, _ := curl(t, execdURL, token, px+"-o /dev/null -w '%{http_code}' "+u); out != "403" {
			t.Errorf("%s (%s) through the proxy: %q, want 403", name, u, out)
		}
	}
}

// TestEgressAcrossPauseAndDelete: the proxy serves a resumed sandbox, and
// deleting the sandbox stops its egress API.
func TestEgressAcrossPauseAndDelete(t *testing.T) {
	up := newUpstream(t, false)
	_, base := egressServer(t, nil, up)
	id := create(t, base, map[string]any{"networkPolicy": map[string]any{
		"defaultAction": "deny",
		"egress":        []map[string]string{{"action": "allow", "target": "allowed.test"}},
	}})
	waitState(t, base, id, sandboxd.StateRunning)
	execdURL, token := execdEndpoint(t, base, id, false)
	egURL, egToken := egressEndpoint(t, base, id, false)

	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/pause", nil), http.StatusAccepted)
	waitState(t, base, id, sandboxd.StatePaused)
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/resume", nil), http.StatusAccepted)
	waitState(t, base, id, sandboxd.StateRunning)
	if out, code := curl(t, execdURL, token, "http://allowed.test:"+up.port+"/"); code != 0 || !strings.HasPrefix(out, "hello") {
		t.Fatalf("after resume: output %q, exit %d", out, code)
	}
	wantStatus(t, call(t, "GET", egURL+"/policy", nil, egress.AuthHeader, egToken), http.StatusOK)

	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+id, nil), http.StatusNoContent)
	if res, err := http.Get(egURL + "/healthz"); err == nil {
		res.Body.Close()
		t.Fatalf("egress API still answers after delete: %s", res.Status)
	}
	// A deleted sandbox is gone, as on the real server.
	r := call(t, "GET", fmt.Sprintf("%s/v1/sandboxes/%s/endpoints/%d", base, id, egress.Port), nil)
	wantStatus(t, r, http.StatusNotFound)
}

// TestDefaultNetwork: a sandbox created without a networkPolicy has its own
// network namespace behind a proxy that refuses the host's own addresses, so
// it cannot reach services listening on this machine; Config.HostNetwork
// gives it the host's network instead.
func TestDefaultNetwork(t *testing.T) {
	up := newUpstream(t, false)
	// A service on every interface, to try the host's non-loopback addresses.
	anyLn, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	anySrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello from any") })}
	go anySrv.Serve(anyLn)
	t.Cleanup(func() { anySrv.Close() })
	_, anyPort, _ := net.SplitHostPort(anyLn.Addr().String())
	var hostIP string
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
				hostIP = ipn.IP.String()
				break
			}
		}
	}

	_, base := startServer(t, sandboxd.Config{})
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)
	execdURL, token := execdEndpoint(t, base, id, false)
	direct := "--noproxy '*' http://127.0.0.1:" + up.port + "/"
	if out, code := curl(t, execdURL, token, direct); code == 0 || strings.Contains(out, "hello") {
		t.Errorf("default sandbox reached a host loopback service directly: %q (exit %d)", out, code)
	}
	px := fmt.Sprintf("-x http://127.0.0.1:%d --noproxy none.invalid -o /dev/null -w '%%{http_code}' ", sandboxd.ProxyPort)
	targets := []string{"http://127.0.0.1:" + up.port + "/", "http://localhost:" + up.port + "/", "http://[::1]:" + up.port + "/",
		"http://[::]:" + up.port + "/", "http://0.0.0.0:" + up.port + "/", "http://[::ffff:127.0.0.1]:" + up.port + "/",
		"http://127.1:" + up.port + "/", "http://169.254.169.254/latest/meta-data/"}
	if hostIP != "" {
		targets = append(targets, "http://"+hostIP+":"+anyPort+"/")
	}
	for _, u := range targets {
		if out, _ := curl(t, execdURL, token, px+u); out != "403" {
			t.Errorf("default sandbox, %s through its proxy: %q, want 403", u, out)
		}
	}
	// With the credential proxy but no networkPolicy, the same.
	cp := create(t, base, map[string]any{"credentialProxy": map[string]any{"enabled": true}})
	waitState(t, base, cp, sandboxd.StateRunning)
	cpURL, cpTok := execdEndpoint(t, base, cp, false)
	if out, _ := curl(t, cpURL, cpTok, px+"http://127.0.0.1:"+up.port+"/"); out != "403" {
		t.Errorf("credential-proxy sandbox, host loopback through its proxy: %q, want 403", out)
	}
	if lines, _ := run(t, execdURL, token, "echo $HTTP_PROXY"); len(lines) != 1 || !strings.Contains(lines[0], fmt.Sprint(sandboxd.ProxyPort)) {
		t.Errorf("HTTP_PROXY in a default sandbox = %q, want its proxy", lines)
	}
	egURL, egTok := egressEndpoint(t, base, id, false)
	req, _ := http.NewRequest("GET", egURL+"/policy", nil)
	req.Header.Set(egress.AuthHeader, egTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"127.0.0.0/8"`) || !strings.Contains(string(body), `"defaultAction":"allow"`) {
		t.Errorf("GET /policy of a default sandbox: %d %s", resp.StatusCode, body)
	}

	_, hostBase := startServer(t, sandboxd.Config{HostNetwork: true})
	hid := create(t, hostBase, nil)
	waitState(t, hostBase, hid, sandboxd.StateRunning)
	hURL, hTok := execdEndpoint(t, hostBase, hid, false)
	if out, code := curl(t, hURL, hTok, direct); code != 0 || !strings.HasPrefix(out, "hello") {
		t.Errorf("HostNetwork sandbox to a host loopback service: %q (exit %d)", out, code)
	}
}
