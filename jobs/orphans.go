package jobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
)

// Metadata keys a Worker tags each sandbox of a job with on the server
// (OpenSandbox metadata), so that the sandboxes an attempt created but did
// not live to record in the job's status can be found by the job's id.
const (
	MetaJob     = "alineo.dev/job"     // the job's id
	MetaAttempt = "alineo.dev/attempt" // the delivery that created the sandbox, 1-based
	MetaSession = "alineo.dev/session" // the ledger session the sandbox is recorded under
	MetaWorker  = "alineo.dev/worker"  // the Worker that created it (Worker.ID)
)

// JobMetadata returns the server metadata of a sandbox that attempt of job
// id creates under the ledger session named session.
func JobMetadata(id string, attempt int, session string) map[string]string {
	return map[string]string{MetaJob: id, MetaAttempt: strconv.Itoa(attempt), MetaSession: session}
}

// sweep ends every sandbox on the server tagged with job jobID by an
// attempt before below (fenced, deleted, sandbox.closed recorded with
// reason; see endSession); a sandbox whose attempt tag does not parse counts
// as an early one. It finds what an attempt killed between creating a
// sandbox and recording it left running, which the job's status cannot
// name. A later attempt's sandbox is never touched: an attempt that stalled
// past its lease and then finished must not end the sandbox of the one that
// took the job over. It returns the ids it ended and the first error; it
// goes on past a sandbox it cannot end.
func (w *Worker) sweep(ctx context.Context, jobID string, below int, reason string) ([]string, error) {
	type found struct{ id, session string }
	var all []found
	for page := 1; ; page++ {
		p, err := w.Client.OpenSandbox().ListSandboxes(ctx, opensandbox.ListSandboxesOptions{
			Metadata: map[string]string{MetaJob: jobID}, Page: page, PageSize: 200,
		})
		if err != nil {
			return nil, fmt.Errorf("list the sandboxes of job %s: %w", jobID, err)
		}
		for _, sb := range p.Items {
			n, _ := strconv.Atoi(sb.Metadata[MetaAttempt])
			if n < below && sb.Status.State != opensandbox.StateTerminated {
				all = append(all, found{sb.ID, sb.Metadata[MetaSession]})
			}
		}
		if !p.Pagination.HasNextPage || len(p.Items) == 0 {
			break
		}
	}
	var ended []string
	var first error
	for _, f := range all {
		if err := w.endSession(ctx, f.session, f.id, jobID, reason); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		ended = append(ended, f.id)
	}
	return ended, first
}

// reap ends, as a Worker starts, the sandboxes on its server that belong to
// an attempt of a job that has moved on: the job's status shows it settled,
// or a later attempt, or another worker than the sandbox's on the same
// attempt. They are what a host that died, or was cut off, while running
// them leaves behind: another worker took the job over, and could not reach
// this host's server. Each is fenced, deleted and its end recorded (reason
// "taken over", or "job failed" for a job that failed; outcome expired when
// the server had already ended it at its expiration), unless its session
// already says as much (see endSession). A sandbox whose job's status shows
// its attempt still current is left alone: another executor on this host
// may be running it, and if not, its expiration ends it, or the job's next
// delivery does. So is a sandbox whose job this queue does not know. It
// returns the ids it ended and the first error; it goes on past a sandbox
// it cannot end.
func (w *Worker) reap(ctx context.Context) ([]string, error) {
	type found struct {
		id, job, session, worker string
		attempt                  int
	}
	var all []found
	for page := 1; ; page++ {
		p, err := w.Client.OpenSandbox().ListSandboxes(ctx, opensandbox.ListSandboxesOptions{Page: page, PageSize: 200})
		if err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		for _, sb := range p.Items {
			if job := sb.Metadata[MetaJob]; job != "" {
				n, _ := strconv.Atoi(sb.Metadata[MetaAttempt])
				all = append(all, found{sb.ID, job, sb.Metadata[MetaSession], sb.Metadata[MetaWorker], n})
			}
		}
		if !p.Pagination.HasNextPage || len(p.Items) == 0 {
			break
		}
	}
	statuses := map[string]*Status{} // nil: unknown to this queue, or unreadable
	var ended []string
	var first error
	for _, f := range all {
		st, ok := statuses[f.job]
		if !ok {
			s, err := w.Queue.Status(ctx, f.job)
			switch {
			case err == nil:
				st = &s
			case !errors.Is(err, ErrNotFound) && first == nil:
				first = err
			}
			statuses[f.job] = st
		}
		if st == nil || !movedOn(*st, f.attempt, f.worker) {
			continue
		}
		reason := events.ClosedTakenOver
		if st.State == StateFailed {
			reason = events.ClosedJobFailed
		}
		if err := w.endSession(ctx, f.session, f.id, f.job, reason); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		ended = append(ended, f.id)
	}
	return ended, first
}

// movedOn reports whether the job whose status is st is done with the
// sandbox attempt created by worker ("" when not recorded).
func movedOn(st Status, attempt int, worker string) bool {
	switch {
	case st.State.Terminal(), st.Attempt > attempt:
		return true
	case st.Attempt == attempt:
		return worker != "" && st.Worker != "" && st.Worker != worker
	}
	return false // the status lags behind the sandbox: leave it
}
