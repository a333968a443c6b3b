package postgres

import (
	"github.com/jackc/pgx/v5"

	"github.com/alineo-labs/alineo/adapters/internal/summary"
)

// queueDetails queues an upsert of each session's delta into alineo_sandbox_details.
func queueDetails(b *pgx.Batch, ds *summary.Deltas) {
	for _, r := range ds.Rows() {
		b.Queue(upsertDetails, r.Session.Name, r.Session.SandboxID, string(r.Status),
			r.Started, r.Completed, int32(r.Execs), r.RunID)
	}
}
