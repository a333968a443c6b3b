package postgres

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/alineo-labs/alineo/adapters/internal/summary"
	"github.com/alineo-labs/alineo/events"
)

// queueDetails queues an upsert of each session's delta into alineo_sandbox_details.
func queueDetails(b *pgx.Batch, ds *summary.Deltas) {
	for _, r := range ds.Rows() {
		b.Queue(upsertDetails, r.Session.Name, r.Session.SandboxID, string(r.Status),
			r.Started, r.Completed, int32(r.Execs), r.RunID)
	}
}

// catchUpLock is the pg_advisory_xact_lock key of catchUp: one catch-up at a
// time across processes, so no row is folded twice.
const catchUpLock = migrateLock + 1

// catchUpChunk bounds the rows one step of catchUp folds.
const catchUpChunk = 4096

var (
	// pendingExists asks whether the summary is behind: one probe of the
	// partial index alineo_events_unsummarised, which holds only rows not
	// folded yet.
	pendingExists  = `SELECT EXISTS (SELECT 1 FROM alineo_events WHERE ` + summary.Pending + `)`
	pendingRows    = `SELECT id, ts, name, sandbox_id, event, payload FROM alineo_events WHERE ` + summary.Pending + ` ORDER BY id LIMIT $1`
	markSummarised = `UPDATE alineo_events SET summarised = true WHERE id = ANY($1)`
)

// catchUp folds into alineo_sandbox_details the rows that were appended
// without being folded (by another process: the TypeScript SDK, or a tool
// writing SQL) and marks them folded, in tx, chunk by chunk, under
// catchUpLock. It returns the number of rows folded. A row another
// transaction has not committed yet is not seen; the next catch-up folds it.
func catchUp(ctx context.Context, tx pgx.Tx) (int, error) {
	// The commit need not wait for the WAL flush: a catch-up holds only what
	// the ledger says already, and one lost to a crash leaves its rows
	// unmarked, folded again by the next one.
	if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, catchUpLock); err != nil {
		return 0, err
	}
	total := 0
	for {
		rows, err := tx.Query(ctx, pendingRows, catchUpChunk)
		if err != nil {
			return total, err
		}
		var (
			d   summary.Deltas
			ids []int64
		)
		for rows.Next() {
			var (
				id      int64
				e       events.Entry
				ev      string
				payload []byte
			)
			if err := rows.Scan(&id, &e.Ts, &e.Name, &e.SandboxID, &ev, &payload); err != nil {
				rows.Close()
				return total, err
			}
			e.Event, e.Payload = events.Event(ev), json.RawMessage(payload)
			d.Add(e)
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return total, err
		}
		if len(ids) == 0 {
			return total, nil
		}
		b := &pgx.Batch{}
		queueDetails(b, &d)
		b.Queue(markSummarised, ids)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return total, err
		}
		total += len(ids)
		if len(ids) < catchUpChunk {
			return total, nil
		}
	}
}

// caughtUp brings the summary up to date before it is read: when the partial
// index shows rows not folded yet, it folds them in a transaction. When the
// summary is current (every row appended by this module's stores), it costs
// one probe of an empty index.
func (s *Store) caughtUp(ctx context.Context) error {
	p, err := s.db(ctx)
	if err != nil {
		return err
	}
	var pending bool
	if err := p.QueryRow(ctx, pendingExists).Scan(&pending); err != nil || !pending {
		return err
	}
	return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		_, err := catchUp(ctx, tx)
		return err
	})
}
