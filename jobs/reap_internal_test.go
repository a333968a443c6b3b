package jobs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

func TestMovedOn(t *testing.T) {
	running := func(attempt int, worker string) Status {
		return Status{State: StateRunning, Attempt: attempt, Worker: worker}
	}
	for _, tc := range []struct {
		name    string
		st      Status
		attempt int
		worker  string
		want    bool
	}{
		{"later attempt", running(2, "w2"), 1, "w1", true},
		{"succeeded", Status{State: StateSucceeded, Attempt: 1, Worker: "w1"}, 1, "w1", true},
		{"failed", Status{State: StateFailed, Attempt: 1, Worker: "w1"}, 1, "w1", true},
		{"same attempt, another worker", running(1, "w2"), 1, "w1", true},
		{"current attempt", running(1, "w1"), 1, "w1", false},
		{"current attempt, creator not recorded", running(1, "w2"), 1, "", false},
		{"requeued, same attempt", Status{State: StateRequeued, Attempt: 1, Worker: "w1"}, 1, "w1", false},
		{"status behind the sandbox", running(1, "w1"), 2, "w1", false},
	} {
		if got := movedOn(tc.st, tc.attempt, tc.worker); got != tc.want {
			t.Errorf("%s: movedOn = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestReapAtStart: a worker that starts on a host that comes back ends the
// sandboxes there whose job moved on while the host was away (taken over
// by another worker, or settled), and records how: deleted (closed), or
// expired when the server had ended it at its expiration, after the
// "unreachable" the worker that took the job over recorded. It leaves the
// sandbox of an attempt still current (another executor of the host may run
// it) and those of jobs its queue does not know. Without the reap the first
// three sandboxes stay Running.
func TestReapAtStart(t *testing.T) {
	ctx := context.Background()
	b, q := testQueue(t, QueueConfig{AckWait: 2 * time.Second})
	url, _ := testenv.SandboxdServer(t, sandboxd.Config{SweepInterval: 50 * time.Millisecond})
	l, client := sdkOn(t, b, url)
	os := client.OpenSandbox()

	// job records a status for a new job id without publishing it, and
	// creates a sandbox tagged as attempt 1 of it by worker w1 (never
	// closed: its process died).
	job := func(st Status) (string, *alineo.Sandbox) {
		t.Helper()
		id := NewID()
		if st.State != "" {
			if _, err := q.update(ctx, id, func(s *Status) { *s = st; s.ID = id }); err != nil {
				t.Fatal(err)
			}
		}
		md := JobMetadata(id, 1, "reap")
		md[MetaWorker] = "w1"
		sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: "reap", Metadata: md})
		if err != nil {
			t.Fatal(err)
		}
		return id, sb
	}
	takenID, taken := job(Status{State: StateRunning, Attempt: 2, Worker: "w2"})
	failedID, failed := job(Status{State: StateFailed, Attempt: 1, Worker: "w1"})
	otherID, other := job(Status{State: StateRunning, Attempt: 1, Worker: "w2"})
	expiredID, expired := job(Status{State: StateSucceeded, Attempt: 2, Worker: "w2"})
	_, current := job(Status{State: StateRunning, Attempt: 1, Worker: "w1"})
	_, unknown := job(Status{})

	// The expired one: its expiration passed while nobody renewed it, after
	// w2 recorded it unreachable (taking the job over on another host).
	if _, err := expired.Renew(ctx, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendBatch(ctx, []events.Entry{events.New(time.Now().UnixMilli(), "reap", expired.ID(), events.SandboxLevel,
		events.SandboxClosed, events.SandboxClosedPayload{Reason: events.ClosedTakenOver, By: "w2", Job: expiredID, Outcome: events.OutcomeUnreachable})}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		s, err := os.GetSandbox(ctx, expired.ID())
		if err != nil || s.Status.State != opensandbox.StateTerminated {
			return fmt.Errorf("not expired yet: %v %v", s, err)
		}
		return nil
	})

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &Worker{Queue: q, Client: client, Ledger: l, ID: "w1-back"}
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	ended := []struct {
		sb          *alineo.Sandbox
		job         string
		reason, out string
	}{
		{taken, takenID, events.ClosedTakenOver, events.OutcomeClosed},
		{failed, failedID, events.ClosedJobFailed, events.OutcomeClosed},
		{other, otherID, events.ClosedTakenOver, events.OutcomeClosed},
		{expired, expiredID, events.ClosedTakenOver, events.OutcomeExpired},
	}
	// Polled until the last one is recorded: the reap runs before the
	// worker pulls, and ends with Run's ctx.
	testenv.Eventually(t, 20*time.Second, func() error {
		for _, tc := range ended {
			if _, err := os.GetSandbox(ctx, tc.sb.ID()); !errors.Is(err, opensandbox.ErrNotFound) {
				return fmt.Errorf("sandbox of job %s: %v, want deleted", tc.job, err)
			}
			es, err := l.ReadAll(ctx, "reap", tc.sb.ID())
			if err != nil {
				return err
			}
			p, ok := lastClosed(es)
			if want := (events.SandboxClosedPayload{Reason: tc.reason, By: "w1-back", Job: tc.job, Outcome: tc.out}); !ok || p != want {
				return fmt.Errorf("session of job %s ends with %+v (closed %v), want %+v", tc.job, p, ok, want)
			}
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, sb := range []*alineo.Sandbox{current, unknown} {
		s, err := os.GetSandbox(ctx, sb.ID())
		if err != nil || s.Status.State != opensandbox.StateRunning {
			t.Errorf("sandbox %s: %v, %v; want left Running", sb.ID(), s, err)
		}
		if es, err := l.ReadAll(ctx, "reap", sb.ID()); err != nil || closed(es) {
			t.Errorf("session of %s closed (%v), want left open", sb.ID(), err)
		}
	}
}
