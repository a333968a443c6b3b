package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// Fencer is the ledger a Worker takes a dead attempt's sandbox over with
// (bus.Ledger): Takeover fences the sandbox's previous writer (its later
// appends fail with adapters.ErrFenced), ReadAll reads its session and
// AppendBatch, returning once acknowledged, records the session's end.
type Fencer interface {
	Takeover(ctx context.Context, sandboxID string) (uint64, error)
	ReadAll(ctx context.Context, name, sandboxID string) ([]events.Entry, error)
	AppendBatch(ctx context.Context, es []events.Entry) error
}

// Worker pulls jobs from a Queue and runs them. Queue and Client are required;
// every other zero value is valid. Run it once.
type Worker struct {
	Queue  *Queue
	Client *alineo.Client
	// Ledger, when set, fences the sandbox of a job's previous attempt before
	// the job is taken over and records its end (sandbox.closed, reason
	// "taken over", by this worker, with what became of it: closed,
	// expired, or unreachable when this worker's server does not have it):
	// the bus ledger the Client writes to.
	// A job that fails for good has its sandboxes' ends recorded too.
	Ledger Fencer
	// Resume restores a checkpointed session. Default ClientResume(Client),
	// the restored sandbox tagged with the job (JobMetadata); a Resume of
	// your own should attach Runner.Metadata itself, or the sandboxes it
	// restores cannot be found if the worker dies before recording them.
	Resume ResumeFunc
	// ID names this worker in job statuses. Default a random id.
	ID string
	// Concurrency is the number of jobs run at once. Default 1.
	Concurrency int
	// Heartbeat is the period of the lease renewals (InProgress). Default a
	// third of the queue's AckWait.
	Heartbeat time.Duration
	// SandboxTTL is how long the sandbox of a job outlives the last renewal
	// of its expiration, so that the sandbox of a worker that died, or lost
	// its job, ends on its own. Each sandbox is created with an expiration
	// (OpenSandbox's timeout: SandboxTTL, but at least alineo.MinTimeout,
	// the protocol's minimum), and while its job runs, and the job's status
	// has shown within the last AckWait that this attempt holds it, the
	// Worker moves the expiration to SandboxTTL from now every RenewEvery.
	// Default twice the queue's AckWait: a dead worker's sandbox ends about
	// one lease after its job is delivered again.
	SandboxTTL time.Duration
	// RenewEvery is the period of those renewals; less than SandboxTTL.
	// Default a third of SandboxTTL.
	RenewEvery time.Duration
	// DrainTimeout bounds the wait for the current step once Run's ctx is
	// done; past it the job is cancelled and handed back. Default 1 min.
	DrainTimeout time.Duration
	// Progress receives every step event, with the job's id. Nil discards them.
	Progress func(jobID string, ev Event)
	// Output receives live exec stdout and stderr. Nil discards them.
	Output io.Writer
	// Logger, default discard.
	Logger *slog.Logger

	mu    sync.Mutex
	local map[string]*localAttempt // the deliveries running here, by job id

	counters workerCounters // Stats (stats.go)
}

// localAttempt is a delivery of a job running in this Worker.
type localAttempt struct {
	id      string // the job's
	attempt int
	cancel  context.CancelCauseFunc
	done    chan struct{} // closed once the delivery is settled
}

