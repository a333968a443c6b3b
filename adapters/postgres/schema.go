package postgres

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrateLock is the pg_advisory_xact_lock key of the migration ("alineo").
const migrateLock int64 = 0x616c696e656f

// The schema of storage.md in its Postgres shape, then the old indexes dropped
// and our additions; every statement is idempotent.
const schema = `
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
DROP INDEX IF EXISTS alineo_events_sandbox_id;
DROP INDEX IF EXISTS alineo_events_name;

ALTER TABLE alineo_events ADD COLUMN IF NOT EXISTS ledger_seq BIGINT;
CREATE UNIQUE INDEX IF NOT EXISTS alineo_events_ledger_seq ON alineo_events(ledger_seq);
ALTER TABLE alineo_environments ADD COLUMN IF NOT EXISTS fingerprint TEXT;
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

// backfill fills the summary from the entries of a ledger that had none.
const backfill = `
INSERT INTO alineo_sandbox_details (name, sandbox_id, status, started_at, completed_at, exec_count, run_id)
SELECT name, sandbox_id,
  CASE WHEN MAX(ts) FILTER (WHERE event = 'sandbox.closed') IS NULL THEN 'running' ELSE 'completed' END,
  MIN(ts) FILTER (WHERE event = 'sandbox.created'),
  MAX(ts) FILTER (WHERE event = 'sandbox.closed'),
  COUNT(*) FILTER (WHERE event = 'exec.completed'),
  COALESCE(NULLIF((array_agg(payload->>'runId' ORDER BY ts, id) FILTER (WHERE event = 'sandbox.created'))[1], ''), sandbox_id)
FROM alineo_events
WHERE event IN ('sandbox.created', 'sandbox.closed', 'exec.completed')
GROUP BY name, sandbox_id
`

// migrate brings the database to the current schema in one transaction under
// an advisory lock: concurrent migrations from several processes run one after
// the other, and the later ones change nothing.
func migrate(ctx context.Context, p *pgxpool.Pool, log *slog.Logger) error {
	return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		var hadDetails bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('alineo_sandbox_details') IS NOT NULL`).Scan(&hadDetails); err != nil {
			return fmt.Errorf("migrate: look for alineo_sandbox_details: %w", err)
		}
		if _, err := tx.Exec(ctx, schema); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if hadDetails {
			return nil
		}
		tag, err := tx.Exec(ctx, backfill)
		if err != nil {
			return fmt.Errorf("migrate: backfill sandbox details: %w", err)
		}
		if n := tag.RowsAffected(); n > 0 {
			log.Info("postgres: backfilled sandbox details from the ledger", "sessions", n)
		}
		return nil
	})
}
