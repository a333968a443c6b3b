package jobs

import (
	"context"
	"fmt"
	"strconv"

	"github.com/alineo-labs/alineo/opensandbox"
)

// Metadata keys a Worker tags each sandbox of a job with on the server
// (OpenSandbox metadata), so that the sandboxes an attempt created but did
// not live to record in the job's status can be found by the job's id.
const (
	MetaJob     = "alineo.dev/job"     // the job's id
	MetaAttempt = "alineo.dev/attempt" // the delivery that created the sandbox, 1-based
	MetaSession = "alineo.dev/session" // the ledger session the sandbox is recorded under
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
