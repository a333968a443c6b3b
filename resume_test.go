package alineo_test

// End-to-end tests of checkpoint, resume, fork, restore and connect against an
// embedded sandboxd, once per ledger store.

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// commandCounter counts the commands and code runs sent to any execd.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/command") || strings.HasSuffix(r.URL.Path, "/code")) {
		c.n.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (c *commandCounter) options(o *alineo.Options) { o.HTTPClient = &http.Client{Transport: c} }

// out runs cmd and returns its stdout, failing the test on error.
func out(t *testing.T, ctx context.Context, sb *alineo.Sandbox, cmd string) string {
	t.Helper()
	res, err := sb.Exec(ctx, cmd).Wait()
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return res.Stdout
}

func closeLater(t *testing.T, sb *alineo.Sandbox) {
	t.Cleanup(func() { sb.Close(context.Background()) })
}

// created returns the payload of the session's sandbox.created.
func created(t *testing.T, store adapters.Store, sb *alineo.Sandbox) events.SandboxCreatedPayload {
	t.Helper()
	es, err := store.ReadAll(context.Background(), sb.Name(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Event == events.SandboxCreated {
			var p events.SandboxCreatedPayload
			if err := e.Decode(&p); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatalf("session %s/%s has no sandbox.created", sb.Name(), sb.ID())
	return events.SandboxCreatedPayload{}
}

const installCmd = "mkdir -p /opt/app && echo installed > /opt/app/dep && echo install-ok"

// TestResumeScenario is the scenario of core-sdk.md: an install-like step,
// a checkpoint, a second exec, then the process "dies" (the handle is dropped).
// The resumed handle replays the install at once, without reaching execd or
// writing a row, and runs the next exec live on the restored filesystem.
func TestResumeScenario(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		var cc commandCounter
		e := newEnv(t, store, cc.options)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "pipeline"})
		if got := out(t, ctx, sb, installCmd); got != "install-ok\n" {
			t.Fatalf("install = %q", got)
		}
		snap, err := sb.Checkpoint(ctx, "after-install")
		if err != nil {
			t.Fatal(err)
		}
		out(t, ctx, sb, "echo second")
		// The process dies here: sb is never used again.

		r, err := e.client.Resume(ctx, sb.ID(), alineo.ResumeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, r)
		if r.Name() != sb.Name() || r.RunID() != sb.RunID() || r.ID() == sb.ID() {
			t.Fatalf("resumed name, runId, id = %s, %s, %s; want %s, %s, a new id", r.Name(), r.RunID(), r.ID(), sb.Name(), sb.RunID())
		}
		p := created(t, store, r)
		if p.ResumedFrom != sb.ID() || p.SnapshotID != snap || p.RunID != sb.RunID() {
			t.Fatalf("sandbox.created = %+v; want resumedFrom %s, snapshotId %s, runId %s", p, sb.ID(), snap, sb.RunID())
		}
		if img := created(t, store, sb).Image; img == "" || p.Image != img {
			t.Fatalf("image recorded at create %q, at resume %q; want the same, not empty", img, p.Image)
		}
		before := cc.n.Load()
		start := time.Now()
		res, err := r.Exec(ctx, installCmd).Wait()
		took := time.Since(start)
		if err != nil || res.Stdout != "install-ok\n" || res.ExitCode != 0 {
			t.Fatalf("replayed install = %+v, %v", res, err)
		}
		if n := cc.n.Load() - before; n != 0 {
			t.Fatalf("the replayed exec sent %d commands to execd, want 0", n)
		}
		if took > 100*time.Millisecond {
			t.Errorf("replayed exec took %v, want it at once", took)
		}
		if es := e.rows(t, r); len(es) != 1 {
			t.Fatalf("resumed session has %d rows after the replay, want only sandbox.created:\n%s", len(es), summary(es))
		}
		// Step 2 was after the checkpoint: it runs live, on the restored filesystem.
		live := r.Exec(ctx, "cat /opt/app/dep")
		if res, err := live.Wait(); err != nil || res.Stdout != "installed\n" {
			t.Fatalf("live exec after resume = %+v, %v; want the installed file", res, err)
		}
		if live.Step() != 2 {
			t.Fatalf("live step = %d, want 2", live.Step())
		}
		if n := cc.n.Load() - before; n != 1 {
			t.Fatalf("execd got %d commands after resume, want 1", n)
		}
		var steps []int
		for _, en := range e.rows(t, r) {
			if en.Event == events.ExecCompleted {
				steps = append(steps, en.StepIndex)
			}
		}
		if !slices.Equal(steps, []int{2}) {
			t.Fatalf("resumed session completed steps %v, want [2]", steps)
		}
	})
}

