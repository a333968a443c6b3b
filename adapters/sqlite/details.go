package sqlite

import (
	"context"
	"database/sql"

	"github.com/alineo-labs/alineo/adapters/internal/summary"
)

// applyDetails upserts every session's delta into alineo_sandbox_details.
func applyDetails(ctx context.Context, tx *sql.Tx, ds *summary.Deltas) error {
	for _, r := range ds.Rows() {
		if _, err := tx.ExecContext(ctx, upsertDetails, r.Session.Name, r.Session.SandboxID,
			string(r.Status), r.Started, r.Completed, r.Execs, r.RunID); err != nil {
			return err
		}
	}
	return nil
}
