package alineo

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
)

// fakeBroker keeps credentials in memory and can be told to fail.
type fakeBroker struct {
	mu    sync.Mutex
	vals  map[string]string
	binds map[string]CredentialBinding
	fail  error
}

var _ CredentialBroker = (*fakeBroker)(nil)

func (b *fakeBroker) Set(_ context.Context, _, name, value string, binding CredentialBinding) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail != nil {
		return b.fail
	}
	if b.vals == nil {
		b.vals, b.binds = map[string]string{}, map[string]CredentialBinding{}
	}
	b.vals[name], b.binds[name] = value, binding
	return nil
}

func (b *fakeBroker) Patch(_ context.Context, _, name string, p CredentialPatch) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.vals[name]; !ok {
		return ErrCredentialNotFound
	}
	if p.Value != nil {
		b.vals[name] = *p.Value
	}
	if p.Binding != nil {
		b.binds[name] = *p.Binding
	}
	return nil
}

func (b *fakeBroker) Remove(_ context.Context, _, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.vals, name)
	delete(b.binds, name)
	return nil
}

func (b *fakeBroker) List(context.Context, string) ([]BoundCredential, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []BoundCredential
	for n, bd := range b.binds {
		out = append(out, BoundCredential{Name: n, Binding: bd})
	}
	sortBound(out)
	return out, nil
}

