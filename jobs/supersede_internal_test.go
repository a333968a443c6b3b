package jobs

import (
	"context"
	"testing"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/testenv"
)

// An attempt whose job a later delivery took over is superseded: its failure
// (its sandbox ended by the new owner) must not become the job's (found by
// the 30-minute soak: a job recorded failed at step 6 while its next attempt
// finished it).
func TestSuperseded(t *testing.T) {
	b, err := bus.Open(context.Background(), bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	q, err := OpenQueue(ctx, b.JetStream(), QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
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