// TestResumeTagsChainsDivergence resumes by tag, resumes a resumed sandbox,
// diverges, and resumes a session with no checkpoint.
func TestResumeTagsChainsDivergence(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		var cc commandCounter
		e := newEnv(t, store, cc.options)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{})
		out(t, ctx, sb, "echo a > /f1; echo one")
		if _, err := sb.Checkpoint(ctx, "t1"); err != nil {
			t.Fatal(err)
		}
		out(t, ctx, sb, "echo b > /f2; echo two")
		if _, err := sb.Checkpoint(ctx, "t2"); err != nil {
			t.Fatal(err)
		}
		out(t, ctx, sb, "echo three")

		// By tag: only step 1 is cached, and /f2 does not exist yet.
		r1, err := e.client.Resume(ctx, sb.ID(), alineo.ResumeOptions{Tag: "t1"})
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, r1)
		if got := out(t, ctx, r1, "echo a > /f1; echo one"); got != "one\n" {
			t.Fatalf("tag t1, step 1 = %q", got)
		}
		if got := out(t, ctx, r1, "cat /f1; ls /f2 2>/dev/null || echo no-f2"); got != "a\nno-f2\n" {
			t.Fatalf("tag t1, step 2 live = %q, want a and no-f2", got)
		}

		// The last checkpoint (t2): steps 1 and 2 replay; 3 runs live; checkpoint again.
		r2, err := e.client.Resume(ctx, sb.ID(), alineo.ResumeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, r2)
		before := cc.n.Load()
		if got := out(t, ctx, r2, "echo a > /f1; echo one") + out(t, ctx, r2, "echo b > /f2; echo two"); got != "one\ntwo\n" {
			t.Fatalf("replayed = %q", got)
		}
		if n := cc.n.Load() - before; n != 0 {
			t.Fatalf("replay sent %d commands, want 0", n)
		}
		if got := out(t, ctx, r2, "echo c > /f3; echo three-live"); got != "three-live\n" {
			t.Fatalf("live step 3 = %q", got)
		}
		if _, err := r2.Checkpoint(ctx, "r2"); err != nil {
			t.Fatal(err)
		}

		// Resume the resumed sandbox: every earlier result is still cached.
		r3, err := e.client.Resume(ctx, r2.ID(), alineo.ResumeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, r3)
		before = cc.n.Load()
		got := out(t, ctx, r3, "echo a > /f1; echo one") + out(t, ctx, r3, "echo b > /f2; echo two") +
			out(t, ctx, r3, "echo c > /f3; echo three-live")
		if got != "one\ntwo\nthree-live\n" {
			t.Fatalf("resume of a resume replayed %q", got)
		}
		if n := cc.n.Load() - before; n != 0 {
			t.Fatalf("resume of a resume sent %d commands for cached steps, want 0", n)
		}
		if got := out(t, ctx, r3, "cat /f1 /f2 /f3"); got != "a\nb\nc\n" {
			t.Fatalf("live step 4 = %q, want every file", got)
		}
		if p := created(t, store, r3); p.ResumedFrom != r2.ID() || p.RunID != sb.RunID() {
			t.Fatalf("sandbox.created = %+v, want resumedFrom %s and runId %s", p, r2.ID(), sb.RunID())
		}

		// A divergent call fails typed and writes nothing.
		r4, err := e.client.Resume(ctx, r2.ID(), alineo.ResumeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, r4)
		_, err = r4.Exec(ctx, "echo something else").Wait()
		var de *alineo.ReplayDivergedError
		if !errors.As(err, &de) || !errors.Is(err, alineo.ErrReplayDiverged) || de.Step != 1 ||
			de.Recorded != "echo a > /f1; echo one" || de.Got != "echo something else" {
			t.Fatalf("divergent call: %v, want a *ReplayDivergedError at step 1", err)
		}
		if es := e.rows(t, r4); len(es) != 1 {
			t.Fatalf("divergent call wrote rows:\n%s", summary(es))
		}

		// No checkpoint, no session, an unknown tag: 404.
		plain := e.sandbox(t, ctx, alineo.SandboxOptions{})
		out(t, ctx, plain, "echo x")
		for _, c := range []struct {
			id  string
			tag string
		}{{plain.ID(), ""}, {"no-such-sandbox", ""}, {sb.ID(), "no-such-tag"}} {
			_, err := e.client.Resume(ctx, c.id, alineo.ResumeOptions{Tag: c.tag})
			var ce *alineo.ClientError
			if !errors.As(err, &ce) || ce.Status != http.StatusNotFound {
				t.Errorf("Resume(%s, tag %q) = %v, want a 404 *ClientError", c.id, c.tag, err)
			}
		}
	})
}

