package alineo_test

// Egress rules, credentials and redaction against an embedded sandboxd whose
// egress proxies resolve the test host names to upstream servers on loopback.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/postgres"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// hostsResolver resolves the test host names to host loopback; every other
// name fails.
type hostsResolver map[string]netip.Addr

func (h hostsResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := h[strings.ToLower(host)]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// upstream is a test server on loopback that records the headers it got.
type upstream struct {
	srv  *httptest.Server
	port int
	mu   sync.Mutex
	seen []http.Header
}

func newUpstream(t *testing.T, tlsOn bool) *upstream {
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
	u.port = u.srv.Listener.Addr().(*net.TCPAddr).Port
	return u
}

func (u *upstream) last() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return http.Header{}
	}
	return u.seen[len(u.seen)-1]
}

// egressEnv is a sandboxd whose proxies resolve allowed.test, other.test and
// example.com to loopback and trust the TLS upstream.
type egressEnv struct {
	*env
	plain, secure *upstream
}

func newEgressEnv(t *testing.T, store adapters.Ledger, opts ...func(*alineo.Options)) *egressEnv {
	t.Helper()
	plain, secure := newUpstream(t, false), newUpstream(t, true)
	lo := netip.MustParseAddr("127.0.0.1")
	pool := x509.NewCertPool()
	pool.AddCert(secure.srv.Certificate())
	url, _ := testenv.SandboxdServer(t, sandboxd.Config{
		EgressResolver:    hostsResolver{"allowed.test": lo, "other.test": lo, "example.com": lo},
		EgressUpstreamTLS: &tls.Config{RootCAs: pool},
		AllowHosts:        []string{fmt.Sprintf("127.0.0.1:%d", plain.port), fmt.Sprintf("127.0.0.1:%d", secure.port)},
	})
	t.Cleanup(func() { store.Close() })
	o := alineo.Options{BaseURL: url, Adapter: store}
	for _, f := range opts {
		f(&o)
	}
	c, err := alineo.New(o)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := store.(adapters.Store) // nil for a bus ledger
	return &egressEnv{env: &env{url: url, store: st, client: c}, plain: plain, secure: secure}
}

// curl runs curl in the sandbox and returns its output and whether it succeeded.
func curl(t *testing.T, ctx context.Context, sb *alineo.Sandbox, url string) (string, bool) {
	t.Helper()
	res, err := sb.Exec(ctx, "curl -sS -f -m 10 "+url+" 2>&1", alineo.ExecOptions{Strict: new(false)}).Wait()
	if err != nil {
		t.Fatalf("curl %s: %v", url, err)
	}
	return res.Stdout, res.ExitCode == 0
}

func newSecret(t *testing.T) string {
	t.Helper()
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "sk-test-" + hex.EncodeToString(b[:])
}

func countEvents(es []events.Entry, ev events.Event) int {
	n := 0
	for _, e := range es {
		if e.Event == ev {
			n++
		}
	}
	return n
}

