package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/testenv"
)

// A Submit whose message cannot be published for good (here: no stream on
// its subject, until the caller's context ends) reports the error and
// leaves the job's status failed with it, not queued: nothing waits on a
// job no worker will ever be given.
func TestSubmitPublishFailureLeavesNoQueuedStatus(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q, err := OpenQueue(ctx, b.JetStream(), QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	q.cfg.Subject = "nowhere.jobs" // no stream listens: every publish fails
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := q.Submit(sctx, Spec{Name: "lost", Image: "i", Steps: []Step{{Exec: &ExecStep{Command: "true"}}}})
	if err == nil || !strings.Contains(err.Error(), "publish job") {
		t.Fatalf("Submit = %+v, %v; want the publish error", st, err)
	}
	all, err := q.List(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Fatalf("statuses %+v, want the one failed job", all)
	}
	if got := all[0]; got.State != StateFailed || !strings.Contains(got.Error, "publish job "+got.ID) {
		t.Errorf("status = %+v, want failed with the publish error", got)
	}
	if _, err := q.Status(ctx, all[0].ID); errors.Is(err, ErrNotFound) {
		t.Error("status gone; want it kept, failed")
	}
}