func (w *Worker) init() error {
	if w.Queue == nil || w.Client == nil {
		return fmt.Errorf("%w: Worker needs Queue and Client", ErrInvalidConfig)
	}
	if w.Concurrency < 0 || w.Heartbeat < 0 || w.DrainTimeout < 0 || w.SandboxTTL < 0 || w.RenewEvery < 0 {
		return fmt.Errorf("%w: negative Concurrency, Heartbeat, DrainTimeout, SandboxTTL or RenewEvery", ErrInvalidConfig)
	}
	if w.ID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		w.ID = "worker-" + hex.EncodeToString(b[:])
	}
	if w.Concurrency == 0 {
		w.Concurrency = 1
	}
	if w.Heartbeat == 0 {
		w.Heartbeat = w.Queue.cfg.AckWait / 3
	}
	if w.DrainTimeout == 0 {
		w.DrainTimeout = time.Minute
	}
	if w.SandboxTTL == 0 {
		w.SandboxTTL = 2 * w.Queue.cfg.AckWait
	}
	if w.RenewEvery == 0 {
		w.RenewEvery = w.SandboxTTL / 3
	}
	if w.RenewEvery >= w.SandboxTTL {
		return fmt.Errorf("%w: RenewEvery %v, want less than SandboxTTL %v", ErrInvalidConfig, w.RenewEvery, w.SandboxTTL)
	}
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Run pulls and runs jobs until ctx is done, then drains: it stops pulling,
// lets each running job finish its current step, checkpoint and hand the job
// back (Nak), and returns nil. It returns an error only when it cannot start.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.init(); err != nil {
		return err
	}
	defer w.announce(ctx)()
	cons, err := w.Queue.consumer(ctx)
	if err != nil {
		return fmt.Errorf("jobs consumer: %w", err)
	}
	// A host that comes back first ends what its sandboxes are no use for.
	if ended, err := w.reap(ctx); err != nil {
		w.Logger.Warn("jobs: end the sandboxes of jobs that moved on", "ended", ended, "err", err)
	} else if len(ended) > 0 {
		w.Logger.Info("jobs: ended the sandboxes of jobs that moved on", "sandboxes", ended)
	}
	var wg sync.WaitGroup
	for range w.Concurrency {
		wg.Go(func() { w.loop(ctx, cons) })
	}
	wg.Wait()
	return nil
}