func TestEgressRulesAtRuntime(t *testing.T) {
	e := newEgressEnv(t, memory.New())
	ctx := testCtx(t)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{NetworkPolicy: &alineo.NetworkPolicy{
		DefaultAction: alineo.EgressDeny,
		Egress:        []alineo.EgressRule{{Action: alineo.EgressAllow, Target: "allowed.test"}},
	}})
	allowed := fmt.Sprintf("http://allowed.test:%d/", e.plain.port)
	other := fmt.Sprintf("http://other.test:%d/", e.plain.port)
	if out, ok := curl(t, ctx, sb, allowed); !ok || !strings.HasPrefix(out, "hello") {
		t.Fatalf("allowed host: %q, ok=%v; want hello", out, ok)
	}
	if out, ok := curl(t, ctx, sb, other); ok {
		t.Fatalf("other host: %q succeeded; want refused", out)
	}

	if err := sb.Egress().Add(ctx, alineo.EgressRule{Action: alineo.EgressAllow, Target: "other.test"}); err != nil {
		t.Fatalf("Add: %v", err)
	}
	if out, ok := curl(t, ctx, sb, other); !ok {
		t.Fatalf("other host after Add: %q; want it allowed", out)
	}
	p, err := sb.Egress().List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if got, want := fmt.Sprint(p), "{deny [{allow other.test} {allow allowed.test}]}"; got != want {
		t.Fatalf("List = %s, want %s", got, want)
	}
	if err := sb.Egress().Remove(ctx, "other.test", "unknown.test"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if out, ok := curl(t, ctx, sb, other); ok {
		t.Fatalf("other host after Remove: %q succeeded; want refused", out)
	}
	if out, ok := curl(t, ctx, sb, allowed); !ok {
		t.Fatalf("allowed host after Remove: %q; want allowed", out)
	}

	es := e.rows(t, sb)
	if got := countEvents(es, events.EgressRuleAdded); got != 2 {
		t.Fatalf("egress.rule_added rows = %d, want 2 (creation, Add)", got)
	}
	var removed []events.EgressRulePayload
	for _, en := range es {
		if en.Event == events.EgressRuleRemoved {
			var p events.EgressRulePayload
			if err := en.Decode(&p); err != nil {
				t.Fatal(err)
			}
			removed = append(removed, p)
		}
	}
	if len(removed) != 1 || removed[0] != (events.EgressRulePayload{Action: events.Allow, Target: "other.test"}) {
		t.Fatalf("egress.rule_removed = %+v, want one {allow other.test}", removed)
	}

	var oe *alineo.OptionError
	if err := sb.Egress().Add(ctx, alineo.EgressRule{Action: "maybe", Target: "x.test"}); !errors.As(err, &oe) {
		t.Fatalf("Add with a bad action = %v, want *OptionError", err)
	}
	if _, err := e.client.Sandbox(ctx, alineo.SandboxOptions{Image: "host",
		NetworkPolicy: &alineo.NetworkPolicy{Egress: []alineo.EgressRule{{Action: alineo.EgressAllow}}}}); !errors.As(err, &oe) {
		t.Fatalf("Sandbox with an empty target = %v, want *OptionError", err)
	}
}

// ledgerStore is a store together with a way to dump every byte it holds.
type ledgerStore struct {
	name string
	open func(t *testing.T) (adapters.Store, func(t *testing.T) []byte)
}

var secretStores = []ledgerStore{
	{"sqlite", func(t *testing.T) (adapters.Store, func(t *testing.T) []byte) {
		path := testenv.SQLitePath(t)
		s, err := sqlite.Open(path, sqlite.Config{Synchronous: "NORMAL"})
		if err != nil {
			t.Fatal(err)
		}
		// Every file of the database (main, WAL, shm) holds every table.
		return s, func(t *testing.T) []byte {
			var all []byte
			files, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*"))
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, b...)
			}
			return all
		}
	}},
	{"postgres", func(t *testing.T) (adapters.Store, func(t *testing.T) []byte) {
		dsn := testenv.Postgres(t)
		s, err := postgres.Open(dsn, postgres.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return s, func(t *testing.T) []byte { return dumpPostgres(t, dsn) }
	}},
}

// dumpPostgres returns every row of every table of the database as text.
func dumpPostgres(t *testing.T, dsn string) []byte {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT table_schema, table_name FROM information_schema.tables
		WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var s, n string
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, fmt.Sprintf("%q.%q", s, n))
	}
	rows.Close()
	if len(tables) == 0 {
		t.Fatal("no tables in the Postgres ledger")
	}
	var buf bytes.Buffer
	for _, tb := range tables {
		rs, err := db.Query("SELECT t::text FROM " + tb + " t")
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var s string
			if err := rs.Scan(&s); err != nil {
				t.Fatal(err)
			}
			buf.WriteString(s)
			buf.WriteByte('\n')
		}
		rs.Close()
	}
	return buf.Bytes()
}

