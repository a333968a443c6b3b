package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// testQueue opens a bus on a fresh embedded NATS server (closed with the
// test) and the job queue on it.
func testQueue(t *testing.T, cfg QueueConfig) (*bus.Bus, *Queue) {
	t.Helper()
	b, err := bus.Open(context.Background(), bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	q, err := OpenQueue(context.Background(), b.JetStream(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, q
}

// fetchJob takes the next job message from q's consumer, as a worker's
// delivery, failing the test when none comes within 5 s.
func fetchJob(t *testing.T, q *Queue) jetstream.Msg {
	t.Helper()
	cons, err := q.consumer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var m jetstream.Msg
	for msg := range batch.Messages() {
		m = msg
	}
	if m == nil {
		t.Fatal("no job delivered")
	}
	return m
}

// submitOne submits a job of one exec step to q and returns its status.
func submitOne(t *testing.T, q *Queue) Status {
	t.Helper()
	st, err := q.Submit(context.Background(), Spec{Name: "s", Image: "i", Steps: []Step{{Exec: &ExecStep{Command: "true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// sdkOn returns a bus ledger on b and an SDK client writing to it on the
// sandboxd at url (a fresh one when url is ""), closed with the test.
func sdkOn(t *testing.T, b *bus.Bus, url string) (*bus.Ledger, *alineo.Client) {
	t.Helper()
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if url == "" {
		url = testenv.Sandboxd(t)
	}
	client, err := alineo.New(alineo.Options{BaseURL: url, Adapter: l})
	if err != nil {
		t.Fatal(err)
	}
	return l, client
}

// An attempt whose job a later delivery took over is superseded: its failure
// (its sandbox ended by the new owner) must not become the job's (found by
// the 30-minute soak: a job recorded failed at step 6 while its next attempt
// finished it).
func TestSuperseded(t *testing.T) {
	ctx := context.Background()
	_, q := testQueue(t, QueueConfig{})
	st := submitOne(t, q)
	w := &Worker{Queue: q}
	if w.superseded(ctx, st.ID, 1) {
		t.Fatal("a queued job is superseded for attempt 1")
	}
	if _, err := q.update(ctx, st.ID, func(s *Status) { s.Attempt, s.Worker, s.State = 2, "w2", StateRunning }); err != nil {
		t.Fatal(err)
	}
	if !w.superseded(ctx, st.ID, 1) {
		t.Error("attempt 1 is not superseded once attempt 2 owns the job")
	}
	if w.superseded(ctx, st.ID, 2) {
		t.Error("the owning attempt 2 is superseded")
	}
	if w.superseded(ctx, "0123456789abcdef0123456789abcdef", 1) {
		t.Error("an unknown job is superseded")
	}
}

// An attempt stops before its next step once a later delivery owns the job,
// without waiting for the new owner's fence: a host cut off past its lease
// whose link comes back before the takeover must not go on running the
// job's steps beside the new owner (the multi-host soak). A cancel stops it
// too; a status it cannot read does not.
func TestStopBeforeStep(t *testing.T) {
	ctx := context.Background()
	_, q := testQueue(t, QueueConfig{})
	st := submitOne(t, q)
	if _, err := q.update(ctx, st.ID, func(s *Status) { s.Attempt, s.Worker, s.State = 1, "w1", StateRunning }); err != nil {
		t.Fatal(err)
	}
	w := &Worker{Queue: q}
	stop := w.stopBeforeStep(st.ID, 1)
	if err := stop(ctx, 3); err != nil {
		t.Fatalf("the owning attempt stopped: %v", err)
	}
	if err := w.stopBeforeStep("0123456789abcdef0123456789abcdef", 1)(ctx, 3); err != nil {
		t.Errorf("a status that cannot be read stopped the run: %v", err)
	}
	if _, err := q.update(ctx, st.ID, func(s *Status) { s.Attempt, s.Worker = 2, "w2" }); err != nil {
		t.Fatal(err)
	}
	err := stop(ctx, 3)
	if !errors.Is(err, errSuperseded) || !strings.Contains(err.Error(), "before step 4") {
		t.Errorf("attempt 1 after attempt 2's claim: %v, want errSuperseded before step 4", err)
	}
	if err := w.stopBeforeStep(st.ID, 2)(ctx, 3); err != nil {
		t.Errorf("the new owner stopped: %v", err)
	}
	if _, err := q.Cancel(ctx, st.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := w.stopBeforeStep(st.ID, 2)(ctx, 3); !errors.Is(err, ErrCanceled) {
		t.Errorf("after a cancel: %v, want ErrCanceled", err)
	}
}

// A job handed back waits a second after its first delivery, twice as long
// after each further one, at most maxHandBackDelay: the default ten
// deliveries outlast a store outage of a minute.
func TestHandBackDelay(t *testing.T) {
	want := []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, at := range []int{0, 1, 2, 3, 4, 5, 6, 100} {
		if got := handBackDelay(at); got != want[i] {
			t.Errorf("handBackDelay(%d) = %v, want %v", at, got, want[i])
		}
	}
	var spent time.Duration
	for a := 1; a < DefaultMaxDeliver; a++ {
		spent += handBackDelay(a)
	}
	if spent < time.Minute {
		t.Errorf("the default %d deliveries are spent within %v, want at least a minute", DefaultMaxDeliver, spent)
	}
}

// An attempt that settles a job a later delivery holds (its own superseded
// check could not read the status) leaves the status and the message alone:
// found by the soak, where attempt 1 failed the job and terminated its
// message while attempt 2 ran it, and the job stayed requeued for good.
func TestSupersededFinishLeavesTheJob(t *testing.T) {
	ctx := context.Background()
	_, q := testQueue(t, QueueConfig{})
	st := submitOne(t, q)
	m := fetchJob(t, q)
	if _, err := q.update(ctx, st.ID, func(s *Status) { s.Attempt, s.Worker, s.State = 2, "w2", StateRunning }); err != nil {
		t.Fatal(err)
	}
	w := &Worker{Queue: q}
	if err := w.init(); err == nil {
		t.Fatal("init without a Client succeeded")
	}
	w.Logger = slog.New(slog.DiscardHandler)
	w.finish(ctx, m, st.ID, StateFailed, "step 5 failed", 1)
	w.requeue(ctx, m, st.ID, 1, "handed back", 0)
	got, err := q.Status(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateRunning || got.Attempt != 2 || got.Error != "" {
		t.Errorf("status = %+v, want attempt 2's, running", got)
	}
	if n, err := q.Pending(ctx); err != nil || n != 1 {
		t.Errorf("pending = %d, %v; want the job's message kept for attempt 2", n, err)
	}
}

// An attempt whose first status write comes after a later delivery's (it was
// retried through a NATS failover) does not claim the job back: found by the
// 30-minute soak, where attempt 1 then ran beside attempt 2 and recorded a
// step after attempt 2's checkpoint.
func TestClaimLeavesALaterAttemptsJob(t *testing.T) {
	ctx := context.Background()
	_, q := testQueue(t, QueueConfig{})
	spec := Spec{Name: "s", Image: "i", Steps: []Step{{Exec: &ExecStep{Command: "true"}}}}
	st, err := q.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	w1 := &Worker{Queue: q, ID: "w1"}
	jm := Message{ID: st.ID, Spec: spec}
	if outcome, err := w1.claim(ctx, jm, 1); err != nil || outcome != claimed {
		t.Fatalf("attempt 1 claims a queued job: %v, %v", outcome, err)
	}
	w2 := &Worker{Queue: q, ID: "w2"}
	if outcome, err := w2.claim(ctx, jm, 2); err != nil || outcome != claimed {
		t.Fatalf("attempt 2 takes the job over: %v, %v", outcome, err)
	}
	if outcome, err := w1.claim(ctx, jm, 1); err != nil || outcome != claimLater {
		t.Fatalf("attempt 1 claims it again after attempt 2: %v, %v; want claimLater", outcome, err)
	}
	got, err := q.Status(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Attempt != 2 || got.Worker != "w2" || got.State != StateRunning {
		t.Errorf("status = %+v, want attempt 2's", got)
	}
}

// A redelivery does not reopen a job that its previous attempt settled after
// the redelivery read the status: found by the 30-minute soak (seed 980282),
// where attempt 2 then marked a succeeded job running, its takeover failed,
// and its Nak went to a message attempt 1 had acknowledged: the job stayed
// running for good.
func TestClaimLeavesASettledJob(t *testing.T) {
	ctx := context.Background()
	_, q := testQueue(t, QueueConfig{})
	spec := Spec{Name: "s", Image: "i", Steps: []Step{{Exec: &ExecStep{Command: "true"}}}}
	for _, state := range []State{StateSucceeded, StateFailed} {
		st, err := q.Submit(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		w1, w2 := &Worker{Queue: q, ID: "w1"}, &Worker{Queue: q, ID: "w2"}
		jm := Message{ID: st.ID, Spec: spec}
		if outcome, err := w1.claim(ctx, jm, 1); err != nil || outcome != claimed {
			t.Fatalf("attempt 1 claims a queued job: %v, %v", outcome, err)
		}
		if _, err := q.update(ctx, st.ID, func(s *Status) { s.State = state }); err != nil {
			t.Fatal(err)
		}
		if outcome, err := w2.claim(ctx, jm, 2); err != nil || outcome != claimSettled {
			t.Fatalf("attempt 2 claims a job attempt 1 left %s: %v, %v; want claimSettled", state, outcome, err)
		}
		got, err := q.Status(ctx, st.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != state || got.Attempt != 1 || got.Worker != "w1" {
			t.Errorf("status = %+v, want attempt 1's, %s", got, state)
		}
	}
}

// takeoverWatch is a Fencer that calls before ahead of every Takeover.
type takeoverWatch struct {
	Fencer
	before func(sandboxID string)
}

func (f takeoverWatch) Takeover(ctx context.Context, sandboxID string) (uint64, error) {
	f.before(sandboxID)
	return f.Fencer.Takeover(ctx, sandboxID)
}

// A job redelivered to the worker that still runs it (its lease lapsed
// while the heartbeats failed through a NATS outage) is taken over from the
// attempt running here: that attempt is cancelled and has ended before the
// takeover fences its sandbox. The fence alone cannot stop it, since both
// deliveries write through the one Ledger the fence names (found by the
// soak, seed 662709: attempt 1 recorded its final step after attempt 2's
// fence, and the job finished in two sandboxes).
func TestRedeliveryToTheSameWorkerEndsItsEarlierAttempt(t *testing.T) {
	ctx := context.Background()
	b, q := testQueue(t, QueueConfig{AckWait: time.Second})
	l, client := sdkOn(t, b, "")
	const slow = "sleep 5; echo two"
	spec := Spec{Name: "again", Image: "host", Steps: []Step{
		{Exec: &ExecStep{Command: "echo one"}},
		{Checkpoint: &CheckpointStep{Tag: "mid"}},
		{Exec: &ExecStep{Command: slow}},
		{Exec: &ExecStep{Command: "echo three"}},
	}}
	st, err := q.SubmitAs(ctx, spec, "alice")
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{})
	w := &Worker{Queue: q, Client: client, ID: "w", Heartbeat: time.Hour, DrainTimeout: 20 * time.Second}
	// Attempt 1 settled returns from handle at once; one still in its
	// `sleep 5` would take seconds more.
	w.Ledger = takeoverWatch{Fencer: l, before: func(id string) {
		select {
		case <-first:
		case <-time.After(2 * time.Second):
			t.Errorf("Takeover of %s while this worker's attempt 1 still runs", id)
		}
	}}
	if err := w.init(); err != nil {
		t.Fatal(err)
	}

	m1 := fetchJob(t, q)
	go func() { w.handle(ctx, m1); close(first) }()
	var one Status
	testenv.Eventually(t, 30*time.Second, func() error {
		one, err = q.Status(ctx, st.ID)
		if err != nil || one.Checkpoint == nil || one.Done < 2 {
			return fmt.Errorf("attempt 1 not past its checkpoint: %+v, %v", one, err)
		}
		return nil
	})
	// No heartbeat: the lease lapses and the job comes to this worker again.
	w.handle(ctx, fetchJob(t, q))
	select {
	case <-first:
	default:
		t.Fatal("attempt 1 still runs after attempt 2 finished")
	}

	got, err := q.Status(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateSucceeded || got.Attempt != 2 || got.SandboxID == one.SandboxID {
		t.Fatalf("status %+v, want succeeded by attempt 2 in a sandbox other than attempt 1's %s", got, one.SandboxID)
	}
	es, err := l.ReadAll(ctx, spec.Name, one.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		var p events.ExecStartedPayload
		if e.Event == events.ExecStarted && e.Decode(&p) == nil && p.Text() == "echo three" {
			t.Errorf("attempt 1 ran the step after the one it was cancelled in (entry %d)", e.Seq)
		}
	}
	if !closed(es) {
		t.Errorf("attempt 1's session does not end with sandbox.closed")
	}
}

// readAllWatch is a Fencer that calls before ahead of every ReadAll.
type readAllWatch struct {
	Fencer
	before func()
}

func (f readAllWatch) ReadAll(ctx context.Context, name, sandboxID string) ([]events.Entry, error) {
	f.before()
	return f.Fencer.ReadAll(ctx, name, sandboxID)
}

// A takeover by another worker ends attempt 1's sandbox (fenced, deleted),
// which fails attempt 1's running step. The new delivery claims the job
// before that, so attempt 1 finds itself superseded and leaves the job: found
// by the 30-minute soak (seed 523792), where the takeover came first,
// attempt 1 found no later attempt and recorded the job failed.
func TestTakeoverByAnotherWorkerSupersedesTheAttemptItEnds(t *testing.T) {
	ctx := context.Background()
	b, q := testQueue(t, QueueConfig{AckWait: time.Second})
	sandboxd := testenv.Sandboxd(t)
	worker := func(id string) (*Worker, *bus.Ledger) {
		l, client := sdkOn(t, b, sandboxd)
		w := &Worker{Queue: q, Client: client, Ledger: l, ID: id, Heartbeat: time.Hour}
		if err := w.init(); err != nil {
			t.Fatal(err)
		}
		return w, l
	}
	w1, _ := worker("w1")
	w2, l2 := worker("w2")
	spec := Spec{Name: "ended", Image: "host", Steps: []Step{
		{Exec: &ExecStep{Command: "echo one"}},
		{Checkpoint: &CheckpointStep{Tag: "mid"}},
		{Exec: &ExecStep{Command: "sleep 5; echo two"}},
	}}
	st, err := q.SubmitAs(ctx, spec, "alice")
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{})
	m1 := fetchJob(t, q)
	go func() { w1.handle(ctx, m1); close(first) }()
	testenv.Eventually(t, 30*time.Second, func() error {
		s, err := q.Status(ctx, st.ID)
		if err != nil || s.Checkpoint == nil || s.Done < 2 {
			return fmt.Errorf("attempt 1 not past its checkpoint: %+v, %v", s, err)
		}
		return nil
	})
	// Once the takeover has deleted attempt 1's sandbox (ReadAll comes
	// next), let attempt 1 fail and settle, and see what it recorded.
	var settled Status
	w2.Ledger = readAllWatch{Fencer: l2, before: func() {
		if settled.ID != "" {
			return
		}
		select {
		case <-first:
		case <-time.After(20 * time.Second):
			t.Error("attempt 1 did not settle after its sandbox was deleted")
		}
		if settled, err = q.Status(ctx, st.ID); err != nil {
			t.Error(err)
		}
	}}
	w2.handle(ctx, fetchJob(t, q))
	if settled.State != StateRunning || settled.Attempt != 2 || settled.Worker != "w2" {
		t.Errorf("status once attempt 1 settled: %+v, want attempt 2's, running", settled)
	}
	got, err := q.Status(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateSucceeded || got.Attempt != 2 {
		t.Errorf("status %+v, want succeeded by attempt 2", got)
	}
	// The taking-over worker runs the job for the same submitter.
	es, err := l2.ReadAll(ctx, got.SandboxName, got.SandboxID)
	if err != nil || len(es) == 0 {
		t.Fatalf("attempt 2's session: %d entries, %v", len(es), err)
	}
	for _, e := range es {
		if e.Actor != "alice via w2" {
			t.Errorf("attempt 2's %s: actor %q, want \"alice via w2\"", e.Event, e.Actor)
		}
	}
}
