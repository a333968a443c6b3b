package alineo_test

// The options of fork, restore and environment spawns, as the TypeScript
// SDK's sb.fork(tag, runId), restoreSnapshot(snapshotId, name, resources,
// runId) and env.sandbox({env, shell}) take them, against an embedded
// sandboxd, once per ledger store.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/audit"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/testenv"
)

// createdRequests records the body of every sandbox create request.
type createdRequests struct {
	mu     sync.Mutex
	bodies []opensandbox.CreateSandboxRequest
}

func (c *createdRequests) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/sandboxes") && r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		var req opensandbox.CreateSandboxRequest
		if err := json.Unmarshal(b, &req); err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.bodies = append(c.bodies, req)
		c.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (c *createdRequests) options(o *alineo.Options) { o.HTTPClient = &http.Client{Transport: c} }

// last returns the body of the last create request.
func (c *createdRequests) last(t *testing.T) opensandbox.CreateSandboxRequest {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bodies) == 0 {
		t.Fatal("no sandbox was created")
	}
	return c.bodies[len(c.bodies)-1]
}

// createdJSON returns the session's sandbox.created payload as JSON text.
func createdJSON(t *testing.T, store adapters.Store, sb *alineo.Sandbox) map[string]any {
	t.Helper()
	es, err := store.ReadAll(context.Background(), sb.Name(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Event == events.SandboxCreated {
			var m map[string]any
			if err := json.Unmarshal(e.Payload, &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("session %s has no sandbox.created", sb.Name())
	return nil
}

// notRecorded fails the test if a row of sb's session other than an exec's
// (which record what the test's commands print) holds one of secrets.
func notRecorded(t *testing.T, e *env, sb *alineo.Sandbox, secrets ...string) {
	t.Helper()
	for _, en := range e.rows(t, sb) {
		if en.StepIndex != events.SandboxLevel {
			continue
		}
		for _, s := range secrets {
			if bytes.Contains(en.Payload, []byte(s)) {
				t.Errorf("%s of %s records %q: %s", en.Event, sb.Name(), s, en.Payload)
			}
		}
	}
}

func TestForkOptions(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		var reqs createdRequests
		e := newEnv(t, store, reqs.options)
		ctx := testCtx(t)
		parent := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "forked", Shell: "/bin/bash",
			Resources: alineo.Resources{CPU: "1", Memory: "512Mi"},
			Env:       map[string]string{"FROM_PARENT": "p-secret", "OVER": "parent-secret"}})
		out(t, ctx, parent, "echo base > /base")

		// No options: the parent's run id, resources, env and shell.
		f1, err := parent.Fork(ctx, "plain")
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, f1)
		if got := out(t, ctx, f1, `echo "$0 $FROM_PARENT $OVER"; cat /base`); got != "/bin/bash p-secret parent-secret\nbase\n" {
			t.Fatalf("plain fork sees %q; want the parent's shell, env and files", got)
		}
		if got := createdJSON(t, store, f1); got["runId"] != parent.RunID() || got["forkedFrom"] == "" ||
			got["resources"].(map[string]any)["memory"] != "512Mi" {
			t.Fatalf("plain fork sandbox.created = %v", got)
		}
		// The fork's chain starts at its parent's head: the checkpoint.
		pes, err := store.ReadAll(ctx, parent.Name(), parent.ID())
		if err != nil {
			t.Fatal(err)
		}
		fes, err := store.ReadAll(ctx, f1.Name(), f1.ID())
		if err != nil {
			t.Fatal(err)
		}
		if p, f := audit.Check(pes), audit.Check(fes); p.State != audit.Chained || f.State != audit.Chained || f.ForkedFrom == "" {
			t.Fatalf("chains: parent %s, fork %s; want both chained, the fork from its parent", p, f)
		}
		if cp, err := store.LastCheckpoint(ctx, parent.Name(), parent.ID()); err != nil || cp.Hash != audit.Check(fes).ForkedFrom {
			t.Fatalf("fork's chain starts at %s, want the parent's checkpoint %+v (%v)", audit.Check(fes).ForkedFrom, cp, err)
		}

		// Options: the run id, a resource, env over the parent's.
		f2, err := parent.Fork(ctx, "opts", alineo.ForkOptions{RunID: "run-forked",
			Resources: alineo.Resources{Memory: "256Mi"}, Env: map[string]string{"OVER": "fork-secret", "NEW": "new-secret"}})
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, f2)
		if got := out(t, ctx, f2, `echo "$FROM_PARENT $OVER $NEW"`); got != "p-secret fork-secret new-secret\n" {
			t.Fatalf("fork with options sees %q", got)
		}
		if f2.RunID() != "run-forked" || !strings.HasPrefix(f2.Name(), "fork-forked-") {
			t.Fatalf("fork runId, name = %s, %s", f2.RunID(), f2.Name())
		}
		req := reqs.last(t)
		if req.Metadata["runId"] != "run-forked" || req.ResourceLimits["cpu"] != "1" || req.ResourceLimits["memory"] != "256Mi" ||
			req.Env["OVER"] != "fork-secret" || req.Env["FROM_PARENT"] != "p-secret" || req.SnapshotID == "" {
			t.Fatalf("fork create request = %+v", req)
		}
		got := createdJSON(t, store, f2)
		if got["runId"] != "run-forked" || got["forkedFrom"] != req.SnapshotID || got["sandboxId"] != f2.ID() {
			t.Fatalf("fork sandbox.created = %v", got)
		}
		if res := got["resources"].(map[string]any); res["cpu"] != "1" || res["memory"] != "256Mi" {
			t.Fatalf("fork sandbox.created resources = %v", res)
		}
		notRecorded(t, e, f2, "secret", "OVER")

		// A fork of the fork inherits all of it.
		ff, err := f2.Fork(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, ff)
		if got := out(t, ctx, ff, `echo "$0 $OVER $NEW"`); got != "/bin/bash fork-secret new-secret\n" || ff.RunID() != "run-forked" {
			t.Fatalf("fork of the fork sees %q, runId %s", got, ff.RunID())
		}
		if res := createdJSON(t, store, ff)["resources"].(map[string]any); res["memory"] != "256Mi" {
			t.Fatalf("fork of the fork resources = %v", res)
		}

		// Bad options: a typed error, and nothing done (no checkpoint).
		before, err := parent.ListCheckpoints(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			field string
			opts  []alineo.ForkOptions
		}{
			{"ForkOptions.Env", []alineo.ForkOptions{{Env: map[string]string{"A=B": "x"}}}},
			{"ForkOptions.Env", []alineo.ForkOptions{{Env: map[string]string{"": "x"}}}},
			{"ForkOptions.Env", []alineo.ForkOptions{{Env: map[string]string{"A": "x\x00y"}}}},
			{"ForkOptions.RunID", []alineo.ForkOptions{{RunID: "  "}}},
			{"ForkOptions.RunID", []alineo.ForkOptions{{RunID: "a\nb"}}},
			{"ForkOptions.Resources.CPU", []alineo.ForkOptions{{Resources: alineo.Resources{CPU: "lots"}}}},
			{"ForkOptions.Resources.Memory", []alineo.ForkOptions{{Resources: alineo.Resources{Memory: "-1Gi"}}}},
			{"ForkOptions.Resources.GPU", []alineo.ForkOptions{{Resources: alineo.Resources{GPU: "one"}}}},
			{"ForkOptions", []alineo.ForkOptions{{}, {}}},
		} {
			_, err := parent.Fork(ctx, "bad", c.opts...)
			var oe *alineo.OptionError
			if !errors.As(err, &oe) || oe.Field != c.field {
				t.Errorf("Fork(%+v) = %v, want an *OptionError on %s", c.opts, err, c.field)
			}
		}
		after, err := parent.ListCheckpoints(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) {
			t.Fatalf("bad forks recorded %d checkpoints", len(after)-len(before))
		}

		// A connected handle without resources forks once the options give them.
		conn, err := e.client.Connect(ctx, parent.ID(), "attached", alineo.ConnectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Fork(ctx, "", alineo.ForkOptions{RunID: "r"}); !errors.Is(err, alineo.ErrForkUnsupported) {
			t.Fatalf("Fork without resources = %v, want ErrForkUnsupported", err)
		}
		fc, err := conn.Fork(ctx, "", alineo.ForkOptions{Resources: alineo.Resources{CPU: "500m", Memory: "256Mi"}, Env: map[string]string{"X": "1"}})
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, fc)
		if got := out(t, ctx, fc, `echo "$X:$FROM_PARENT"`); got != "1:\n" {
			t.Fatalf("fork of a connected handle sees %q; want its options' env alone", got)
		}
		if res := createdJSON(t, store, fc)["resources"].(map[string]any); res["cpu"] != "500m" || res["memory"] != "256Mi" {
			t.Fatalf("fork of a connected handle resources = %v", res)
		}
	})
}