// TestCredentialInjectionNeverRecorded binds two credentials (HTTP bearer,
// HTTPS apiKey), checks the upstream gets them while the sandbox never sees
// them, then has commands print them and searches the whole ledger.
func TestCredentialInjectionNeverRecorded(t *testing.T) {
	for _, k := range secretStores {
		t.Run(k.name, func(t *testing.T) {
			store, dump := k.open(t)
			e := newEgressEnv(t, store)
			ctx := testCtx(t)
			sb := e.sandbox(t, ctx, alineo.SandboxOptions{CredentialProxy: true, NetworkPolicy: &alineo.NetworkPolicy{
				DefaultAction: alineo.EgressDeny,
				Egress: []alineo.EgressRule{
					{Action: alineo.EgressAllow, Target: "allowed.test"}, {Action: alineo.EgressAllow, Target: "example.com"},
				},
			}})
			plainSecret, tlsSecret := newSecret(t), newSecret(t)
			creds := sb.Credentials()
			if err := creds.Set(ctx, "api", plainSecret, alineo.CredentialBinding{Hosts: []string{"allowed.test"},
				Schemes: []string{"http"}, Ports: []int{e.plain.port}, Type: alineo.CredentialBearer}, "env:API_KEY"); err != nil {
				t.Fatalf("Set api: %v", err)
			}
			if err := creds.Set(ctx, "tls", tlsSecret, alineo.CredentialBinding{Hosts: []string{"example.com"},
				Ports: []int{e.secure.port}, Type: alineo.CredentialAPIKey, Header: "X-Api-Key"}, ""); err != nil {
				t.Fatalf("Set tls: %v", err)
			}
			bs, err := creds.ListBindings(ctx)
			if err != nil || len(bs) != 2 || bs[0].Name != "api" || bs[1].Binding.Header != "X-Api-Key" {
				t.Fatalf("ListBindings = %+v, %v; want api and tls", bs, err)
			}

			if out, ok := curl(t, ctx, sb, fmt.Sprintf("http://allowed.test:%d/v1", e.plain.port)); !ok {
				t.Fatalf("http: %q", out)
			}
			if got, want := e.plain.last().Get("Authorization"), "Bearer "+plainSecret; got != want {
				t.Fatalf("http upstream Authorization = %q, want the bound bearer", got)
			}
			if out, ok := curl(t, ctx, sb, fmt.Sprintf("https://example.com:%d/v1", e.secure.port)); !ok {
				t.Fatalf("https: %q", out)
			}
			if got := e.secure.last().Get("X-Api-Key"); got != tlsSecret {
				t.Fatalf("https upstream X-Api-Key = %q, want the bound credential", got)
			}

			// Neither value is in the sandbox: environment, processes, files.
			// "[s]k-test-…" matches a value without holding it.
			for _, secret := range []string{plainSecret, tlsSecret} {
				pattern := "[" + secret[:1] + "]" + secret[1:]
				res, err := sb.Exec(ctx, "{ env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'; } | grep -c '"+
					pattern+"'; grep -rl '"+pattern+"' /tmp /root /etc /home /var 2>/dev/null; true").Wait()
				if err != nil || strings.TrimSpace(res.Stdout) != "0" {
					t.Fatalf("search of the sandbox = %q, %v; want 0 and no file", res.Stdout, err)
				}
			}

			// A command line holding a value, and output holding it, also split
			// across chunks of a raw (code) stream.
			res, err := sb.Exec(ctx, "echo key="+plainSecret).Wait()
			if err != nil || res.Stdout != "key=[REDACTED:api]\n" {
				t.Fatalf("echo = %q, %v; want the value redacted", res.Stdout, err)
			}
			half := len(tlsSecret) / 2
			code := fmt.Sprintf("printf 'a %%s' %s; sleep 0.5; printf '%%s z' %s", tlsSecret[:half], tlsSecret[half:])
			res, err = sb.ExecCode(ctx, code, alineo.CodeOptions{Language: "bash"}).Wait()
			if err != nil || res.Stdout != "a [REDACTED:tls] z" {
				t.Fatalf("split output = %q, %v; want the value redacted", res.Stdout, err)
			}
			var chunks int
			for c, err := range sb.ExecCode(ctx, strings.ReplaceAll(code, "sk-", "xx-"), alineo.CodeOptions{Language: "bash"}).Stdout() {
				if err != nil {
					t.Fatal(err)
				}
				if len(c) > 0 {
					chunks++
				}
			}
			if chunks < 2 {
				t.Fatalf("control run gave %d chunks; the split test needs the output in 2", chunks)
			}
			var ce *alineo.CommandError
			if _, err := sb.Exec(ctx, "echo "+plainSecret+"; exit 3").Wait(); !errors.As(err, &ce) ||
				strings.Contains(err.Error(), plainSecret) || strings.Contains(ce.Stdout, plainSecret) {
				t.Fatalf("failed command = %v; want a *CommandError without the value", err)
			}

			// Patch the value: the new one is injected, both stay redacted.
			patched := newSecret(t)
			if err := creds.Patch(ctx, "api", alineo.CredentialPatch{Value: &patched}); err != nil {
				t.Fatalf("Patch: %v", err)
			}
			if _, ok := curl(t, ctx, sb, fmt.Sprintf("http://allowed.test:%d/v1", e.plain.port)); !ok {
				t.Fatal("http after Patch failed")
			}
			if got, want := e.plain.last().Get("Authorization"), "Bearer "+patched; got != want {
				t.Fatalf("after Patch: Authorization = %q, want the new value", got)
			}
			res, err = sb.Exec(ctx, "echo "+plainSecret+" "+patched).Wait()
			if err != nil || res.Stdout != "[REDACTED:api#1] [REDACTED:api]\n" {
				t.Fatalf("echo after Patch = %q, %v", res.Stdout, err)
			}
			if err := creds.Patch(ctx, "nope", alineo.CredentialPatch{Value: &patched}); !errors.Is(err, alineo.ErrCredentialNotFound) {
				t.Fatalf("Patch of an unknown credential = %v, want ErrCredentialNotFound", err)
			}
			if err := creds.Remove(ctx, "tls"); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			// Without a binding the tunnel is passed through: curl meets the
			// upstream's own certificate, which the sandbox does not trust.
			if out, ok := curl(t, ctx, sb, fmt.Sprintf("-k https://example.com:%d/v2", e.secure.port)); !ok {
				t.Fatalf("https after Remove: %q", out)
			}
			if got := e.secure.last().Get("X-Api-Key"); got != "" {
				t.Fatalf("after Remove: X-Api-Key = %q, want none", got)
			}
			if err := sb.Close(ctx); err != nil {
				t.Fatal(err)
			}

			es := e.rows(t, sb)
			if got := countEvents(es, events.CredentialBound); got != 3 {
				t.Fatalf("credential.bound rows = %d, want 3 (two Set, one Patch)", got)
			}
			if got := countEvents(es, events.CredentialRevoked); got != 1 {
				t.Fatalf("credential.revoked rows = %d, want 1", got)
			}
			for _, en := range es {
				if en.Event == events.CredentialBound {
					var p events.CredentialPayload
					if err := en.Decode(&p); err != nil || p.Binding == nil || len(p.Binding.Hosts) == 0 {
						t.Fatalf("credential.bound %s: %+v, %v; want the binding", en.Payload, p, err)
					}
				}
			}
			all := dump(t)
			if !bytes.Contains(all, []byte("REDACTED:api")) {
				t.Fatal("the dump holds no redaction marker: it does not cover the ledger")
			}
			for _, secret := range []string{plainSecret, tlsSecret, patched} {
				if bytes.Contains(all, []byte(secret)) {
					t.Fatalf("the %s ledger holds a credential value", k.name)
				}
				if bytes.Contains(all, []byte(hex.EncodeToString([]byte(secret)))) {
					t.Fatalf("the %s ledger holds a credential value, hex-encoded", k.name)
				}
			}
		})
	}
}

