package soak

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/testenv"
)

// TestPreCheckpointCheckCatchesAReRunReplayedStep runs the check on a real
// history (the soak's job spec through jobs.Runner on sandboxd, recorded on
// the bus): a job resumed from its checkpoint the way the executor does
// (the SDK's Resume, whose replay cache answers the steps before it)
// passes; the same job resumed by an executor that re-runs the replayed
// steps (here a ResumeFunc that restores the checkpoint's snapshot without
// the replay cache) fails
// with the step that ran live after the checkpoint. The broken resume lives
// in this test only.
func TestPreCheckpointCheckCatchesAReRunReplayedStep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs jobs on sandboxd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := alineo.New(alineo.Options{BaseURL: testenv.Sandboxd(t), Adapter: l})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{b: b, cfg: Config{SettleTimeout: time.Minute}}

	// run runs job n to its checkpoint (the first attempt, then fenced as
	// a takeover does) and resumes it with resume; it returns the check's
	// result on the stream.
	run := func(n int, resume jobs.ResumeFunc) Result {
		t.Helper()
		spec, job := jobSpec("demo", n)
		var cp *jobs.Checkpoint
		stop := make(chan struct{})
		first := &jobs.Runner{Client: client, Drain: stop, OnCheckpoint: func(_ context.Context, c jobs.Checkpoint) error {
			if cp == nil {
				cp = &c
				close(stop) // the attempt ends right after its checkpoint
			}
			return nil
		}}
		if _, err := first.Run(ctx, spec, nil); err == nil || cp == nil {
			t.Fatalf("first attempt: %v (checkpoint %v), want it drained after the checkpoint", err, cp)
		}
		if _, err := l.Takeover(ctx, cp.SandboxID); err != nil {
			t.Fatal(err)
		}
		res, err := (&jobs.Runner{Client: client, Resume: resume}).Run(ctx, spec, cp)
		if err != nil {
			t.Fatalf("resumed attempt: %v", err)
		}
		ms, err := h.readStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		job.Status = jobs.Status{State: jobs.StateSucceeded, SandboxID: res.SandboxID}
		o := &Observation{Jobs: []Job{job}, Stream: ms}
		detail, problems := checkPreCheckpoint(o)
		return Result{Check: Checks[1].Name, Pass: len(problems) == 0, Detail: detail + " " + strings.Join(problems, "; ")}
	}

	if r := run(1, nil); !r.Pass { // nil: jobs.ClientResume, as the executor
		t.Fatalf("a correct resume fails the check: %s", r.Detail)
	}
	// The checkpoint's files without its replay cache: every step before
	// the checkpoint runs live again in the restored sandbox.
	reRun := func(ctx context.Context, cp jobs.Checkpoint) (*alineo.Sandbox, error) {
		es, err := l.ReadAll(ctx, cp.Name, cp.SandboxID)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			var p events.CheckpointCreatedPayload
			if e.Event == events.CheckpointCreated && e.Decode(&p) == nil && p.Name == cp.Tag {
				return client.RestoreSnapshot(ctx, p.SnapshotID, cp.Name, alineo.Resources{})
			}
		}
		return nil, errors.New("no checkpoint " + cp.Tag)
	}
	r := run(2, reRun)
	if r.Pass {
		t.Fatalf("an executor that re-runs the replayed steps passes the check: %s", r.Detail)
	}
	if !strings.Contains(r.Detail, "1 after the checkpoint") {
		t.Errorf("detail %q, want the step that ran after the checkpoint", r.Detail)
	}
	t.Logf("broken resume: %s", r.Detail)
}
