package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/events"
)

// Defaults of QueueConfig's control buckets.
const (
	DefaultSpecBucket   = "ALINEO_JOB_SPECS"
	DefaultWorkerBucket = "ALINEO_WORKERS"
	// workerRecordTTL is how long the workers bucket keeps a presence record
	// that is not refreshed: a worker that died shows as silent until then.
	workerRecordTTL = time.Hour
)

// ClosedCanceled is the reason of the sandbox.closed a worker records when
// it stopped a job that was canceled (Queue.Cancel).
const ClosedCanceled = "job canceled"

// openControlBuckets creates or updates the buckets of the specs (kept for
// Retry) and of the workers' presence; replicas gives a bucket's stream
// replicas as OpenQueue decides them.
func (q *Queue) openControlBuckets(ctx context.Context, replicas func(stream string) (int, error)) error {
	n, err := replicas("KV_" + q.cfg.SpecBucket)
	if err != nil {
		return err
	}
	q.specs, err = q.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: q.cfg.SpecBucket, Description: "alineo job specs, kept to retry a job",
		History: 1, Storage: jetstream.FileStorage, Replicas: n,
	})
	if err != nil {
		return fmt.Errorf("create or update bucket %s: %w", q.cfg.SpecBucket, err)
	}
	if n, err = replicas("KV_" + q.cfg.WorkerBucket); err != nil {
		return err
	}
	// Presence is refreshed every few seconds: memory storage will do.
	q.workers, err = q.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: q.cfg.WorkerBucket, Description: "alineo workers: who runs, its jobs, its last heartbeat",
		History: 1, Storage: jetstream.MemoryStorage, Replicas: n, TTL: workerRecordTTL,
	})
	if err != nil {
		return fmt.Errorf("create or update bucket %s: %w", q.cfg.WorkerBucket, err)
	}
	return nil
}

// keepSpec stores job id's spec in the specs bucket, retrying with backoff
// for statusRetryFor while the bucket does not answer (a put of the same
// value twice is harmless).
func (q *Queue) keepSpec(ctx context.Context, id string, spec Spec) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	err = backoff.Retry(func() error {
		_, err := q.specs.Put(ctx, id, data)
		if errors.Is(err, nats.ErrMaxPayload) {
			return backoff.Permanent(err)
		}
		return err
	}, statusBackoff(ctx))
	if err != nil {
		return fmt.Errorf("keep the spec of job %s: %w", id, err)
	}
	return nil
}

// Spec returns the spec job id was submitted with. Errors: ErrNotFound for a
// malformed id; ErrSpecUnavailable when it was not kept.
func (q *Queue) Spec(ctx context.Context, id string) (Spec, error) {
	if !ValidID(id) {
		return Spec{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	e, err := q.specs.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Spec{}, fmt.Errorf("%w: job %s", ErrSpecUnavailable, id)
	}
	if err != nil {
		return Spec{}, fmt.Errorf("read the spec of job %s: %w", id, err)
	}
	var spec Spec
	if err := json.Unmarshal(e.Value(), &spec); err != nil {
		return Spec{}, fmt.Errorf("decode the spec of job %s: %w", id, err)
	}
	return spec, nil
}

// Cancel cancels job id on behalf of by (who asked, as the status records
// it). A job no worker runs (queued, or requeued) is canceled at once: the
// worker it is delivered to acknowledges it unrun. A running job is marked
// CancelRequested: its worker stops it before its next step, records
// sandbox.closed with reason ClosedCanceled in its session, and settles it
// canceled. Canceling a job again while it stops is not an error. It returns
// the status as Cancel left it.
//
// Errors: ErrNotFound; ErrSettled for a job that succeeded, failed or was
// canceled; bucket errors. Safe for concurrent use with the workers: each
// change is a compare-and-set.
func (q *Queue) Cancel(ctx context.Context, id, by string) (Status, error) {
	return q.modify(ctx, id, func(s *Status) error {
		switch s.State {
		case StateSucceeded, StateFailed, StateCanceled:
			return fmt.Errorf("%w: job %s %s", ErrSettled, id, s.State)
		case StateQueued, StateRequeued:
			s.State, s.Error = StateCanceled, "canceled by "+by+" before it ran"
		}
		if !s.CancelRequested {
			s.CancelRequested, s.CanceledBy = true, by
		}
		return nil
	})
}

// Retry submits the spec of job id, which failed or was canceled, as a new
// job whose status names id in RetryOf; id's status names the new job in
// RetriedAs and by in RetriedBy. The new job is submitted by by (its
// Submitter): who retries a job is who runs it again. A job is retried once:
// retrying it again (a second click) is ErrNotRetryable, naming the first
// retry.
//
// Errors: ErrNotFound; ErrNotRetryable; ErrSpecUnavailable; those of SubmitAs.
func (q *Queue) Retry(ctx context.Context, id, by string) (Status, error) {
	spec, err := q.Spec(ctx, id)
	if err != nil {
		if _, serr := q.Status(ctx, id); errors.Is(serr, ErrNotFound) {
			return Status{}, serr
		}
		return Status{}, err
	}
	next := NewID()
	if _, err := q.modify(ctx, id, func(s *Status) error {
		switch {
		case s.RetriedAs != "":
			return fmt.Errorf("%w: job %s was retried as %s", ErrNotRetryable, id, s.RetriedAs)
		case s.State != StateFailed && s.State != StateCanceled:
			return fmt.Errorf("%w: job %s is %s; only a failed or canceled job is retried", ErrNotRetryable, id, s.State)
		}
		s.RetriedAs, s.RetriedBy = next, by
		return nil
	}); err != nil {
		return Status{}, err
	}
	st, err := q.submit(ctx, spec, next, id, by)
	if err == nil {
		return st, nil
	}
	if _, serr := q.Status(context.WithoutCancel(ctx), next); errors.Is(serr, ErrNotFound) {
		// Nothing was recorded of the new job: the old one may be retried again.
		_, uerr := q.modify(context.WithoutCancel(ctx), id, func(s *Status) error {
			if s.RetriedAs == next {
				s.RetriedAs, s.RetriedBy = "", ""
			}
			return nil
		})
		return Status{}, errors.Join(err, uerr)
	}
	return Status{}, err
}

// modify applies f to the status of job id with compare-and-set, retrying
// at once on a concurrent change (ten times at most). Unlike update, it
// never creates a status: ErrNotFound for an unknown job. An error of f is
// returned as it is, and nothing is written.
func (q *Queue) modify(ctx context.Context, id string, f func(*Status) error) (Status, error) {
	for conflicts := 0; ; conflicts++ {
		st, rev, err := q.get(ctx, id)
		if err != nil {
			return Status{}, err
		}
		if err := f(&st); err != nil {
			return st, err
		}
		st.UpdatedAt = time.Now().UnixMilli()
		data, err := json.Marshal(st)
		if err != nil {
			return Status{}, err
		}
		_, err = q.kv.Update(ctx, id, data, rev)
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			return st, nil
		case conflicts < 10 && (errors.Is(err, jetstream.ErrKeyExists) || errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence):
			continue
		}
		return Status{}, fmt.Errorf("update job %s: %w", id, err)
	}
}

