package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/testenv"
)

// closedPayload returns the payload of the sandbox.closed that ends the
// session, or an error saying what it ends with.
func closedPayload(ctx context.Context, l *bus.Ledger, name, id string) (events.SandboxClosedPayload, error) {
	var p events.SandboxClosedPayload
	es, err := l.ReadAll(ctx, name, id)
	if err != nil {
		return p, err
	}
	if len(es) == 0 || es[len(es)-1].Event != events.SandboxClosed {
		return p, fmt.Errorf("session %s/%s does not end with sandbox.closed (%d entries)", name, id, len(es))
	}
	if last := es[len(es)-1]; len(last.Payload) > 0 {
		if err := last.Decode(&p); err != nil {
			return p, err
		}
	}
	return p, nil
}

// TestSandboxExpiresUnlessRenewed: a worker creates its job's sandbox with
// an expiration and keeps renewing it, so a job that runs for several times
// the TTL finishes in it; once its renewals are refused, the sandbox
// expires on the server while the worker lives, the worker hands the job
// back (the expiry is not the job's failure) and the ledger says the
// sandbox expired. Without renewals, attempt 2 expires too and the job
// never succeeds.
func TestSandboxExpiresUnlessRenewed(t *testing.T) {
	ctx := context.Background()
	const ttl = 2 * time.Second
	srv := testenv.ShortTTLSandboxd(t, ttl)
	b, err := bus.Open(ctx, bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q, err := jobs.OpenQueue(ctx, b.JetStream(), jobs.QueueConfig{AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := alineo.New(alineo.Options{BaseURL: srv.URL, Adapter: l})
	if err != nil {
		t.Fatal(err)
	}
	st, err := q.Submit(ctx, mustParse(t, `{"name":"expiry","image":"host","steps":[
		{"exec":{"command":"sleep 7"}},{"exec":{"command":"echo done"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	srv.Blocked.Store(true) // attempt 1 never renews
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &jobs.Worker{Queue: q, Client: client, Ledger: l, ID: "w1", SandboxTTL: ttl, RenewEvery: 300 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()

	first := waitJob(t, q, st.ID, 30*time.Second, func(s jobs.Status) error {
		if s.State != jobs.StateRequeued {
			return fmt.Errorf("job %s (%s), want requeued after its sandbox expired", s.State, s.Error)
		}
		return nil
	})
	// The run's Close found it ended by its expiration, and deleted it.
	if p, err := closedPayload(ctx, l, first.SandboxName, first.SandboxID); err != nil || p.Outcome != events.OutcomeExpired {
		t.Errorf("attempt 1's session: %+v, %v; want sandbox.closed with outcome expired", p, err)
	}
	t.Logf("attempt 1 handed back: %s", first.Error)
	if !strings.Contains(first.Error, "expired") {
		t.Errorf("requeued with %q, want the expiry named", first.Error)
	}

	srv.Blocked.Store(false)
	last := waitJob(t, q, st.ID, 40*time.Second, func(s jobs.Status) error {
		if s.State != jobs.StateSucceeded {
			return fmt.Errorf("job %s attempt %d (%s)", s.State, s.Attempt, s.Error)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if last.Attempt != 2 || last.SandboxID == first.SandboxID {
		t.Errorf("status %+v, want attempt 2 in a new sandbox", last)
	}
	// 7 s in a sandbox that expires 2 s after each renewal: renewed.
	if n := srv.Renewed.Load(); n < 7 {
		t.Errorf("%d renewals passed, want one every 300 ms of attempt 2", n)
	}
	if p, err := closedPayload(ctx, l, last.SandboxName, last.SandboxID); err != nil || p.Outcome != "" {
		t.Errorf("attempt 2's session: %+v, %v; want a plain sandbox.closed", p, err)
	}
}

func waitJob(t *testing.T, q *jobs.Queue, id string, timeout time.Duration, ok func(jobs.Status) error) jobs.Status {
	t.Helper()
	var st jobs.Status
	testenv.Eventually(t, timeout, func() error {
		var err error
		if st, err = q.Status(context.Background(), id); err != nil {
			return err
		}
		return ok(st)
	})
	return st
}

// TestRenewedJobStillFails: a step that fails fails the job at once, on its
// first attempt, while its sandbox is being renewed: the end of its sandbox
// (closed by the run) is not taken for an expiry.
func TestRenewedJobStillFails(t *testing.T) {
	ctx := context.Background()
	srv := testenv.ShortTTLSandboxd(t, 2*time.Second)
	b, err := bus.Open(ctx, bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q, err := jobs.OpenQueue(ctx, b.JetStream(), jobs.QueueConfig{AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := alineo.New(alineo.Options{BaseURL: srv.URL, Adapter: l})
	if err != nil {
		t.Fatal(err)
	}
	st, err := q.Submit(ctx, mustParse(t, `{"name":"fails","image":"host","steps":[{"exec":{"command":"sleep 1; exit 3"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &jobs.Worker{Queue: q, Client: client, Ledger: l, ID: "w1", SandboxTTL: 2 * time.Second, RenewEvery: 100 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	got := waitJob(t, q, st.ID, 30*time.Second, func(s jobs.Status) error {
		if !s.State.Terminal() {
			return fmt.Errorf("job %s", s.State)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got.State != jobs.StateFailed || got.Attempt != 1 || !strings.Contains(got.Error, "exit") {
		t.Errorf("status %+v, want failed on attempt 1 by its step", got)
	}
	if srv.Renewed.Load() == 0 {
		t.Errorf("no renewal while the step ran")
	}
}