// TestForkConcurrent forks twice at once: both inherit the parent's files, then
// diverge; the parent keeps running and lists both tags.
func TestForkConcurrent(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		parent := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "parent", Resources: alineo.Resources{CPU: "1", Memory: "512Mi"}})
		out(t, ctx, parent, "mkdir -p /shared && echo base > /shared/base")
		tags := []string{"fork-a", "fork-b"}
		forks := make([]*alineo.Sandbox, len(tags))
		errs := make([]error, len(tags))
		var wg sync.WaitGroup
		for i, tag := range tags {
			wg.Go(func() { forks[i], errs[i] = parent.Fork(ctx, tag) })
		}
		wg.Wait()
		for i := range tags {
			if errs[i] != nil {
				t.Fatalf("fork %s: %v", tags[i], errs[i])
			}
			closeLater(t, forks[i])
		}
		if forks[0].ID() == forks[1].ID() {
			t.Fatal("the forks have the same id")
		}
		for i, f := range forks {
			if got := out(t, ctx, f, "cat /shared/base"); got != "base\n" {
				t.Fatalf("fork %d sees %q, want the parent's file", i, got)
			}
			out(t, ctx, f, "echo "+tags[i]+" > /shared/own")
			if f.RunID() != parent.RunID() || !strings.HasPrefix(f.Name(), "fork-parent-") {
				t.Errorf("fork runId, name = %s, %s; want %s, fork-parent-…", f.RunID(), f.Name(), parent.RunID())
			}
			if p := created(t, store, f); p.ForkedFrom == "" || p.RunID != parent.RunID() || p.Image == "" || p.Image != created(t, store, parent).Image {
				t.Errorf("fork sandbox.created = %+v", p)
			}
		}
		for i, f := range forks {
			if got := out(t, ctx, f, "cat /shared/own"); got != tags[i]+"\n" {
				t.Fatalf("fork %d own file = %q, want %s", i, got, tags[i])
			}
		}
		if got := out(t, ctx, parent, "ls /shared"); got != "base\n" {
			t.Fatalf("parent sees %q, want only base", got)
		}
		cps, err := parent.ListCheckpoints(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range cps {
			got = append(got, c.Tag)
		}
		slices.Sort(got)
		if !slices.Equal(got, tags) {
			t.Fatalf("parent checkpoints %v, want %v", got, tags)
		}
		// A fork of a fork works too.
		ff, err := forks[0].Fork(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, ff)
		if got := out(t, ctx, ff, "cat /shared/own"); got != "fork-a\n" {
			t.Fatalf("fork of a fork sees %q", got)
		}
	})
}

