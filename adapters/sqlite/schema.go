package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/alineo-labs/alineo/adapters/internal/summary"
)

// The schema of storage.md, verbatim: a ledger written by the TypeScript SDK
// has exactly these tables.
const seedSchema = `
CREATE TABLE IF NOT EXISTS alineo_events (
  id          INTEGER  PRIMARY KEY,
  sandbox_id  TEXT     NOT NULL,
  name        TEXT     NOT NULL,
  step_idx    INTEGER  NOT NULL,
  branch      INTEGER,
  event       TEXT     NOT NULL,
  payload     TEXT,
  error       TEXT,
  ts          INTEGER  NOT NULL
);
CREATE INDEX IF NOT EXISTS alineo_events_name_sandbox_ts
  ON alineo_events(name, sandbox_id, ts, id);
CREATE TABLE IF NOT EXISTS alineo_environments (
  name        TEXT    PRIMARY KEY,
  snapshot_id TEXT    NOT NULL,
  image       TEXT    NOT NULL,
  built_at    INTEGER NOT NULL
);
`

// Our additions. Columns are added by addColumn, which checks first.
var additions = `
CREATE UNIQUE INDEX IF NOT EXISTS alineo_events_ledger_seq ON alineo_events(ledger_seq);
CREATE INDEX IF NOT EXISTS alineo_events_unsummarised ON alineo_events(id) WHERE ` + summary.Pending + `;
CREATE TABLE IF NOT EXISTS alineo_projection_offsets (
  consumer    TEXT    PRIMARY KEY,
  "offset"    INTEGER NOT NULL
);
`

// The summary the details queries read: one row per session with any
// sandbox.created, sandbox.closed or exec.completed entry; sessions whose
// started_at is NULL (no sandbox.created yet) are not listed.
const detailsSchema = `
CREATE TABLE IF NOT EXISTS alineo_sandbox_details (
  name         TEXT    NOT NULL,
  sandbox_id   TEXT    NOT NULL,
  status       TEXT    NOT NULL,
  started_at   INTEGER,
  completed_at INTEGER,
  exec_count   INTEGER NOT NULL DEFAULT 0,
  run_id       TEXT,
  PRIMARY KEY (name, sandbox_id)
);
CREATE INDEX IF NOT EXISTS alineo_sandbox_details_started
  ON alineo_sandbox_details(started_at DESC, name, sandbox_id) WHERE started_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS alineo_sandbox_details_name_started
  ON alineo_sandbox_details(name, started_at DESC, sandbox_id) WHERE started_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS alineo_sandbox_details_status_started
  ON alineo_sandbox_details(status, started_at DESC, name, sandbox_id) WHERE started_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS alineo_sandbox_details_run_started
  ON alineo_sandbox_details(run_id, started_at DESC, name, sandbox_id) WHERE started_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS alineo_sandbox_details_sandbox_started
  ON alineo_sandbox_details(sandbox_id, started_at DESC, name) WHERE started_at IS NOT NULL;
`

// migrate brings the database to the current schema. It is idempotent and runs
// in one immediate transaction, so concurrent migrations from several
// processes run one after the other and the later ones change nothing.
func migrate(ctx context.Context, db *sql.DB, log *slog.Logger) (err error) {
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: _txlock=immediate
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, seedSchema); err != nil {
		return fmt.Errorf("migrate: seed schema: %w", err)
	}
	if _, err := addColumn(ctx, tx, "alineo_events", "ledger_seq", "INTEGER"); err != nil {
		return err
	}
	// actor is who caused the entry (events.Entry.Actor), NULL when unknown:
	// the TypeScript SDK neither writes nor reads it.
	if _, err := addColumn(ctx, tx, "alineo_events", "actor", "TEXT"); err != nil {
		return err
	}
	// The hash chain (docs/architecture.md §4.10): NULL on rows written
	// before it, or by the TypeScript SDK.
	for _, col := range []string{"prev_hash", "hash"} {
		if _, err := addColumn(ctx, tx, "alineo_events", col, "TEXT"); err != nil {
			return err
		}
	}
	if _, err := addColumn(ctx, tx, "alineo_environments", "fingerprint", "TEXT"); err != nil {
		return err
	}
	// summarised marks the rows folded into alineo_sandbox_details. When it
	// is new, no row is marked: the summary (if an earlier version kept one)
	// is rebuilt from every row, those another process appended included.
	rebuild, err := addColumn(ctx, tx, "alineo_events", "summarised", "INTEGER")
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, additions+detailsSchema); err != nil {
		return fmt.Errorf("migrate: additions: %w", err)
	}
	if rebuild {
		// The first details read folds every row (caughtUp).
		res, err := tx.ExecContext(ctx, `DELETE FROM alineo_sandbox_details`)
		if err != nil {
			return fmt.Errorf("migrate: reset sandbox details: %w", err)
		}
		if n := rowsAffected(res); n > 0 {
			log.Info("sqlite: sandbox details are summarised again from the ledger on first read", "reset", n)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// addColumn adds a nullable column unless the table has it, and reports
// whether it did.
func addColumn(ctx context.Context, tx *sql.Tx, table, column, typ string) (bool, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info(?) WHERE name = ?`, table, column).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("migrate: inspect %s: %w", table, err)
	}
	if n > 0 {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE %s ADD COLUMN %s %s`, table, column, typ)); err != nil {
		return false, fmt.Errorf("migrate: add %s.%s: %w", table, column, err)
	}
	return true, nil
}

func rowsAffected(res sql.Result) int64 {
	n, _ := res.RowsAffected()
	return n
}