func (w *Worker) loop(ctx context.Context, cons jetstream.Consumer) {
	for ctx.Err() == nil {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() == nil {
				w.Logger.Warn("jobs: fetch", "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		for m := range batch.Messages() {
			w.handle(ctx, m)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// handle runs one delivered job. ctx ending means drain.
func (w *Worker) handle(ctx context.Context, m jetstream.Msg) {
	jobCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	var me *localAttempt // this delivery once it runs here; left last, once settled
	defer func() {
		cancel(nil)
		if me != nil {
			w.leaveLocal(me)
		}
	}()
	if ctx.Err() != nil { // delivered while draining
		_ = m.Nak()
		return
	}
	var jm Message
	if err := json.Unmarshal(m.Data(), &jm); err != nil || !ValidID(jm.ID) {
		w.Logger.Error("jobs: undecodable job message; terminated", "err", err)
		_ = m.Term()
		return
	}
	attempt := 1
	if md, err := m.Metadata(); err == nil {
		attempt = int(md.NumDelivered)
	}
	if err := jm.Spec.Validate(); err != nil {
		w.finish(jobCtx, m, jm.ID, StateFailed, err.Error(), attempt)
		return
	}

	defer w.lease(ctx, m, jm.ID, cancel)()

	prev, err := w.Queue.Status(jobCtx, jm.ID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		w.Logger.Warn("jobs: read status; handing the job back", "job", jm.ID, "err", err)
		_ = m.NakWithDelay(handBackDelay(attempt))
		return
	}
	if prev.State.Terminal() { // already settled by an earlier delivery whose ack was lost
		_ = m.Ack()
		return
	}
	// Claimed before the takeover ends the previous attempt's sandbox: that
	// attempt then fails, and must find itself superseded rather than fail
	// the job (found by the 30-minute soak, seed 523792).
	switch outcome, err := w.claim(jobCtx, jm, attempt); {
	case err != nil:
		w.Logger.Warn("jobs: record status; handing the job back", "job", jm.ID, "err", err)
		_ = m.NakWithDelay(handBackDelay(attempt))
		return
	case outcome == claimLater:
		w.Logger.Warn("jobs: attempt superseded by a later delivery before it started; leaving the job to it", "job", jm.ID, "attempt", attempt)
		return
	case outcome == claimSettled: // settled since the read above
		_ = m.Ack()
		return
	}
	me = &localAttempt{id: jm.ID, attempt: attempt, cancel: cancel, done: make(chan struct{})}
	if err := w.supersedeLocal(jobCtx, me); errors.Is(err, errSuperseded) {
		w.Logger.Warn("jobs: attempt superseded by a later delivery before it started; leaving the job to it", "job", jm.ID, "attempt", attempt)
		return
	} else if err != nil {
		w.Logger.Warn("jobs: end this worker's earlier attempt; handing the job back", "job", jm.ID, "err", err)
		_ = m.NakWithDelay(handBackDelay(attempt))
		return
	}
	from, err := w.takeover(jobCtx, jm.ID, prev)
	if err != nil {
		w.Logger.Warn("jobs: take over; handing the job back", "job", jm.ID, "err", err)
		_ = m.NakWithDelay(handBackDelay(attempt))
		return
	}
	w.noteTakeover(prev)
	// A previous attempt may have died between creating a sandbox and
	// recording it in the status: end whatever is tagged with the job. This
	// attempt is recorded first, so a stalled earlier one that creates a
	// sandbox after the sweep sees it was superseded and closes its own.
	if attempt > 1 {
		if ended, err := w.sweep(jobCtx, jm.ID, attempt, events.ClosedTakenOver); err != nil {
			w.Logger.Warn("jobs: end a previous attempt's unrecorded sandboxes", "job", jm.ID, "err", err)
		} else if len(ended) > 0 {
			w.Logger.Info("jobs: ended a previous attempt's unrecorded sandboxes", "job", jm.ID, "sandboxes", ended)
		}
	}
	session := jm.Spec.Name
	if from != nil {
		session = from.Name
	}
	// The job's submitter, kept on every delivery: the message carries it,
	// the status too (a message of an older version did not).
	submitter := jm.Submitter
	if submitter == "" {
		submitter = prev.Submitter
	}
	// The run stops when its sandbox is lost (expired), which the job's
	// status writes, done with jobCtx, outlive.
	runCtx, stopRun := context.WithCancelCause(jobCtx)
	keep := w.newKeeper(jm.ID, attempt, stopRun)
	r := w.runner(jobCtx, ctx.Done(), jm.ID, attempt, session, keep)
	r.Actor = JobActor(submitter, w.ID)
	_, err = r.Run(runCtx, jm.Spec, from)
	lost := keep.stop()
	stopRun(nil)
	w.settle(jobCtx, m, jm.ID, attempt, err, lost)
}

// lease heartbeats m until the returned stop is called; once ctx is done
// (drain), it gives the current step DrainTimeout and then cancels the job.
func (w *Worker) lease(ctx context.Context, m jetstream.Msg, id string, cancel context.CancelCauseFunc) (stop func()) {
	done := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		t := time.NewTicker(w.Heartbeat)
		defer t.Stop()
		drain := ctx.Done()
		var hard <-chan time.Time
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := m.InProgress(); err != nil {
					w.Logger.Warn("jobs: heartbeat", "job", id, "err", err)
				}
			case <-drain:
				drain, hard = nil, time.After(w.DrainTimeout)
			case <-hard:
				cancel(nil)
				return
			}
		}
	})
	return func() { close(done); bg.Wait() }
}

// runner is the Runner of attempt of job id: its progress, sandbox and
// checkpoints recorded in the job's status unless a later attempt owns it
// (then the hooks stop the run with errSuperseded), its sandbox created with
// an expiration that keep renews.
func (w *Worker) runner(jobCtx context.Context, drain <-chan struct{}, id string, attempt int, session string, keep *keeper) *Runner {
	md := JobMetadata(id, attempt, session)
	md[MetaWorker] = w.ID
	return &Runner{
		Client: w.Client, Resume: w.Resume, Drain: drain, Output: w.Output,
		Metadata: md, Timeout: createTimeout(w.SandboxTTL),
		Progress: func(ev Event) {
			if ev.Index >= 0 && (ev.State == StepDone || ev.State == StepReplayed || ev.State == StepSkipped) {
				_, _ = w.Queue.update(jobCtx, id, func(s *Status) {
					if s.Attempt <= attempt { // a later delivery's progress is not this attempt's to write
						s.Done = ev.Index + 1
					}
				})
			}
			if w.Progress != nil {
				w.Progress(id, ev)
			}
		},
		OnSandbox: func(ctx context.Context, sb *alineo.Sandbox) error {
			st, err := w.Queue.update(ctx, id, func(s *Status) {
				if s.Attempt <= attempt { // a later delivery's status is not this attempt's to write
					s.SandboxID, s.SandboxName = sb.ID(), sb.Name()
				}
			})
			if err == nil && st.Attempt > attempt {
				return fmt.Errorf("%w: attempt %d, the status records attempt %d", errSuperseded, attempt, st.Attempt)
			}
			if err != nil {
				return statusFailure(err)
			}
			keep.start(ctx, sb)
			return nil
		},
		OnCheckpoint: func(ctx context.Context, cp Checkpoint) error {
			st, err := w.Queue.update(ctx, id, func(s *Status) {
				if s.Attempt <= attempt {
					s.Checkpoint = &cp
				}
			})
			if err == nil && st.Attempt > attempt {
				return fmt.Errorf("%w: attempt %d, the status records attempt %d", errSuperseded, attempt, st.Attempt)
			}
			return statusFailure(err)
		},
		Stop: w.stopBeforeStep(id, attempt), // a canceled or superseded attempt stops before its next step
	}
}