// TestForkFailureLeaksNothing: a fork that cannot get a concurrency slot fails
// on its own, creates nothing and leaves the slots as they were.
func TestForkFailureLeaksNothing(t *testing.T) {
	store := &failForks{Store: storeKinds[0].open(t)}
	e := newEnv(t, store, func(o *alineo.Options) { o.MaxConcurrency = 2 })
	ctx := testCtx(t)
	parent := e.sandbox(t, ctx, alineo.SandboxOptions{})
	out(t, ctx, parent, "echo x > /x")
	f1, err := parent.Fork(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	live := e.liveSandboxes(t, ctx)
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = parent.Fork(sctx, "two")
	cancel()
	if err == nil {
		t.Fatal("a fork past MaxConcurrency succeeded")
	}
	if n := e.liveSandboxes(t, ctx); n != live {
		t.Fatalf("%d sandboxes live after the failed fork, want %d", n, live)
	}
	if err := f1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Forks that fail after their sandbox was created (the ledger refuses
	// sandbox.created), three at once over one free slot: each fails on its
	// own, deletes its sandbox and hands its slot on.
	store.fail.Store(true)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() { _, errs[i] = parent.Fork(ctx, "failing") })
	}
	wg.Wait()
	for i, err := range errs {
		var se *alineo.SandboxError
		if !errors.As(err, &se) || !errors.Is(err, errRefused) {
			t.Fatalf("failing fork %d: %v, want a *SandboxError wrapping the ledger's refusal", i, err)
		}
	}
	if n := e.liveSandboxes(t, ctx); n != 1 {
		t.Fatalf("%d sandboxes live after the failed forks, want only the parent", n)
	}
	store.fail.Store(false)
	sctx, cancel = context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	f3, err := parent.Fork(sctx, "three") // blocks forever if a failed fork kept its slot
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, f3)
	if got := out(t, ctx, f3, "cat /x"); got != "x\n" {
		t.Fatalf("fork sees %q", got)
	}
}

var errRefused = errors.New("refused by the test")

// failForks is a store that, while fail is set, refuses the sandbox.created
// of forks.
type failForks struct {
	adapters.Store
	fail atomic.Bool
}

func (s *failForks) refuses(e events.Entry) bool {
	return s.fail.Load() && e.Event == events.SandboxCreated && strings.HasPrefix(e.Name, "fork-")
}

func (s *failForks) Append(ctx context.Context, e events.Entry) error {
	if s.refuses(e) {
		return errRefused
	}
	return s.Store.Append(ctx, e)
}

func (s *failForks) AppendBatch(ctx context.Context, es []events.Entry) error {
	for _, e := range es {
		if s.refuses(e) {
			return errRefused
		}
	}
	return s.Store.AppendBatch(ctx, es)
}

// TestRestoreAndConnect restores a snapshot with a clean history and attaches
// to a running sandbox.
func TestRestoreAndConnect(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{})
		out(t, ctx, sb, "echo kept > /kept")
		snap, err := sb.Checkpoint(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		rs, err := e.client.RestoreSnapshot(ctx, snap, "restored", alineo.Resources{CPU: "1", Memory: "256Mi"})
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, rs)
		ex := rs.Exec(ctx, "cat /kept")
		if res, err := ex.Wait(); err != nil || res.Stdout != "kept\n" || ex.Step() != 1 {
			t.Fatalf("restored exec = %+v, %v, step %d; want kept at step 1", res, err, ex.Step())
		}
		if p := created(t, store, rs); p.FromSnapshot != snap || p.RunID != sb.RunID() || rs.RunID() != sb.RunID() {
			t.Fatalf("restore sandbox.created = %+v, want fromSnapshot %s and the runId %s inherited", p, snap, sb.RunID())
		}
		var ce *alineo.ClientError
		if _, err := e.client.RestoreSnapshot(ctx, "no-such-snapshot", "x", alineo.Resources{}); !errors.As(err, &ce) || ce.Status != http.StatusNotFound {
			t.Fatalf("RestoreSnapshot(unknown) = %v, want a 404 *ClientError", err)
		}
		if f, err := rs.Fork(ctx, ""); err != nil {
			t.Fatalf("fork of a restored sandbox: %v", err)
		} else {
			f.Close(ctx)
		}

		// Connect writes nothing, and cannot Fork without resources.
		conn, err := e.client.Connect(ctx, sb.ID(), "attached", alineo.ConnectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if es := e.rows(t, conn); len(es) != 0 {
			t.Fatalf("connect wrote:\n%s", summary(es))
		}
		if got := out(t, ctx, conn, "cat /kept"); got != "kept\n" {
			t.Fatalf("connected exec = %q", got)
		}
		if _, err := conn.Fork(ctx, ""); !errors.Is(err, alineo.ErrForkUnsupported) {
			t.Fatalf("Fork without resources = %v, want ErrForkUnsupported", err)
		}
		withRes, err := e.client.Connect(ctx, sb.ID(), "attached2", alineo.ConnectOptions{Resources: alineo.Resources{Memory: "256Mi"}})
		if err != nil {
			t.Fatal(err)
		}
		f, err := withRes.Fork(ctx, "via-connect")
		if err != nil {
			t.Fatalf("Fork with resources: %v", err)
		}
		f.Close(ctx)

		// 404 for an unknown sandbox, 409 for one that is not Running.
		if _, err := e.client.Connect(ctx, "no-such-sandbox", "x", alineo.ConnectOptions{}); !errors.As(err, &ce) || ce.Status != http.StatusNotFound {
			t.Fatalf("Connect(unknown) = %v, want a 404 *ClientError", err)
		}
		if err := sb.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.client.Connect(ctx, sb.ID(), "x", alineo.ConnectOptions{}); !errors.As(err, &ce) || ce.Status != http.StatusConflict {
			t.Fatalf("Connect(paused) = %v, want a 409 *ClientError", err)
		}
		for _, h := range []*alineo.Sandbox{conn, withRes} { // each deletes sb
			if err := h.Close(ctx); err != nil {
				t.Errorf("close connected handle: %v", err)
			}
		}
	})
}