func newBrokerSandbox(t *testing.T, f *fakeServer, b CredentialBroker) (*Client, *Sandbox) {
	t.Helper()
	c, err := New(Options{BaseURL: f.URL, Adapter: memory.New(), CredentialBroker: b})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandbox(context.Background(), SandboxOptions{Image: "img", CredentialProxy: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return c, sb
}

const testSecret = "sk-live-0123456789abcdef"

var apiBinding = CredentialBinding{Hosts: []string{"api.test"}, Type: CredentialBearer}

func TestCredentialsRedactCommandsAndOutput(t *testing.T) {
	ctx := context.Background()
	f := newFakeServer(t)
	b := &fakeBroker{}
	c, sb := newBrokerSandbox(t, f, b)
	if err := sb.Credentials().Set(ctx, "api", testSecret, apiBinding, "env:API"); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if b.vals["api"] != testSecret {
		t.Fatal("Options.CredentialBroker did not get the value")
	}
	tests := []struct {
		cmd, stdout, stderr string
	}{
		{"echo key=" + testSecret, "key=[REDACTED:api]\n", ""},
		{"x " + testSecret + testSecret, "x [REDACTED:api][REDACTED:api]\n", "err:x [REDACTED:api][REDACTED:api]\n"},
		// A prefix of the value at the very end is held back, then flushed.
		{"echo tail sk-live-01", "tail sk-live-01\n", ""},
		{"echo nothing secret", "nothing secret\n", ""},
	}
	for _, tt := range tests {
		res, err := sb.Exec(ctx, tt.cmd).Wait()
		if err != nil || res.Stdout != tt.stdout || res.Stderr != tt.stderr {
			t.Errorf("Exec(%q) = %q, %q, %v; want %q, %q", tt.cmd, res.Stdout, res.Stderr, err, tt.stdout, tt.stderr)
		}
	}
	// The command reached the sandbox unchanged.
	f.mu.Lock()
	sent := strings.Join(f.commands, "\n")
	f.mu.Unlock()
	if !strings.Contains(sent, "echo key="+testSecret) {
		t.Fatalf("the server got %q, want the command as given", sent)
	}
	var ce *CommandError
	if _, err := sb.Exec(ctx, "fail 2 "+testSecret).Wait(); !errors.As(err, &ce) || strings.Contains(err.Error(), testSecret) {
		t.Fatalf("failing exec = %v, want a *CommandError without the value", err)
	}

	es := rows(t, c, sb)
	for _, e := range es {
		if bytes.Contains(e.Payload, []byte(testSecret)) {
			t.Fatalf("%s %s holds the value", e.Event, e.Payload)
		}
		if e.Event == events.ExecStarted {
			var p events.ExecStartedPayload
			if err := e.Decode(&p); err != nil {
				t.Fatal(err)
			}
			if want := events.Fingerprint(events.KindCommand, p.Cmd); p.Fingerprint != want {
				t.Fatalf("fingerprint of %q is not that of the recorded (redacted) text", p.Cmd)
			}
		}
		if e.Event == events.CredentialBound {
			var p events.CredentialPayload
			if err := e.Decode(&p); err != nil || p.Name != "api" || p.Source != "env:API" || p.Binding == nil || p.Binding.Hosts[0] != "api.test" {
				t.Fatalf("credential.bound = %s, %v", e.Payload, err)
			}
		}
	}
	if got := countOf(es, events.CredentialBound); got != 1 {
		t.Fatalf("credential.bound rows = %d, want 1", got)
	}
}

func countOf(es []events.Entry, ev events.Event) int {
	n := 0
	for _, e := range es {
		if e.Event == ev {
			n++
		}
	}
	return n
}

func TestCredentialsPatchRemoveAndErrors(t *testing.T) {
	ctx := context.Background()
	f := newFakeServer(t)
	b := &fakeBroker{}
	c, sb := newBrokerSandbox(t, f, b)
	creds := sb.Credentials()
	bad := []struct {
		name, value string
		binding     CredentialBinding
		source      CredentialSource
		field       string
	}{
		{"", "v", apiBinding, "", "name"},
		{"a b", "v", apiBinding, "", "name"},
		{"a", "", apiBinding, "", "value"},
		{"a", "v", CredentialBinding{Type: CredentialBearer}, "", "binding.Hosts"},
		{"a", "v", CredentialBinding{Hosts: []string{"h"}, Type: "oauth"}, "", "binding.Type"},
		{"a", "v", CredentialBinding{Hosts: []string{"h"}, Type: CredentialAPIKey}, "", "binding.Header"},
		{"a", "v", CredentialBinding{Hosts: []string{"h"}, Type: CredentialCustomHeaders}, "", "binding.Headers"},
		{"a", "secret-v", apiBinding, "inline:secret-v", "source"},
	}
	for _, tt := range bad {
		var oe *OptionError
		if err := creds.Set(ctx, tt.name, tt.value, tt.binding, tt.source); !errors.As(err, &oe) || oe.Field != tt.field {
			t.Errorf("Set(%q, %q, %+v) = %v, want an *OptionError on %s", tt.name, tt.value, tt.binding, err, tt.field)
		}
	}
	if len(b.vals) != 0 {
		t.Fatal("a rejected Set reached the broker")
	}

	if err := creds.Set(ctx, "api", testSecret, apiBinding, ""); err != nil {
		t.Fatal(err)
	}
	newValue := "pk-9876543210"
	if err := creds.Patch(ctx, "api", CredentialPatch{Value: &newValue}); err != nil {
		t.Fatalf("Patch: %v", err)
	}
	if res, _ := sb.Exec(ctx, "echo "+testSecret+" "+newValue).Wait(); res.Stdout != "[REDACTED:api#1] [REDACTED:api]\n" {
		t.Fatalf("after Patch: %q; want both values redacted", res.Stdout)
	}
	var oe *OptionError
	if err := creds.Patch(ctx, "api", CredentialPatch{}); !errors.As(err, &oe) {
		t.Fatalf("empty Patch = %v, want *OptionError", err)
	}
	var se *SandboxError
	if err := creds.Patch(ctx, "nope", CredentialPatch{Value: &newValue}); !errors.As(err, &se) || !errors.Is(err, ErrCredentialNotFound) {
		t.Fatalf("Patch of an unknown name = %v, want a *SandboxError wrapping ErrCredentialNotFound", err)
	}
	if err := creds.Remove(ctx, "api"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := creds.Remove(ctx, "never-set"); err != nil {
		t.Fatalf("Remove of an unknown name: %v", err)
	}
	if bs, err := creds.ListBindings(ctx); err != nil || len(bs) != 0 {
		t.Fatalf("ListBindings after Remove = %+v, %v", bs, err)
	}
	// A removed value stays redacted.
	if res, _ := sb.Exec(ctx, "echo "+testSecret).Wait(); res.Stdout != "[REDACTED:api#1]\n" {
		t.Fatalf("after Remove: %q", res.Stdout)
	}
	es := rows(t, c, sb)
	if countOf(es, events.CredentialBound) != 2 || countOf(es, events.CredentialRevoked) != 1 {
		t.Fatalf("rows:\n%s\nwant 2 credential.bound, 1 credential.revoked", describe(es))
	}

	b.fail = errors.New("broker down")
	if err := creds.Set(ctx, "other", "value-x", apiBinding, ""); !errors.As(err, &se) || !errors.Is(err, b.fail) {
		t.Fatalf("Set with a failing broker = %v, want a *SandboxError wrapping its error", err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := creds.Set(ctx, "a", "v", apiBinding, ""); !errors.Is(err, ErrClosed) {
		t.Fatalf("Set after Close = %v, want ErrClosed", err)
	}
}

func TestOutputRedactionAcrossChunks(t *testing.T) {
	var cs credState
	cs.addValue("k", "SECRET")
	o := &outputRedaction{stdout: cs.redactor().NewStream(), stderr: cs.redactor().NewStream()}
	var out []byte
	for _, part := range []string{"a SE", "CR", "ET b SEC"} {
		out = append(out, o.write(events.Stdout, []byte(part))...)
	}
	if got := string(o.write(events.Stderr, []byte("SECRET"))); got != "[REDACTED:k]" {
		t.Fatalf("stderr = %q", got)
	}
	for _, c := range o.flush() {
		if c.stream != events.Stdout {
			t.Fatalf("flushed %q on %s", c.data, c.stream)
		}
		out = append(out, c.data...)
	}
	if got, want := string(out), "a [REDACTED:k] b SEC"; got != want {
		t.Fatalf("stdout = %q, want %q", got, want)
	}
	var none *outputRedaction
	if got := string(none.write(events.Stdout, []byte("SECRET"))); got != "SECRET" || none.flush() != nil {
		t.Fatal("a nil redaction must pass output through")
	}
}

// BenchmarkExecRedaction measures an exec of 4000 output lines on a sandbox
// with a bound credential against the same exec on one without (baseline),
// through the fake server and an in-memory ledger.
func BenchmarkExecRedaction(b *testing.B) {
	f := newFakeServer(&testing.T{}) // its Cleanup never runs: closed here
	defer f.Close()
	line := strings.Repeat("x", 60) + " sk-live-not-quite " // near-misses make the redactor look ahead
	f.script = func(w http.ResponseWriter, fl http.Flusher, cmd string) {
		event(w, fl, map[string]any{"type": "init", "text": "cmd-1"})
		for range 4000 {
			event(w, fl, map[string]any{"type": "stdout", "text": line})
		}
		event(w, fl, map[string]any{"type": "execution_complete", "execution_time": 1})
	}
	ctx := context.Background()
	open := func(withCred bool) *Sandbox {
		c, err := New(Options{BaseURL: f.URL, Adapter: memory.New(), CredentialBroker: &fakeBroker{}})
		if err != nil {
			b.Fatal(err)
		}
		sb, err := c.Sandbox(ctx, SandboxOptions{Image: "img"})
		if err != nil {
			b.Fatal(err)
		}
		if withCred {
			if err := sb.Credentials().Set(ctx, "api", testSecret, apiBinding, ""); err != nil {
				b.Fatal(err)
			}
		}
		return sb
	}
	plain, redacted := open(false), open(true)
	defer plain.Close(ctx)
	defer redacted.Close(ctx)
	run := func(sb *Sandbox) time.Duration {
		start := time.Now()
		if _, err := sb.Exec(ctx, "out").Wait(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	run(plain) // warm up both
	run(redacted)
	const rounds = 8 // interleaved, so both see the same machine
	b.ResetTimer()
	var base, subj time.Duration
	for range b.N {
		for range rounds {
			base += run(plain)
			subj += run(redacted)
		}
	}
	n := float64(rounds * b.N)
	b.ReportMetric(float64(base)/1e6/n, "baseline-ms/exec")
	b.ReportMetric(float64(subj)/1e6/n, "redacted-ms/exec")
	b.ReportMetric(float64(subj)/float64(base), "ratio")
}