// stopBeforeStep is the Runner.Stop of attempt of job id: before each live
// step it reads the job's status and stops the run when a cancel was
// requested (ErrCanceled), or when a later delivery owns the job
// (errSuperseded: this worker missed its lease, a partition say, and the
// new owner's takeover, which fences this attempt's writes, may not have
// come yet). A status it cannot read does not stop the run (the next step
// reads again).
func (w *Worker) stopBeforeStep(id string, attempt int) func(ctx context.Context, next int) error {
	return func(ctx context.Context, next int) error {
		st, err := w.Queue.Status(ctx, id)
		switch {
		case err != nil:
			return nil
		case st.Attempt > attempt:
			return fmt.Errorf("%w before step %d: attempt %d, the status records attempt %d", errSuperseded, next+1, attempt, st.Attempt)
		case st.CancelRequested:
			return fmt.Errorf("%w by %s before step %d", ErrCanceled, st.CanceledBy, next+1)
		}
		return nil
	}
}

// recordCancel records in the ledger that job jobID's session (of status st)
// ended because the job was canceled: a sandbox.closed with reason
// ClosedCanceled, by this worker, after the one the handle wrote as it
// closed (a later sandbox.closed gives the more exact account; the
// handle's own fields are kept). Without a Ledger or a session it records
// nothing; a session that already says so is left alone.
func (w *Worker) recordCancel(ctx context.Context, jobID string, st Status) {
	if w.Ledger == nil || st.SandboxID == "" || st.SandboxName == "" {
		return
	}
	es, err := w.Ledger.ReadAll(ctx, st.SandboxName, st.SandboxID)
	if err != nil {
		w.Logger.Warn("jobs: record a canceled job's end", "job", jobID, "sandbox", st.SandboxID, "err", err)
		return
	}
	var p events.SandboxClosedPayload
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].Event.Canonical() == events.SandboxClosed {
			_ = es[i].Decode(&p) // none from the handle: the zero payload
			break
		}
	}
	if p.Reason == ClosedCanceled && p.Job == jobID {
		return
	}
	p.Reason, p.By, p.Job = ClosedCanceled, w.ID, jobID
	e := events.New(time.Now().UnixMilli(), st.SandboxName, st.SandboxID, events.SandboxLevel, events.SandboxClosed, p)
	e.Actor = JobActor(st.CanceledBy, w.ID) // who asked, through this worker
	if err := w.Ledger.AppendBatch(ctx, []events.Entry{e}); err != nil {
		w.Logger.Warn("jobs: record a canceled job's end", "job", jobID, "sandbox", st.SandboxID, "err", err)
	}
}
