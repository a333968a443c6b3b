package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
)

// errSandboxLost is the cause of a run stopped because its sandbox expired:
// its renewals failed, or stopped while this attempt could not show it still
// held the job.
var errSandboxLost = errors.New("sandbox expired under the job")

// reasonTTLExpiry is the status reason of a sandbox its server ended when
// its expiration passed (OpenSandbox's lifecycle spec).
const reasonTTLExpiry = "ttl_expiry"

// createTimeout is the time to live a sandbox is created with for a
// SandboxTTL of ttl: ttl in whole seconds, but at least the protocol's
// minimum. Renewals bring the expiration to ttl from now once that is later.
func createTimeout(ttl time.Duration) time.Duration {
	return max(alineo.MinTimeout, (ttl + time.Second - 1).Truncate(time.Second))
}

// keeper renews the expiration of one attempt's sandbox while the attempt
// runs and holds its job, and stops the run (lose) once the sandbox is lost.
// start is called at most once, by the run's OnSandbox; stop by the
// goroutine that ran the Runner, after it returned.
type keeper struct {
	w       *Worker
	job     string
	attempt int
	lose    context.CancelCauseFunc

	stopped chan struct{} // closed by stop
	wg      sync.WaitGroup

	mu   sync.Mutex
	sb   *alineo.Sandbox
	lost error
}

func (w *Worker) newKeeper(job string, attempt int, lose context.CancelCauseFunc) *keeper {
	return &keeper{w: w, job: job, attempt: attempt, lose: lose, stopped: make(chan struct{})}
}

// start renews sb until stop; ctx ending stops the renewals too.
func (k *keeper) start(ctx context.Context, sb *alineo.Sandbox) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.sb != nil || isClosed(k.stopped) {
		return
	}
	k.sb = sb
	k.wg.Go(func() { k.run(ctx, sb) })
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// stop ends the renewals and returns why the sandbox was lost, nil if it
// was not: the keeper saw it go, or its expiration has passed (the server
// may have ended it, and the run failed of it, before the keeper's next look).
func (k *keeper) stop() error {
	k.mu.Lock()
	if !isClosed(k.stopped) {
		close(k.stopped)
	}
	sb := k.sb
	k.mu.Unlock()
	k.wg.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lost == nil && sb != nil {
		if exp := sb.ExpiresAt(); !exp.IsZero() && time.Now().After(exp) {
			k.lost = fmt.Errorf("%w: sandbox %s: its expiration passed at %s", errSandboxLost, sb.ID(), exp.Format(time.RFC3339))
		}
	}
	return k.lost
}

func (k *keeper) run(ctx context.Context, sb *alineo.Sandbox) {
	w := k.w
	held := time.Now() // the run's OnSandbox has just shown the attempt holds the job
	t := time.NewTicker(w.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-k.stopped:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		if held, err = k.renew(ctx, sb, held); err != nil {
			k.mu.Lock()
			k.lost = err
			k.mu.Unlock()
			k.lose(err)
			return
		} else if held.IsZero() {
			return // nothing more to renew
		}
	}
}

// renew is one look of the keeper: it reads the job's status and, while
// the status has shown within the last AckWait that this attempt holds the
// job, moves the sandbox's expiration to SandboxTTL from now. It returns
// when the status last showed that, zero when there is nothing more to
// renew (a later delivery holds the job, or the sandbox was deleted: by the
// run's own Close, or by a worker that took the job over), and an error
// wrapping errSandboxLost once the sandbox expired or its expiration has
// passed.
func (k *keeper) renew(ctx context.Context, sb *alineo.Sandbox, held time.Time) (time.Time, error) {
	w := k.w
	// A look may take a renewal period, and a second at least: a slow
	// answer is no reason to skip a renewal.
	ctx, cancel := context.WithTimeout(ctx, min(max(w.RenewEvery, time.Second), w.SandboxTTL))
	defer cancel()
	now := time.Now()
	st, err := w.Queue.Status(ctx, k.job)
	switch {
	case err == nil && st.Attempt > k.attempt:
		w.Logger.Warn("jobs: a later delivery holds the job; leaving this attempt's sandbox to expire",
			"job", k.job, "attempt", k.attempt, "sandbox", sb.ID())
		return time.Time{}, nil
	case err == nil:
		held = now
	default:
		w.Logger.Debug("jobs: read status to renew the sandbox", "job", k.job, "err", err)
	}
	switch target := now.Add(w.SandboxTTL); {
	case now.Sub(held) > w.Queue.cfg.AckWait:
		// This attempt cannot show it still holds the job: another worker
		// may run it by now. Its sandbox is left to expire, unless the
		// status can be read again in time.
		w.Logger.Warn("jobs: job status unreadable for longer than the lease; not renewing the sandbox",
			"job", k.job, "sandbox", sb.ID(), "since", held)
	case !target.After(sb.ExpiresAt()):
		// Created with the protocol's minimum, further off than SandboxTTL.
	default:
		if _, err := sb.Renew(ctx, target); err != nil {
			switch lost, gone := k.gone(ctx, sb, err); {
			case lost != nil:
				return held, lost
			case gone:
				return time.Time{}, nil
			}
			w.Logger.Warn("jobs: renew the sandbox", "job", k.job, "sandbox", sb.ID(), "err", err)
		}
	}
	if exp := sb.ExpiresAt(); !exp.IsZero() && time.Now().After(exp) {
		return held, fmt.Errorf("%w: sandbox %s: its expiration passed at %s", errSandboxLost, sb.ID(), exp.Format(time.RFC3339))
	}
	return held, nil
}

