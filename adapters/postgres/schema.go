package postgres

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/alineo-labs/alineo/adapters/internal/summary"
)

// migrateLock is the pg_advisory_xact_lock key of the migration ("alineo").
const migrateLock int64 = 0x616c696e656f

// The schema of storage.md in its Postgres shape, then our additions; every
// statement is idempotent. The older single-column indexes are left as they
// are (see the package doc).
var schema = `
CREATE TABLE IF NOT EXISTS alineo_events (
  id          BIGSERIAL PRIMARY KEY,
  sandbox_id  TEXT      NOT NULL,
  name        TEXT      NOT NULL,
  step_idx    INTEGER   NOT NULL,
  branch      INTEGER,
  event       TEXT      NOT NULL,
  payload     JSONB,
  error       TEXT,
  ts          BIGINT    NOT NULL
);
CREATE INDEX IF NOT EXISTS alineo_events_name_sandbox_ts
  ON alineo_events(name, sandbox_id, ts, id);
CREATE TABLE IF NOT EXISTS alineo_environments (
  name        TEXT   PRIMARY KEY,
  snapshot_id TEXT   NOT NULL,
  image       TEXT   NOT NULL,
  built_at    BIGINT NOT NULL
);

ALTER TABLE alineo_events ADD COLUMN IF NOT EXISTS ledger_seq BIGINT;
CREATE UNIQUE INDEX IF NOT EXISTS alineo_events_ledger_seq ON alineo_events(ledger_seq);
ALTER TABLE alineo_events ADD COLUMN IF NOT EXISTS summarised BOOLEAN;
CREATE INDEX IF NOT EXISTS alineo_events_unsummarised ON alineo_events(id) WHERE ` + summary.Pending + `;
ALTER TABLE alineo_events ADD COLUMN IF NOT EXISTS actor TEXT;
ALTER TABLE alineo_environments ADD COLUMN IF NOT EXISTS fingerprint TEXT;
ALTER TABLE alineo_events ADD COLUMN IF NOT EXISTS prev_hash TEXT;
ALTER TABLE alineo_events ADD COLUMN IF NOT EXISTS hash TEXT;
CREATE TABLE IF NOT EXISTS alineo_chain_heads (
  name       TEXT COLLATE "C" NOT NULL,
  sandbox_id TEXT COLLATE "C" NOT NULL,
  hash       TEXT NOT NULL,
  PRIMARY KEY (name, sandbox_id)
);
CREATE TABLE IF NOT EXISTS alineo_projection_offsets (
  consumer TEXT   PRIMARY KEY,
  "offset" BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS alineo_sandbox_details (
  name         TEXT COLLATE "C" NOT NULL,
  sandbox_id   TEXT COLLATE "C" NOT NULL,
  status       TEXT    NOT NULL,
  started_at   BIGINT,
  completed_at BIGINT,
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

// migrate brings the database to the current schema in one transaction under
// an advisory lock: concurrent migrations from several processes run one after
// the other, and the later ones change nothing.
func migrate(ctx context.Context, p *pgxpool.Pool, log *slog.Logger) error {
	return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		// summarised marks the rows folded into alineo_sandbox_details. When
		// it is new, no row is marked: the summary (if an earlier version kept
		// one) is rebuilt from every row, those another process appended
		// included.
		var rebuild bool
		if err := tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM information_schema.columns
			 WHERE table_schema = current_schema() AND table_name = 'alineo_events' AND column_name = 'summarised')`).Scan(&rebuild); err != nil {
			return fmt.Errorf("migrate: inspect alineo_events: %w", err)
		}
		if _, err := tx.Exec(ctx, schema); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if rebuild {
			// The first details read folds every row (caughtUp).
			tag, err := tx.Exec(ctx, `DELETE FROM alineo_sandbox_details`)
			if err != nil {
				return fmt.Errorf("migrate: reset sandbox details: %w", err)
			}
			if n := tag.RowsAffected(); n > 0 {
				log.Info("postgres: sandbox details are summarised again from the ledger on first read", "reset", n)
			}
		}
		return nil
	})
}
