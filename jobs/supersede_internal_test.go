package jobs

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/bus"
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

// An attempt whose job a later delivery took over is superseded: its failure
// (its sandbox ended by the new owner) must not become the job's (found by
// the 30-minute soak: a job recorded failed at step 6 while its next attempt
// finished it).
func TestSuperseded(t *testing.T) {
	ctx := context.Background()
	_, q := testQueue(t, QueueConfig{})
	st, err := q.Submit(ctx, Spec{Name: "s", Image: "i", Steps: []Step{{Exec: &ExecStep{Command: "true"}}}})
	if err != nil {
		t.Fatal(err)
	}
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

// An attempt that settles a job a later delivery holds (its own superseded
// check could not read the status) leaves the status and the message alone:
// found by the soak, where attempt 1 failed the job and terminated its
// message while attempt 2 ran it, and the job stayed requeued for good.
func TestSupersededFinishLeavesTheJob(t *testing.T) {
	ctx := context.Background()
	_, q := testQueue(t, QueueConfig{})
	st, err := q.Submit(ctx, Spec{Name: "s", Image: "i", Steps: []Step{{Exec: &ExecStep{Command: "true"}}}})
	if err != nil {
		t.Fatal(err)
	}
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
	if later, err := w1.claim(ctx, jm, 1); err != nil || later {
		t.Fatalf("attempt 1 claims a queued job: later %v, %v", later, err)
	}
	w2 := &Worker{Queue: q, ID: "w2"}
	if later, err := w2.claim(ctx, jm, 2); err != nil || later {
		t.Fatalf("attempt 2 takes the job over: later %v, %v", later, err)
	}
	if later, err := w1.claim(ctx, jm, 1); err != nil || !later {
		t.Fatalf("attempt 1 claims it again after attempt 2: later %v, %v; want later", later, err)
	}
	got, err := q.Status(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Attempt != 2 || got.Worker != "w2" || got.State != StateRunning {
		t.Errorf("status = %+v, want attempt 2's", got)
	}
}