// TestResumeReregistersCredentials resumes a session with a binding: without
// a resolver (or with a failing one) Resume fails with a *SandboxError and
// leaves no sandbox; with one, the binding, the egress rules and the
// redaction are back, and a recorded command holding the value replays.
func TestResumeReregistersCredentials(t *testing.T) {
	e := newEgressEnv(t, memory.New())
	ctx := testCtx(t)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{CredentialProxy: true, NetworkPolicy: &alineo.NetworkPolicy{
		DefaultAction: alineo.EgressDeny,
		Egress:        []alineo.EgressRule{{Action: alineo.EgressAllow, Target: "allowed.test"}},
	}})
	secret := newSecret(t)
	binding := alineo.CredentialBinding{Hosts: []string{"allowed.test"}, Schemes: []string{"http"},
		Ports: []int{e.plain.port}, Type: alineo.CredentialCustomHeaders, Headers: []string{"X-One", "X-Two"}}
	if err := sb.Credentials().Set(ctx, "api", secret, binding, "env:API_KEY"); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if err := sb.Egress().Add(ctx, alineo.EgressRule{Action: alineo.EgressAllow, Target: "example.com"}); err != nil {
		t.Fatalf("Add: %v", err)
	}
	echo := "echo token=" + secret
	if res, err := sb.Exec(ctx, echo).Wait(); err != nil || res.Stdout != "token=[REDACTED:api]\n" {
		t.Fatalf("echo = %q, %v", res.Stdout, err)
	}
	if _, err := sb.Checkpoint(ctx, ""); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	// A second binding, revoked again: it must not come back.
	if err := sb.Credentials().Set(ctx, "gone", newSecret(t), binding, ""); err != nil {
		t.Fatal(err)
	}
	if err := sb.Credentials().Remove(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	live := e.liveSandboxes(t, ctx)

	var se *alineo.SandboxError
	if _, err := e.client.Resume(ctx, sb.ID(), alineo.ResumeOptions{}); !errors.As(err, &se) || !errors.Is(err, alineo.ErrNoCredentialResolver) {
		t.Fatalf("Resume without a resolver = %v, want a *SandboxError wrapping ErrNoCredentialResolver", err)
	}
	boom := errors.New("vault sealed")
	_, err := e.client.Resume(ctx, sb.ID(), alineo.ResumeOptions{ResolveCredential: func(context.Context, string, alineo.CredentialBinding) (string, error) {
		return "", boom
	}})
	if !errors.As(err, &se) || !errors.Is(err, boom) {
		t.Fatalf("Resume with a failing resolver = %v, want a *SandboxError wrapping its error", err)
	}
	if got := e.liveSandboxes(t, ctx); got != live {
		t.Fatalf("live sandboxes after failed resumes = %d, want %d", got, live)
	}

	var asked []string
	resumed, err := e.client.Resume(ctx, sb.ID(), alineo.ResumeOptions{ResolveCredential: func(_ context.Context, name string, b alineo.CredentialBinding) (string, error) {
		asked = append(asked, name+":"+b.Type)
		return secret, nil
	}})
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	t.Cleanup(func() { resumed.Close(context.Background()) })
	if got, want := strings.Join(asked, ","), "api:customHeaders"; got != want {
		t.Fatalf("resolver asked for %s, want %s", got, want)
	}
	bs, err := resumed.Credentials().ListBindings(ctx)
	if err != nil || len(bs) != 1 || bs[0].Name != "api" || strings.Join(bs[0].Binding.Headers, ",") != "X-One,X-Two" {
		t.Fatalf("ListBindings after Resume = %+v, %v; want api with its headers", bs, err)
	}
	// The recorded command (redacted) replays: same fingerprint.
	if res, err := resumed.Exec(ctx, echo).Wait(); err != nil || res.Stdout != "token=[REDACTED:api]\n" {
		t.Fatalf("replayed echo = %q, %v", res.Stdout, err)
	}
	if out, ok := curl(t, ctx, resumed, fmt.Sprintf("http://allowed.test:%d/", e.plain.port)); !ok {
		t.Fatalf("http after Resume: %q", out)
	}
	if h := e.plain.last(); h.Get("X-One") != secret || h.Get("X-Two") != secret {
		t.Fatalf("after Resume the upstream got %v, want both custom headers", h)
	}
	if out, ok := curl(t, ctx, resumed, fmt.Sprintf("http://other.test:%d/", e.plain.port)); ok {
		t.Fatalf("other host after Resume: %q succeeded; want the policy restored", out)
	}
	p, err := resumed.Egress().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(p.Egress), "[{allow example.com} {allow allowed.test}]"; got != want {
		t.Fatalf("rules after Resume = %s, want %s", got, want)
	}
	es := e.rows(t, resumed)
	if got := countEvents(es, events.CredentialBound); got != 1 {
		t.Fatalf("credential.bound rows of the resumed session = %d, want 1", got)
	}
	for _, en := range es {
		if bytes.Contains(en.Payload, []byte(secret)) {
			t.Fatalf("%s holds the value", en.Event)
		}
	}
}