// gone looks up a sandbox whose renewal the server refused (renewErr). It
// returns an error wrapping errSandboxLost when the server ended it at its
// expiration, and gone when the server no longer runs it for another reason
// (deleted: by the run's own Close, or by a worker that took the job over,
// and the run fails of that by itself). Both are zero when the server did
// not answer, or runs it still: the next look tries again.
func (k *keeper) gone(ctx context.Context, sb *alineo.Sandbox, renewErr error) (lost error, gone bool) {
	var api *opensandbox.APIError
	if !errors.As(renewErr, &api) {
		return nil, false
	}
	s, err := k.w.Client.OpenSandbox().GetSandbox(ctx, sb.ID())
	switch {
	case errors.Is(err, opensandbox.ErrNotFound):
		return nil, true
	case err != nil || !ended(s.Status.State):
		return nil, false
	case s.Status.Reason == reasonTTLExpiry:
		return fmt.Errorf("%w: sandbox %s is %s (%s): %w", errSandboxLost, sb.ID(), s.Status.State, s.Status.Reason, renewErr), true
	}
	return nil, true
}

// ended reports whether a sandbox in state s no longer runs, or is being
// ended.
func ended(s opensandbox.SandboxState) bool {
	return s == opensandbox.StateStopping || s == opensandbox.StateTerminated || s == opensandbox.StateFailed
}

// endSandbox ends sandbox id on this worker's server and returns what became
// of it: events.OutcomeExpired when the server had ended it at its
// expiration, events.OutcomeClosed when it is deleted or the server had ended
// it otherwise, events.OutcomeUnreachable when the server does not have it
// (it is another host's, which expires it or deletes it when it comes back)
// or did not answer, or refused the delete of a sandbox that still runs.
func (w *Worker) endSandbox(ctx context.Context, id string) string {
	os := w.Client.OpenSandbox()
	sb, err := os.GetSandbox(ctx, id)
	if err != nil {
		w.Logger.Debug("jobs: look up a previous attempt's sandbox", "sandbox", id, "err", err)
		return events.OutcomeUnreachable
	}
	outcome := events.OutcomeClosed
	if ended(sb.Status.State) && sb.Status.Reason == reasonTTLExpiry {
		outcome = events.OutcomeExpired
	}
	if err := os.DeleteSandbox(ctx, id); err != nil && !errors.Is(err, opensandbox.ErrNotFound) {
		w.Logger.Debug("jobs: delete a previous attempt's sandbox", "sandbox", id, "err", err)
		if !ended(sb.Status.State) {
			return events.OutcomeUnreachable
		}
	}
	return outcome
}

// lastClosed returns the payload of the sandbox.closed the session es ends
// with (nothing but credential revocations after it), and whether it ends
// with one. An undecodable payload reads as a plain close.
func lastClosed(es []events.Entry) (events.SandboxClosedPayload, bool) {
	for i := len(es) - 1; i >= 0; i-- {
		switch es[i].Event {
		case events.SandboxClosed:
			var p events.SandboxClosedPayload
			if len(es[i].Payload) > 0 && es[i].Decode(&p) != nil {
				p = events.SandboxClosedPayload{}
			}
			return p, true
		case events.CredentialRevoked:
			continue
		}
		return events.SandboxClosedPayload{}, false
	}
	return events.SandboxClosedPayload{}, false
}

// settled reports whether the session es ends with a sandbox.closed that
// says its sandbox no longer runs.
func settled(es []events.Entry) bool {
	p, ok := lastClosed(es)
	return ok && p.Final()
}