func TestRestoreSnapshotOptions(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		var reqs createdRequests
		e := newEnv(t, store, reqs.options)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "src"})
		out(t, ctx, sb, "echo kept > /kept")
		snap, err := sb.Checkpoint(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		rs, err := e.client.RestoreSnapshot(ctx, snap, "restored", alineo.Resources{Memory: "256Mi"},
			alineo.RestoreOptions{RunID: "run-restored", Env: map[string]string{"R": "r-secret"}, Shell: "/bin/bash"})
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, rs)
		if got := out(t, ctx, rs, `echo "$0 $R"; cat /kept`); got != "/bin/bash r-secret\nkept\n" {
			t.Fatalf("restored sandbox sees %q", got)
		}
		got := createdJSON(t, store, rs)
		if rs.RunID() != "run-restored" || got["runId"] != "run-restored" || got["fromSnapshot"] != snap || reqs.last(t).Metadata["runId"] != "run-restored" {
			t.Fatalf("restore: runId %s, sandbox.created %v", rs.RunID(), got)
		}
		notRecorded(t, e, rs, "r-secret")
		// Its forks keep its env and run id.
		f, err := rs.Fork(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, f)
		if got := out(t, ctx, f, `echo "$R"`); got != "r-secret\n" || f.RunID() != "run-restored" {
			t.Fatalf("fork of the restored sandbox sees %q, runId %s", got, f.RunID())
		}

		var oe *alineo.OptionError
		for _, o := range []alineo.RestoreOptions{{RunID: "\t"}, {Env: map[string]string{"A=B": ""}}, {Shell: "/bin/sh\x00"}} {
			if _, err := e.client.RestoreSnapshot(ctx, snap, "bad", alineo.Resources{}, o); !errors.As(err, &oe) {
				t.Errorf("RestoreSnapshot(%+v) = %v, want an *OptionError", o, err)
			}
		}
		if _, err := e.client.RestoreSnapshot(ctx, snap, "bad", alineo.Resources{}, alineo.RestoreOptions{}, alineo.RestoreOptions{}); !errors.As(err, &oe) {
			t.Errorf("RestoreSnapshot with two options = %v, want an *OptionError", err)
		}
	})
}