// TestForkKeepsPolicyAndCredentials forks a guarded sandbox: the fork has the
// same policy (default action included) and its credentials injected.
func TestForkKeepsPolicyAndCredentials(t *testing.T) {
	e := newEgressEnv(t, memory.New())
	ctx := testCtx(t)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{CredentialProxy: true, NetworkPolicy: &alineo.NetworkPolicy{
		DefaultAction: alineo.EgressDeny,
		Egress:        []alineo.EgressRule{{Action: alineo.EgressAllow, Target: "allowed.test"}},
	}})
	secret := newSecret(t)
	if err := sb.Credentials().Set(ctx, "api", secret, alineo.CredentialBinding{Hosts: []string{"allowed.test"},
		Schemes: []string{"http"}, Ports: []int{e.plain.port}, Type: alineo.CredentialBearer}, ""); err != nil {
		t.Fatal(err)
	}
	child, err := sb.Fork(ctx, "")
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	t.Cleanup(func() { child.Close(context.Background()) })
	if out, ok := curl(t, ctx, child, fmt.Sprintf("http://allowed.test:%d/", e.plain.port)); !ok {
		t.Fatalf("fork: allowed host: %q", out)
	}
	if got := e.plain.last().Get("Authorization"); got != "Bearer "+secret {
		t.Fatalf("fork: Authorization = %q, want the bound bearer", got)
	}
	if out, ok := curl(t, ctx, child, fmt.Sprintf("http://other.test:%d/", e.plain.port)); ok {
		t.Fatalf("fork: other host: %q succeeded; want refused", out)
	}
	if res, err := child.Exec(ctx, "echo "+secret).Wait(); err != nil || res.Stdout != "[REDACTED:api]\n" {
		t.Fatalf("fork: echo = %q, %v", res.Stdout, err)
	}
}

