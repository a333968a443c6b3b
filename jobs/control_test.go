package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/testenv"
)

// TestCancelAndRetryQueued: a job no worker runs is canceled at once; a
// settled job cannot be canceled; a canceled job is retried once, as a new
// job with the same spec that names it.
func TestCancelAndRetryQueued(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q, err := jobs.OpenQueue(ctx, b.JetStream(), jobs.QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	spec := mustParse(t, `{"name":"queued","image":"host","steps":[{"exec":{"command":"true"}}]}`)
	st, err := q.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Retry(ctx, st.ID, "tester"); !errors.Is(err, jobs.ErrNotRetryable) {
		t.Errorf("retry of a queued job: %v, want ErrNotRetryable", err)
	}
	got, err := q.Cancel(ctx, st.ID, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != jobs.StateCanceled || !got.CancelRequested || got.CanceledBy != "alice" || !got.State.Terminal() {
		t.Errorf("canceled status = %+v, want canceled by alice", got)
	}
	if _, err := q.Cancel(ctx, st.ID, "alice"); !errors.Is(err, jobs.ErrSettled) {
		t.Errorf("second cancel: %v, want ErrSettled", err)
	}
	if _, err := q.Cancel(ctx, jobs.NewID(), "alice"); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("cancel of an unknown job: %v, want ErrNotFound", err)
	}

	again, err := q.Retry(ctx, st.ID, "tester")
	if err != nil {
		t.Fatal(err)
	}
	if again.ID == st.ID || again.RetryOf != st.ID || again.State != jobs.StateQueued || again.Name != "queued" {
		t.Errorf("retry = %+v, want a new queued job retrying %s", again, st.ID)
	}
	if old, err := q.Status(ctx, st.ID); err != nil || old.RetriedAs != again.ID {
		t.Errorf("retried job = %+v, %v; want RetriedAs %s", old, err, again.ID)
	}
	if s, err := q.Spec(ctx, again.ID); err != nil || s.Name != spec.Name || len(s.Steps) != 1 || s.Steps[0].Exec.Command != "true" {
		t.Errorf("the retry's spec = %+v, %v", s, err)
	}
	if _, err := q.Retry(ctx, st.ID, "tester"); !errors.Is(err, jobs.ErrNotRetryable) {
		t.Errorf("second retry: %v, want ErrNotRetryable", err)
	}
	if _, err := q.Retry(ctx, jobs.NewID(), "tester"); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("retry of an unknown job: %v, want ErrNotFound", err)
	}
	if n, err := q.Pending(ctx); err != nil || n != 2 {
		t.Errorf("pending = %d, %v; want both messages (the canceled one is acknowledged unrun by a worker)", n, err)
	}
}

// TestCancelRunningJob: a cancel reaches a running job before its next
// step: the step after never starts, the job is canceled, the ledger
// records its session's end with reason "job canceled", and the worker's
// presence record named the job while it ran.
func TestCancelRunningJob(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q, err := jobs.OpenQueue(ctx, b.JetStream(), jobs.QueueConfig{})
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
	// Step 1 waits until the test opens its gate, so the cancel lands while
	// it runs, however slow the machine.
	st, err := q.Submit(ctx, mustParse(t, `{"name":"canceled","image":"host","steps":[
		{"exec":{"command":"while [ ! -e /tmp/gate ]; do sleep 0.05; done"}},{"exec":{"command":"echo never"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan int, 16)
	w := &jobs.Worker{Queue: q, Client: client, Ledger: l, ID: "w-cancel", Heartbeat: 200 * time.Millisecond,
		Progress: func(_ string, ev jobs.Event) {
			if ev.State == jobs.StepStarted {
				started <- ev.Index
			}
		}}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	select {
	case i := <-started:
		if i != 0 {
			t.Fatalf("first step started = %d", i)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("step 1 never started")
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		ws, err := q.Workers(ctx)
		if err != nil {
			return err
		}
		if len(ws) != 1 || ws[0].ID != "w-cancel" || !slices.Equal(ws[0].Running, []string{st.ID}) || !ws[0].Live(time.Now()) {
			return fmt.Errorf("workers = %+v, want w-cancel live running %s", ws, st.ID)
		}
		return nil
	})
	got, err := q.Cancel(ctx, st.ID, "alice")
	if err != nil || got.State != jobs.StateRunning || !got.CancelRequested {
		t.Fatalf("cancel of the running job = %+v, %v; want running with the cancel requested", got, err)
	}
	x, err := client.OpenSandbox().Execd(ctx, got.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if err := x.UploadFile(ctx, "/tmp/gate", strings.NewReader("go"), opensandbox.Permission{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	var final jobs.Status
	testenv.Eventually(t, 30*time.Second, func() error {
		final, err = q.Status(ctx, st.ID)
		if err != nil || final.State != jobs.StateCanceled {
			return fmt.Errorf("status = %+v, %v; want canceled", final, err)
		}
		return nil
	})
	if want := "job canceled by alice before step 2"; final.Done != 1 || final.Error != want {
		t.Errorf("final status = %+v, want step 1 done and %q", final, want)
	}
	select {
	case i := <-started:
		t.Errorf("step %d started after the cancel", i+1)
	default:
	}
	// The worker records the status, then the cancel's sandbox.closed,
	// then settles the job's message: the status may say canceled a moment
	// before the ledger does.
	var es []events.Entry
	testenv.Eventually(t, 10*time.Second, func() error {
		if es, err = l.ReadAll(ctx, final.SandboxName, final.SandboxID); err != nil || len(es) == 0 {
			return fmt.Errorf("ReadAll = %d entries, %v", len(es), err)
		}
		last := es[len(es)-1]
		var p events.SandboxClosedPayload
		if last.Event != events.SandboxClosed || last.Decode(&p) != nil || p.Reason != jobs.ClosedCanceled || p.By != "w-cancel" || p.Job != st.ID {
			return fmt.Errorf("the session ends with %s %s, want sandbox.closed {reason %q, by w-cancel, job %s}", last.Event, last.Payload, jobs.ClosedCanceled, st.ID)
		}
		return nil
	})
	for _, e := range es {
		if e.Event == events.ExecStarted && e.StepIndex > 1 {
			t.Errorf("exec %d recorded after the cancel: %s", e.StepIndex, e.Payload)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if n, err := q.Pending(ctx); err != nil || n != 0 {
			return fmt.Errorf("pending = %d, %v; want the canceled job's message settled", n, err)
		}
		return nil
	})

	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ws, err := q.Workers(ctx); err != nil || len(ws) != 0 {
		t.Errorf("workers after Run returned = %+v, %v; want none", ws, err)
	}
}