func TestEnvironmentSandboxOptions(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		var reqs createdRequests
		e := newEnv(t, store, reqs.options)
		ctx := testCtx(t)
		env := e.client.Environment("opts", alineo.EnvOptions{Image: "host", Shell: "/bin/sh", SetupVersion: "1",
			Setup: func(ctx context.Context, sb *alineo.Sandbox) error {
				_, err := sb.Exec(ctx, "echo built > /built").Wait()
				return err
			}})
		sb1, err := env.Sandbox(ctx, alineo.EnvSandboxOptions{Env: map[string]string{"E": "e-secret"}, Shell: "/bin/bash", RunID: "run-env"})
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, sb1)
		if got := out(t, ctx, sb1, `echo "$0 $E"; cat /built`); got != "/bin/bash e-secret\nbuilt\n" {
			t.Fatalf("spawned sandbox sees %q; want its shell, env and the build", got)
		}
		got := createdJSON(t, store, sb1)
		if sb1.RunID() != "run-env" || got["runId"] != "run-env" || got["fromEnvironment"] != "opts" || got["snapshotId"] == "" {
			t.Fatalf("spawn: runId %s, sandbox.created %v", sb1.RunID(), got)
		}
		if req := reqs.last(t); req.Env["E"] != "e-secret" || req.Metadata["runId"] != "run-env" {
			t.Fatalf("spawn create request = %+v", req)
		}
		notRecorded(t, e, sb1, "e-secret")

		// Without options: the environment's shell, no env, a new run id.
		sb2, err := env.Sandbox(ctx)
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, sb2)
		if got := out(t, ctx, sb2, `echo "$0 $E"`); got != "/bin/sh \n" || sb2.RunID() == "run-env" || sb2.RunID() == "" {
			t.Fatalf("plain spawn sees %q, runId %s", got, sb2.RunID())
		}

		var oe *alineo.OptionError
		for _, o := range []alineo.EnvSandboxOptions{{Env: map[string]string{"": "x"}}, {RunID: " "}, {Shell: "\x00"}} {
			if _, err := env.Sandbox(ctx, o); !errors.As(err, &oe) {
				t.Errorf("Sandbox(%+v) = %v, want an *OptionError", o, err)
			}
		}
	})
}

