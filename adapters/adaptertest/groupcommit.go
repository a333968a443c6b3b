package adaptertest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// fleetExecs appends, for each of sessions sessions at once (one goroutine
// each, as many sandboxes recorded through one ledger), a sandbox.created and
// execs execs the way the SDK records them: exec.started alone, then its
// output and exec.completed in one AppendBatch. It returns every error.
func fleetExecs(t *testing.T, s adapters.Ledger, sessions, execs int) error {
	t.Helper()
	c := ctx(t)
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for n := range sessions {
		wg.Go(func() {
			id := fmt.Sprintf("fleet-%d", n)
			if err := s.Append(c, entry(T0, "fleet", id, -1, events.SandboxCreated)); err != nil {
				errs <- fmt.Errorf("session %d: created: %w", n, err)
				return
			}
			for i := 1; i <= execs; i++ {
				ts := T0 + int64(i)
				if err := s.Append(c, entry(ts, "fleet", id, i, events.ExecStarted)); err != nil {
					errs <- fmt.Errorf("session %d: exec %d started: %w", n, i, err)
					return
				}
				if err := s.AppendBatch(c, []events.Entry{entry(ts, "fleet", id, i, events.ExecOutput),
					entry(ts, "fleet", id, i, events.ExecCompleted)}); err != nil {
					errs <- fmt.Errorf("session %d: exec %d completed: %w", n, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// checkFleetSession checks that session n of fleetExecs reads back whole and
// in order.
func checkFleetSession(t *testing.T, s adapters.Ledger, n, execs int) {
	t.Helper()
	id := fmt.Sprintf("fleet-%d", n)
	want := []events.Entry{entry(T0, "fleet", id, -1, events.SandboxCreated)}
	for i := 1; i <= execs; i++ {
		ts := T0 + int64(i)
		want = append(want, entry(ts, "fleet", id, i, events.ExecStarted),
			entry(ts, "fleet", id, i, events.ExecOutput), entry(ts, "fleet", id, i, events.ExecCompleted))
	}
	sameEntries(t, mustRead(t, s, "fleet", id), want)
}

// testManySessionsAtOnce: 32 sessions append at once, as a fleet's sandboxes
// recorded through one ledger do (a durable store commits them in shared
// transactions); each session reads back whole and in its own order.
func testManySessionsAtOnce(t *testing.T, s adapters.Ledger) {
	const sessions, execs = 32, 15
	if err := fleetExecs(t, s, sessions, execs); err != nil {
		t.Fatal(err)
	}
	for n := range sessions {
		checkFleetSession(t, s, n, execs)
	}
}

// testManySessionsDetails: the details of sessions appended at once, in
// shared transactions, count each session's own execs.
func testManySessionsDetails(t *testing.T, s adapters.Store) {
	const sessions, execs = 32, 10
	if err := fleetExecs(t, s, sessions, execs); err != nil {
		t.Fatal(err)
	}
	for n := range sessions {
		id := fmt.Sprintf("fleet-%d", n)
		d, err := s.GetSandboxDetails(ctx(t), "fleet", id)
		if err != nil {
			t.Fatal(err)
		}
		want := adapters.SandboxDetails{Name: "fleet", SandboxID: id, Status: adapters.StatusRunning, StartedAt: T0, ExecCount: execs, RunID: "run-" + id}
		if d == nil || *d != want {
			t.Fatalf("details of %s = %+v, want %+v", id, d, want)
		}
	}
}

// testCloseWhileAppending: Close, called while many sessions append, lets
// every append end with nil (written) or ErrClosed (refused), never with
// another error: what a store accepted before Close is written, not cut off.
func testCloseWhileAppending(t *testing.T, s adapters.Ledger) {
	const sessions = 16
	c := ctx(t)
	var wg sync.WaitGroup
	started := make(chan struct{}, sessions)
	errs := make(chan error, sessions)
	for n := range sessions {
		wg.Go(func() {
			id := fmt.Sprintf("closing-%d", n)
			for i := 1; ; i++ {
				err := s.Append(c, entry(T0+int64(i), "closing", id, i, events.ExecStarted))
				if i == 1 {
					started <- struct{}{}
				}
				if errors.Is(err, adapters.ErrClosed) {
					return
				}
				if err != nil {
					errs <- fmt.Errorf("session %d append %d: %w, want nil or ErrClosed", n, i, err)
					return
				}
			}
		})
	}
	for range sessions {
		<-started
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := s.Append(c, entry(T0, "closing", "after", -1, events.SandboxCreated)); !errors.Is(err, adapters.ErrClosed) {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}
}

// AppendErrorIsItsOwn checks that an append the store refuses fails only
// its own caller while many sessions append at once (in a store that commits
// them together, a shared transaction that fails is not the others' failure).
// The caller makes s refuse every entry of sandbox refused (a database
// trigger, say) before calling it; the other sessions read back whole.
func AppendErrorIsItsOwn(t *testing.T, s adapters.Ledger, refused string) {
	t.Helper()
	const sessions, execs = 24, 12
	c := ctx(t)
	var wg sync.WaitGroup
	var refusals sync.Map // append index -> error
	wg.Go(func() {
		for i := 1; i <= execs*2; i++ {
			refusals.Store(i, s.Append(c, entry(T0+int64(i), "fleet", refused, i, events.ExecStarted)))
		}
	})
	err := fleetExecs(t, s, sessions, execs)
	wg.Wait()
	if err != nil {
		t.Fatalf("the other sessions' appends failed: %v", err)
	}
	for i := 1; i <= execs*2; i++ {
		if err, _ := refusals.Load(i); err == nil {
			t.Fatalf("append %d of the refused session succeeded", i)
		}
	}
	if got := mustRead(t, s, "fleet", refused); len(got) != 0 {
		t.Fatalf("the refused session has %d entries, want none", len(got))
	}
	for n := range sessions {
		checkFleetSession(t, s, n, execs)
	}
}