// supersedeLocal makes me the only delivery of its job running in this
// worker. An earlier one still running here (the job was redelivered to the
// worker that holds it: its lease lapsed while a NATS outage failed the
// heartbeats) is cancelled, and awaited for at most DrainTimeout: the
// takeover's fence cannot stop it, because both deliveries write through the
// one Ledger of this process, the writer the fence names (found by the soak:
// attempt 1 recorded its final step after attempt 2's fence, under attempt
// 2's epoch, and the job finished in two sandboxes). errSuperseded when a
// later delivery runs here already.
func (w *Worker) supersedeLocal(ctx context.Context, me *localAttempt) error {
	w.mu.Lock()
	if w.local == nil {
		w.local = make(map[string]*localAttempt)
	}
	prev := w.local[me.id]
	if prev != nil && prev.attempt > me.attempt {
		w.mu.Unlock()
		return errSuperseded
	}
	w.local[me.id] = me
	w.mu.Unlock()
	if prev == nil {
		return nil
	}
	prev.cancel(errSuperseded)
	t := time.NewTimer(w.DrainTimeout)
	defer t.Stop()
	select {
	case <-prev.done:
		return nil
	case <-t.C:
		return fmt.Errorf("attempt %d still running %v after its cancellation", prev.attempt, w.DrainTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leaveLocal ends me's registration as a delivery running here.
func (w *Worker) leaveLocal(me *localAttempt) {
	w.mu.Lock()
	if w.local[me.id] == me {
		delete(w.local, me.id)
	}
	w.mu.Unlock()
	close(me.done)
}

// claim records attempt of jm as the job's owner, running, unless a later
// delivery already owns it (claimLater) or an earlier one settled it
// meanwhile (claimSettled). Both checks are part of the compare-and-set. An
// attempt whose first status write is retried through a NATS failover must
// not write its number over that of a redelivery that took the job over
// meanwhile (found by the soak: attempt 1 then passed its superseded checks,
// ran beside attempt 2, and recorded a step after attempt 2's checkpoint).
// Nor may a redelivery reopen a job its previous attempt finished after
// handle read the status (found by the 30-minute soak, seed 980282: attempt
// 1 succeeded and acknowledged the message, attempt 2 then marked the job
// running, failed its takeover in a NATS outage, and its Nak went to a
// message that was gone: the job stayed running for good).
func (w *Worker) claim(ctx context.Context, jm Message, attempt int) (claimOutcome, error) {
	var outcome claimOutcome
	_, err := w.Queue.update(ctx, jm.ID, func(s *Status) {
		switch {
		case s.State.Terminal():
			outcome = claimSettled
		case s.Attempt > attempt:
			outcome = claimLater
		default:
			outcome = claimed
			s.Name, s.Steps, s.State, s.Attempt, s.Worker, s.Done, s.Error = jm.Spec.Name, len(jm.Spec.Steps), StateRunning, attempt, w.ID, 0, ""
		}
	})
	if err != nil {
		return claimed, err
	}
	return outcome, nil
}

// claimOutcome is what claim found the job's status to be.
type claimOutcome int

const (
	claimed      claimOutcome = iota // the job is this attempt's
	claimLater                       // a later delivery owns it
	claimSettled                     // an earlier delivery settled it
)

// settle ends a delivery after its run: succeeded, failed for good, handed
// back, or left alone when another delivery owns the job. lost is the
// keeper's verdict on the run's sandbox: non-nil when it expired under the
// run.
func (w *Worker) settle(jobCtx context.Context, m jetstream.Msg, id string, attempt int, err, lost error) {
	if errors.Is(context.Cause(jobCtx), errSuperseded) {
		w.noteLeaseLost()
		// Cancelled by a later delivery to this worker (supersedeLocal).
		w.Logger.Warn("jobs: attempt superseded by a later delivery to this worker; leaving the job to it", "job", id, "attempt", attempt, "err", err)
		return
	}
	if errors.Is(err, errSuperseded) || err != nil && w.superseded(jobCtx, id, attempt) {
		w.noteLeaseLost()
		// A later delivery took the job over (this worker stalled past its
		// lease, and the new owner ended its sandbox, which is why this
		// attempt failed): the job and its message are that delivery's now.
		w.Logger.Warn("jobs: attempt superseded by a later delivery; leaving the job to it", "job", id, "attempt", attempt, "err", err)
		return
	}
	var se *StepError
	var spe *SpecError
	switch {
	case err == nil:
		w.finish(jobCtx, m, id, StateSucceeded, "", attempt)
	case errors.Is(err, ErrCanceled): // stopped before a step (Queue.Cancel)
		w.finish(jobCtx, m, id, StateCanceled, err.Error(), attempt)
	case errors.Is(err, adapters.ErrFenced):
		w.noteLeaseLost()
		// Another worker took the job over (this one missed its lease): the
		// job and its status are that worker's now; leave both alone.
		w.Logger.Warn("jobs: fenced; the job was taken over by another worker", "job", id, "err", err)
	case errors.Is(err, ErrDrained):
		w.requeue(jobCtx, m, id, attempt, "drained", 0)
	case lost != nil && attempt >= w.Queue.cfg.MaxDeliver:
		w.finish(jobCtx, m, id, StateFailed, fmt.Sprintf("attempt %d of %d: %v: %v", attempt, w.Queue.cfg.MaxDeliver, lost, err), attempt)
	case lost != nil:
		// Its sandbox expired (its renewals failed, or stopped while the
		// job's status could not be read): not the job's failure. The next
		// delivery resumes from the last checkpoint.
		w.Logger.Warn("jobs: sandbox lost; handing the job back", "job", id, "attempt", attempt, "err", lost)
		w.requeue(jobCtx, m, id, attempt, lost.Error(), handBackDelay(attempt))
	case errors.Is(err, errStatusUnavailable):
		// The job's status could not be recorded (the bucket unavailable past
		// update's retries): not the job's failure. Hand it back; the next
		// delivery takes over from the last recorded checkpoint.
		w.Logger.Warn("jobs: record status; handing the job back", "job", id, "err", err)
		_ = m.NakWithDelay(handBackDelay(attempt))
	case errors.As(err, &se) && !errors.Is(err, context.Canceled) || errors.As(err, &spe):
		w.finish(jobCtx, m, id, StateFailed, err.Error(), attempt)
	case permanent(err): // another attempt would fail alike (an image not found)
		w.finish(jobCtx, m, id, StateFailed, err.Error(), attempt)
	case attempt >= w.Queue.cfg.MaxDeliver:
		w.finish(jobCtx, m, id, StateFailed, fmt.Sprintf("attempt %d of %d: %v", attempt, w.Queue.cfg.MaxDeliver, err), attempt)
	default:
		w.Logger.Warn("jobs: attempt failed; handing the job back", "job", id, "attempt", attempt, "err", err)
		w.requeue(jobCtx, m, id, attempt, err.Error(), handBackDelay(attempt))
	}
}

// takeover prepares a redelivered job: it fences the sandboxes of the
// previous attempt, ends the previous attempt's sandbox (deleted on the
// server, sandbox.closed under its session, now this worker's to write) and
// returns the checkpoint to resume from (nil: start over).
func (w *Worker) takeover(ctx context.Context, jobID string, prev Status) (*Checkpoint, error) {
	if prev.SandboxID == "" && prev.Checkpoint == nil {
		return nil, nil
	}
	if id := checkpointSandbox(prev.Checkpoint); w.Ledger != nil && id != "" && id != prev.SandboxID {
		if _, err := w.Ledger.Takeover(ctx, id); err != nil {
			return nil, fmt.Errorf("fence sandbox %s: %w", id, err)
		}
	}
	// The dead attempt's container is of no more use: its checkpoint is a
	// snapshot of its own.
	if prev.SandboxID != "" {
		if err := w.endSession(ctx, prev.SandboxName, prev.SandboxID, jobID, events.ClosedTakenOver); err != nil {
			return nil, err
		}
	}
	if prev.Checkpoint != nil {
		cp := *prev.Checkpoint
		return &cp, nil
	}
	return nil, nil // start over
}

// endSession ends the sandbox (name, id) of job jobID for another owner: it
// fences its writer, ends it on this worker's server (endSandbox) and
// appends sandbox.closed with reason, this worker as the new owner and the
// outcome, unless the session already ends with a sandbox.closed that says
// as much (one that says the sandbox may still run is followed by a later
// one that knows better). Without a Ledger it only ends the sandbox.
func (w *Worker) endSession(ctx context.Context, name, id, jobID, reason string) error {
	if w.Ledger != nil {
		if _, err := w.Ledger.Takeover(ctx, id); err != nil {
			return fmt.Errorf("fence sandbox %s: %w", id, err)
		}
	}
	outcome := w.endSandbox(ctx, id)
	if w.Ledger == nil || name == "" {
		return nil
	}
	es, err := w.Ledger.ReadAll(ctx, name, id)
	if err != nil {
		return fmt.Errorf("read session %s/%s: %w", name, id, err)
	}
	if p, ok := lastClosed(es); len(es) == 0 || ok && (p.Final() || outcome == events.OutcomeUnreachable) {
		return nil
	}
	e := events.New(time.Now().UnixMilli(), name, id, events.SandboxLevel, events.SandboxClosed,
		events.SandboxClosedPayload{Reason: reason, By: w.ID, Job: jobID, Outcome: outcome})
	e.Actor = JobActor("", w.ID) // the worker's own doing: no user asked for it
	if err := w.Ledger.AppendBatch(ctx, []events.Entry{e}); err != nil {
		return fmt.Errorf("record sandbox.closed of %s/%s: %w", name, id, err)
	}
	return nil
}

// endFailed ends every sandbox of a job that failed for good and is still
// open (the current attempt's closed its own; an earlier attempt's may not
// have), so nothing of it stays running.
func (w *Worker) endFailed(ctx context.Context, jobID string, st Status) {
	type session struct{ name, id string }
	ss := []session{{st.SandboxName, st.SandboxID}}
	if cp := st.Checkpoint; cp != nil && cp.SandboxID != st.SandboxID {
		ss = append(ss, session{cp.Name, cp.SandboxID})
	}
	for _, s := range ss {
		if s.id == "" || s.name == "" || w.Ledger == nil {
			continue
		}
		es, err := w.Ledger.ReadAll(ctx, s.name, s.id)
		if err == nil && settled(es) {
			continue
		}
		if err := w.endSession(ctx, s.name, s.id, jobID, events.ClosedJobFailed); err != nil {
			w.Logger.Warn("jobs: end a failed job's sandbox", "job", jobID, "sandbox", s.id, "err", err)
		}
	}
}

func checkpointSandbox(cp *Checkpoint) string {
	if cp == nil {
		return ""
	}
	return cp.SandboxID
}

func (w *Worker) finish(ctx context.Context, m jetstream.Msg, id string, state State, msg string, attempt int) {
	// The superseded check is part of the compare-and-set: settle's own
	// check says no when the status cannot be read (a NATS node failing
	// over), and this attempt must then not fail, nor terminate the message
	// of, a job a later delivery holds (found by the soak: the later
	// attempt's Nak then went to a terminated message, and the job stayed
	// requeued for good).
	later := false
	st, err := w.Queue.update(ctx, id, func(s *Status) {
		if later = s.Attempt > attempt; !later {
			s.State, s.Error, s.Attempt = state, msg, attempt
		}
	})
	if err == nil && later {
		w.Logger.Warn("jobs: attempt superseded by a later delivery; leaving the job to it", "job", id, "attempt", attempt, "state", state)
		return
	}
	if err != nil && errors.Is(context.Cause(ctx), errSuperseded) {
		w.Logger.Warn("jobs: attempt superseded by a later delivery to this worker; leaving the job to it", "job", id, "attempt", attempt, "state", state)
		return
	}
	if err != nil {
		// Settling the message without its final status would leave the job
		// "running" for good: hand it back instead, so a later delivery
		// records the end (or runs again from the last checkpoint).
		w.Logger.Warn("jobs: record final status; handing the job back", "job", id, "state", state, "err", err)
		_ = m.NakWithDelay(handBackDelay(attempt))
		return
	}
	reason := events.ClosedTakenOver
	switch state {
	case StateFailed:
		w.endFailed(ctx, id, st)
		reason = events.ClosedJobFailed
	case StateCanceled:
		w.recordCancel(ctx, id, st)
		reason = ClosedCanceled
	}
	// The run closed its own sandbox; anything else tagged with the job by
	// this attempt or an earlier one is one nobody recorded (an earlier
	// attempt's that stalled past the sweep at this one's start, say).
	if _, err := w.sweep(ctx, id, attempt+1, reason); err != nil {
		w.Logger.Warn("jobs: end a finished job's unrecorded sandboxes", "job", id, "err", err)
	}
	if state == StateSucceeded {
		err = m.DoubleAck(ctx)
	} else {
		err = m.Term()
	}
	if err != nil {
		w.Logger.Warn("jobs: settle job", "job", id, "state", state, "err", err)
	}
}

func (w *Worker) requeue(ctx context.Context, m jetstream.Msg, id string, attempt int, why string, delay time.Duration) {
	later := false
	if _, err := w.Queue.update(ctx, id, func(s *Status) {
		if later = s.Attempt > attempt; !later {
			s.State, s.Error = StateRequeued, why
		}
	}); err != nil {
		w.Logger.Warn("jobs: record requeue", "job", id, "err", err)
	} else if later { // a later delivery holds the job (see finish)
		w.Logger.Warn("jobs: attempt superseded by a later delivery; leaving the job to it", "job", id, "attempt", attempt)
		return
	}
	var err error
	if delay > 0 {
		err = m.NakWithDelay(delay)
	} else {
		err = m.Nak()
	}
	if err != nil {
		w.Logger.Warn("jobs: hand back job", "job", id, "err", err)
	}
}

// handBackDelay is how long a job handed back after its attempt-th delivery
// failed waits for the next: a second after the first, doubled after each
// further attempt up to maxHandBackDelay. Most failures that hand a job back
// are the fleet's, not the job's (a store or NATS out, a sandbox lost), and
// last seconds: ten deliveries a second apart are spent, and the job failed
// for good, within a 10 s database outage (found by the soak, seed 866642);
// doubling spreads the default ten over about two and a half minutes.
func handBackDelay(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	if attempt > 16 {
		return maxHandBackDelay
	}
	return min(time.Second<<(attempt-1), maxHandBackDelay)
}

// maxHandBackDelay bounds handBackDelay.
const maxHandBackDelay = 30 * time.Second

// errStatusUnavailable marks a failure to record a job's status from a
// Runner hook: the job did not fail, its bookkeeping did.
var errStatusUnavailable = errors.New("job status unavailable")

// errSuperseded stops an attempt that finds a later delivery owns its job
// (it stalled past its lease); its sandbox is closed as Run returns.
var errSuperseded = errors.New("attempt superseded by a later delivery")

func statusFailure(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errStatusUnavailable, err)
}

// superseded reports whether a later delivery of job id than attempt owns it
// (its status records a higher attempt). A status that cannot be read says
// no: the caller then settles as it would have.
func (w *Worker) superseded(ctx context.Context, id string, attempt int) bool {
	st, err := w.Queue.Status(ctx, id)
	return err == nil && st.Attempt > attempt
}