// TestCreatedPayloadsAsTheTypeScriptSDK compares the sandbox.created of a
// fork, a restore and an environment spawn made with options to the
// sandbox_created rows the TypeScript SDK wrote for its sb.fork,
// restoreSnapshot and env.sandbox (its extras.db fixture): every member it
// writes is there under its name, and the only others are ours (resources,
// image).
func TestCreatedPayloadsAsTheTypeScriptSDK(t *testing.T) {
	ctx := testCtx(t)
	ts, err := sqlite.Open(testenv.Fixture(t, adaptertest.TypeScriptExtras.File), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	details, err := ts.ListAllSandboxDetails(ctx, adapters.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kindOf := func(m map[string]any) string {
		for _, k := range []string{"forkedFrom", "fromSnapshot", "fromEnvironment"} {
			if _, ok := m[k]; ok {
				return k
			}
		}
		return ""
	}
	tsKeys := map[string][]string{}
	for _, d := range details {
		es, err := ts.ReadAll(ctx, d.Name, d.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if !e.Event.Is(events.SandboxCreated) {
				continue
			}
			var m map[string]any
			if err := e.Decode(&m); err != nil {
				t.Fatal(err)
			}
			if k := kindOf(m); k != "" {
				tsKeys[k] = slices.Sorted(maps.Keys(m))
			}
		}
	}
	if len(tsKeys) != 3 {
		t.Fatalf("the fixture's fork, restore and spawn payloads: %v", tsKeys)
	}

	store := memory.New()
	e := newEnv(t, store)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "ts-like"})
	fork, err := sb.Fork(ctx, "f1", alineo.ForkOptions{RunID: "run-f", Env: map[string]string{"A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, fork)
	snap, err := sb.Checkpoint(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	restored, err := e.client.RestoreSnapshot(ctx, snap, "ts-restored", alineo.Resources{}, alineo.RestoreOptions{RunID: "run-r"})
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, restored)
	spawned, err := e.client.Environment("tsenv", alineo.EnvOptions{Image: "host"}).Sandbox(ctx, alineo.EnvSandboxOptions{RunID: "run-e"})
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, spawned)
	ours := map[string]bool{"resources": true, "image": true}
	for _, sb := range []*alineo.Sandbox{fork, restored, spawned} {
		m := createdJSON(t, store, sb)
		k := kindOf(m)
		for _, key := range tsKeys[k] {
			if _, ok := m[key]; !ok {
				t.Errorf("%s: sandbox.created %v lacks %q, which the TypeScript SDK writes", k, m, key)
			}
		}
		for key := range m {
			if !slices.Contains(tsKeys[k], key) && !ours[key] {
				t.Errorf("%s: sandbox.created has %q, which the TypeScript SDK does not write", k, key)
			}
		}
		if m["runId"] != sb.RunID() || !strings.HasPrefix(sb.RunID(), "run-") {
			t.Errorf("%s: runId %v, handle's %s", k, m["runId"], sb.RunID())
		}
	}
}
