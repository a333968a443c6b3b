package jobs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/testenv"
)

// TestWorkerStats (issue 40 item 8): a worker counts the jobs running in it,
// an attempt it lost (its sandbox fenced by another writer) and the takeover
// of the job when it comes back to it.
func TestWorkerStats(t *testing.T) {
	ctx := context.Background()
	b, q := testQueue(t, QueueConfig{AckWait: 2 * time.Second})
	l, client := sdkOn(t, b, "")
	st, err := q.Submit(ctx, Spec{Name: "stats", Image: "host", Steps: []Step{
		{Exec: &ExecStep{Command: "sleep 2"}}, {Exec: &ExecStep{Command: "echo after"}}}})
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{Queue: q, Client: client, Ledger: l, ID: "w1", Heartbeat: time.Hour} // no heartbeat: the lease lapses
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()

	var sandbox string
	testenv.Eventually(t, 20*time.Second, func() error {
		s, err := q.Status(ctx, st.ID)
		if err != nil || s.SandboxID == "" {
			return fmt.Errorf("no sandbox yet: %+v %v", s, err)
		}
		if got := w.Stats(); got.Running != 1 {
			return fmt.Errorf("stats %+v, want 1 running", got)
		}
		sandbox = s.SandboxID
		return nil
	})
	// Another writer takes the sandbox over while the first step sleeps: the
	// attempt's next write is fenced, and it leaves the job.
	other, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Takeover(ctx, sandbox); err != nil {
		t.Fatal(err)
	}
	// Redelivered after its lease, the job comes back and is taken over.
	testenv.Eventually(t, 60*time.Second, func() error {
		s, err := q.Status(ctx, st.ID)
		if err != nil || s.State != StateSucceeded {
			return fmt.Errorf("status %+v, %v", s, err)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := w.Stats(), (WorkerStats{Running: 0, Takeovers: 1, LeasesLost: 1}); got != want {
		t.Errorf("stats = %+v, want %+v", got, want)
	}
}