// TestResumeKeepsDefaultAction resumes sandboxes whose policies the rules
// alone do not describe: default allow with a deny rule, and deny-all
// without rules. The resumed sandbox has the same policy, because
// sandbox.created records the default action.
func TestResumeKeepsDefaultAction(t *testing.T) {
	e := newEgressEnv(t, memory.New())
	ctx := testCtx(t)
	for _, tc := range []struct {
		name   string
		policy alineo.NetworkPolicy
		want   string
	}{
		{"allow with a deny rule", alineo.NetworkPolicy{DefaultAction: alineo.EgressAllow,
			Egress: []alineo.EgressRule{{Action: alineo.EgressDeny, Target: "other.test"}}}, "allow [{deny other.test}]"},
		{"deny-all without rules", alineo.NetworkPolicy{DefaultAction: alineo.EgressDeny}, "deny []"},
		{"empty: allow-all", alineo.NetworkPolicy{}, "allow []"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := e.sandbox(t, ctx, alineo.SandboxOptions{NetworkPolicy: &tc.policy})
			if _, err := sb.Checkpoint(ctx, ""); err != nil {
				t.Fatalf("Checkpoint: %v", err)
			}
			if err := sb.Close(ctx); err != nil {
				t.Fatal(err)
			}
			created := e.rows(t, sb)[0]
			var p events.SandboxCreatedPayload
			if err := created.Decode(&p); err != nil || created.Event != events.SandboxCreated {
				t.Fatalf("first row %s: %v", created.Event, err)
			}
			if want, _, _ := strings.Cut(tc.want, " "); string(p.EgressDefault) != want {
				t.Errorf("sandbox.created egressDefault = %q, want %q", p.EgressDefault, want)
			}
			resumed, err := e.client.Resume(ctx, sb.ID(), alineo.ResumeOptions{})
			if err != nil {
				t.Fatalf("Resume: %v", err)
			}
			t.Cleanup(func() { resumed.Close(context.Background()) })
			got, err := resumed.Egress().List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if s := fmt.Sprintf("%s %v", got.DefaultAction, got.Egress); s != tc.want {
				t.Errorf("policy after Resume = %s, want %s", s, tc.want)
			}
			// A resume of the resumed session keeps it too.
			if _, err := resumed.Checkpoint(ctx, ""); err != nil {
				t.Fatal(err)
			}
			again, err := e.client.Resume(ctx, resumed.ID(), alineo.ResumeOptions{})
			if err != nil {
				t.Fatalf("second Resume: %v", err)
			}
			t.Cleanup(func() { again.Close(context.Background()) })
			if got, err := again.Egress().List(ctx); err != nil || fmt.Sprintf("%s %v", got.DefaultAction, got.Egress) != tc.want {
				t.Errorf("policy after a second Resume = %+v, %v; want %s", got, err, tc.want)
			}
		})
	}
}
