package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/testenv"
)

// TestWorkerFencedLeavesJob: a worker whose sandbox is taken over by another
// writer (it lost its lease) stops without failing or settling the job.
func TestWorkerFencedLeavesJob(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q, err := jobs.OpenQueue(ctx, b.JetStream(), jobs.QueueConfig{AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := alineo.New(alineo.Options{BaseURL: testenv.Sandboxd(t), Adapter: l})
	if err != nil {
		t.Fatal(err)
	}
	st, err := q.Submit(ctx, mustParse(t, `{"name":"fenced","image":"host","steps":[
		{"exec":{"command":"sleep 1"}},{"exec":{"command":"echo after"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	failed := make(chan struct{}, 16)
	w := &jobs.Worker{Queue: q, Client: client, Ledger: l, ID: "w1", Progress: func(_ string, ev jobs.Event) {
		if ev.State == jobs.StepFailed {
			failed <- struct{}{}
		}
	}}
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	var sandbox string
	testenv.Eventually(t, 20*time.Second, func() error {
		s, err := q.Status(ctx, st.ID)
		if err != nil || s.SandboxID == "" {
			return fmt.Errorf("no sandbox yet: %+v %v", s, err)
		}
		sandbox = s.SandboxID
		return nil
	})
	// Another writer takes the sandbox over while step 1 sleeps.
	other, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Takeover(ctx, sandbox); err != nil {
		t.Fatal(err)
	}
	// The worker's next write fails with ErrFenced; the job must not be
	// failed or acknowledged by it. Run returns after the job's handling.
	select {
	case <-failed:
	case <-time.After(20 * time.Second):
		t.Fatal("step 1 never failed after the takeover")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s, err := q.Status(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != jobs.StateRunning {
		t.Fatalf("status = %+v, want still running (left to the new owner)", s)
	}
	if n, err := q.Pending(ctx); err != nil || n != 1 {
		t.Errorf("pending = %d, %v; want the job still in the stream", n, err)
	}
}

// TestWorkerPermanentErrorNotRetried (issue 40 item 7): a job whose image
// cannot be had fails at its first attempt, with the server's answer; it is
// not handed back to be retried MaxDeliver times.
func TestWorkerPermanentErrorNotRetried(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q, err := jobs.OpenQueue(ctx, b.JetStream(), jobs.QueueConfig{AckWait: time.Minute, MaxDeliver: 3})
	if err != nil {
		t.Fatal(err)
	}
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := alineo.New(alineo.Options{BaseURL: testenv.Sandboxd(t), Adapter: l})
	if err != nil {
		t.Fatal(err)
	}
	// A registry nobody answers on: the pull fails (IMAGE_PULL_FAILED).
	st, err := q.Submit(ctx, mustParse(t, `{"name":"no-image","image":"127.0.0.1:1/no/such-image:1","steps":[{"exec":{"command":"true"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &jobs.Worker{Queue: q, Client: client, Ledger: l, ID: "w1"}
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	var final jobs.Status
	testenv.Eventually(t, 60*time.Second, func() error {
		s, err := q.Status(ctx, st.ID)
		if err != nil || s.State != jobs.StateFailed {
			return fmt.Errorf("not failed yet: %+v %v", s, err)
		}
		final = s
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if final.Attempt != 1 || !strings.Contains(final.Error, "IMAGE_PULL_FAILED") {
		t.Errorf("job failed at attempt %d with %q; want attempt 1 and the server's IMAGE_PULL_FAILED", final.Attempt, final.Error)
	}
}
