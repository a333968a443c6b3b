package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"

	"github.com/alineo-labs/alineo/adapters/internal/summary"
	"github.com/alineo-labs/alineo/events"
)

// applyDetails upserts every session's delta into alineo_sandbox_details,
// with one prepared statement when there are several.
func applyDetails(ctx context.Context, tx *sql.Tx, ds *summary.Deltas) error {
	rows := ds.Rows()
	exec := func(r summary.Row) error {
		_, err := tx.ExecContext(ctx, upsertDetails, r.Session.Name, r.Session.SandboxID,
			string(r.Status), r.Started, r.Completed, r.Execs, r.RunID)
		return err
	}
	if len(rows) > 2 {
		stmt, err := tx.PrepareContext(ctx, upsertDetails)
		if err != nil {
			return err
		}
		defer stmt.Close()
		exec = func(r summary.Row) error {
			_, err := stmt.ExecContext(ctx, r.Session.Name, r.Session.SandboxID,
				string(r.Status), r.Started, r.Completed, r.Execs, r.RunID)
			return err
		}
	}
	for _, r := range rows {
		if err := exec(r); err != nil {
			return err
		}
	}
	return nil
}

// catchUpChunk bounds the rows one step of catchUp folds.
const catchUpChunk = 4096

var (
	// pendingExists asks whether the summary is behind: one probe of the
	// partial index alineo_events_unsummarised, which holds only rows not
	// folded yet.
	pendingExists  = `SELECT EXISTS (SELECT 1 FROM alineo_events WHERE ` + summary.Pending + `)`
	pendingRows    = `SELECT id, ts, name, sandbox_id, event, payload FROM alineo_events WHERE ` + summary.Pending + ` ORDER BY id LIMIT ?`
	markSummarised = `UPDATE alineo_events SET summarised = 1 WHERE ` + summary.Pending + ` AND id <= ?`
)

// catchUp folds into alineo_sandbox_details the first catchUpChunk rows that
// were appended without being folded (by another process: the TypeScript SDK,
// or a tool writing SQL) and marks them folded, in tx. It returns the number of
// rows folded: catchUpChunk when there may be more. tx is an immediate
// transaction, so no other writer appends or folds meanwhile.
func catchUp(ctx context.Context, tx *sql.Tx) (int, error) {
	n, last, err := catchUpChunkOnce(ctx, tx)
	if err != nil || n == 0 {
		return n, err
	}
	_, err = tx.ExecContext(ctx, markSummarised, last)
	return n, err
}

// catchUpChunkOnce folds the first catchUpChunk pending rows and returns how
// many there were and the id of the last.
func catchUpChunkOnce(ctx context.Context, tx *sql.Tx) (n int, last int64, err error) {
	rows, err := tx.QueryContext(ctx, pendingRows, catchUpChunk)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	var d summary.Deltas
	for rows.Next() {
		var (
			e       events.Entry
			ev      string
			payload []byte
		)
		if err := rows.Scan(&last, &e.Ts, &e.Name, &e.SandboxID, &ev, &payload); err != nil {
			return 0, 0, err
		}
		e.Event, e.Payload = events.Event(ev), json.RawMessage(payload)
		d.Add(e)
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	return n, last, applyDetails(ctx, tx, &d)
}

// caughtUp brings the summary up to date before it is read: when the partial
// index shows rows not folded yet, it folds them in a write transaction. When
// the summary is current (every row appended by this module's stores), it costs
// one probe of an empty index.
//
// The catch-up commits with synchronous=NORMAL (no fsync; WAL keeps it
// atomic): it holds only what the ledger says already, and a catch-up lost to
// a power cut leaves its rows unmarked, folded again by the next one. The
// writer connection gets its level back before any other write uses it.
func (s *Store) caughtUp(ctx context.Context) error {
	w, r, err := s.dbs(ctx)
	if err != nil {
		return err
	}
	var pending bool
	if err := r.QueryRowContext(ctx, pendingExists).Scan(&pending); err != nil || !pending {
		return err
	}
	conn, err := w.Conn(ctx) // the one writer connection, held until Close
	if err != nil {
		return err
	}
	defer conn.Close()
	if s.cfg.Synchronous != "NORMAL" {
		if _, err := conn.ExecContext(ctx, "PRAGMA synchronous=NORMAL"); err != nil {
			return err
		}
		defer func() {
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA synchronous="+s.cfg.Synchronous); err != nil {
				// Never hand on a connection with the wrong level: drop it.
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}()
	}
	// A transaction per chunk: a catch-up cut short (its ctx ended) keeps
	// what it folded, and appends interleave with a long one.
	for {
		tx, err := conn.BeginTx(ctx, nil) // BEGIN IMMEDIATE: _txlock=immediate
		if err != nil {
			return err
		}
		n, err := catchUp(ctx, tx)
		if err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if n < catchUpChunk {
			return nil
		}
	}
}