// BenchmarkForkToFirstExec times Fork plus the first exec on the fork, p50 of
// a fixed number of forks. The baseline, in the same run, is a new sandbox
// from the image plus its first exec.
func BenchmarkForkToFirstExec(b *testing.B) {
	const n = 8
	store, err := sqlite.Open(testenv.SQLitePath(b), sqlite.Config{Synchronous: "NORMAL"})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	client, err := alineo.New(alineo.Options{BaseURL: testenv.Sandboxd(b), Adapter: store})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	parent, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host"})
	if err != nil {
		b.Fatal(err)
	}
	defer parent.Close(ctx)
	if _, err := parent.Exec(ctx, "mkdir -p /w && head -c 1048576 /dev/urandom > /w/blob && echo ok").Wait(); err != nil {
		b.Fatal(err)
	}
	first := func(sb *alineo.Sandbox) {
		if _, err := sb.Exec(ctx, "ls /").Wait(); err != nil {
			b.Fatal(err)
		}
	}
	var fork, fresh []time.Duration
	for b.Loop() {
		for range n {
			start := time.Now()
			sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host"})
			if err != nil {
				b.Fatal(err)
			}
			first(sb)
			fresh = append(fresh, time.Since(start))
			sb.Close(ctx)

			start = time.Now()
			f, err := parent.Fork(ctx, "")
			if err != nil {
				b.Fatal(err)
			}
			first(f)
			fork = append(fork, time.Since(start))
			f.Close(ctx)
		}
	}
	p50 := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2]) / float64(time.Millisecond)
	}
	b.ReportMetric(p50(fork), "fork-p50-ms")
	b.ReportMetric(p50(fresh), "new-p50-ms")
	b.ReportMetric(p50(fork)/p50(fresh), "ratio")
}

// countingStore counts the reads of each session.
type countingStore struct {
	adapters.Store
	mu    sync.Mutex
	reads map[string]int
}

func (s *countingStore) ReadAll(ctx context.Context, name, sandboxID string) ([]events.Entry, error) {
	s.mu.Lock()
	s.reads[name+"/"+sandboxID]++
	s.mu.Unlock()
	return s.Store.ReadAll(ctx, name, sandboxID)
}

func (s *countingStore) readsOf(name, id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[name+"/"+id]
}

// TestResumeReadsTheLedgerOnce: Resume reads the session's entries once, for
// its replay cache and its network state alike, found by name or by id.
func TestResumeReadsTheLedgerOnce(t *testing.T) {
	store := &countingStore{Store: storeKinds[1].open(t), reads: map[string]int{}}
	e := newEnv(t, store)
	ctx := testCtx(t)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "once"})
	out(t, ctx, sb, "echo one")
	if _, err := sb.Checkpoint(ctx, ""); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"once", ""} {
		before := store.readsOf("once", sb.ID())
		r, err := e.client.Resume(ctx, sb.ID(), alineo.ResumeOptions{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, r)
		if n := store.readsOf("once", sb.ID()) - before; n != 1 {
			t.Errorf("Resume (name %q) read the session %d times, want 1", name, n)
		}
		if res, err := r.Exec(ctx, "echo one").Wait(); err != nil || res.Stdout != "one\n" {
			t.Fatalf("replayed exec = %+v, %v", res, err)
		}
	}
}
