package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrateLock is the pg_advisory_xact_lock key of the migration ("alckpt"),
// distinct from the ledger adapter's so that the two never wait on each other.
const migrateLock int64 = 0x616c636b7074

// schema is the SQLite store's, in Postgres types. Ids and keys compare
// bytewise (COLLATE "C"), so Threads and ListBlobReferences sort as Go does.
// Every statement is idempotent.
const schema = `
CREATE TABLE IF NOT EXISTS alineo_checkpoints (
	seq        BIGSERIAL PRIMARY KEY,
	id         TEXT COLLATE "C" NOT NULL UNIQUE,
	thread_id  TEXT COLLATE "C" NOT NULL,
	parent_id  TEXT COLLATE "C" NOT NULL DEFAULT '',
	created_at BIGINT NOT NULL,
	body       TEXT   NOT NULL
);
CREATE INDEX IF NOT EXISTS alineo_checkpoints_thread ON alineo_checkpoints (thread_id, seq);
CREATE INDEX IF NOT EXISTS alineo_checkpoints_parent ON alineo_checkpoints (thread_id, parent_id);
CREATE TABLE IF NOT EXISTS alineo_checkpoint_heads (
	thread_id TEXT COLLATE "C" PRIMARY KEY,
	head_id   TEXT COLLATE "C" NOT NULL
);
CREATE TABLE IF NOT EXISTS alineo_checkpoint_leases (
	thread_id   TEXT COLLATE "C" PRIMARY KEY,
	owner_token TEXT   NOT NULL,
	fence       BIGINT NOT NULL,
	expires_at  BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS alineo_checkpoint_blob_refs (
	checkpoint_id TEXT COLLATE "C" NOT NULL,
	blob_key      TEXT COLLATE "C" NOT NULL,
	refs          INTEGER NOT NULL,
	PRIMARY KEY (checkpoint_id, blob_key)
);
CREATE INDEX IF NOT EXISTS alineo_checkpoint_blob_refs_key ON alineo_checkpoint_blob_refs (blob_key);
`

// migrate creates the tables in one transaction under an advisory lock:
// concurrent CREATE TABLE IF NOT EXISTS can otherwise fail on the catalog's
// unique index, so processes starting at once migrate one after the other and
// the later ones change nothing.
func migrate(ctx context.Context, p *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, schema); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
		return nil
	})
}
