package postgres

import (
	"context"
	"encoding/json"
	"sync"
	"time"

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
	// pendingAbove asks whether the summary is behind on rows above an id:
	// a probe of the partial index alineo_events_unsummarised, which holds
	// only rows not folded yet (and, until a vacuum, the dead entries of rows
	// folded since, which the id bound skips).
	pendingAbove   = `SELECT EXISTS (SELECT 1 FROM alineo_events WHERE ` + summary.Pending + ` AND id > $1)`
	pendingRows    = `SELECT id, ts, name, sandbox_id, event, payload FROM alineo_events WHERE ` + summary.Pending + ` AND id > $1 ORDER BY id LIMIT $2`
	markSummarised = `UPDATE alineo_events SET summarised = true WHERE id = ANY($1)`
)

// fullProbeEvery is how often caughtUp probes the whole partial index rather
// than above the rows it folded last: a transaction of another process that
// got its ids before one that committed first is folded within this long.
const fullProbeEvery = time.Second

// catchUpState is what a Store remembers of its catch-ups.
type catchUpState struct {
	mu sync.Mutex
	// floor is the highest id folded so far; a probe above it skips the
	// dead index entries of the rows folded before.
	floor  int64
	fullAt time.Time // when the last probe of the whole index ran
}

// catchUp folds into alineo_sandbox_details the first catchUpChunk rows with
// an id above floor that were appended without being folded (by another
// process: the TypeScript SDK, or a tool writing SQL) and marks them folded,
// in tx, under catchUpLock. It returns the number of rows folded
// (catchUpChunk when there may be more) and the highest id among them. A row
// another transaction has not committed yet is not seen; a later catch-up
// folds it.
func catchUp(ctx context.Context, tx pgx.Tx, floor int64) (int, int64, error) {
	// The commit need not wait for the WAL flush: a catch-up holds only what
	// the ledger says already, and one lost to a crash leaves its rows
	// unmarked, folded again by the next one.
	if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
		return 0, floor, err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, catchUpLock); err != nil {
		return 0, floor, err
	}
	rows, err := tx.Query(ctx, pendingRows, floor, catchUpChunk)
	if err != nil {
		return 0, floor, err
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
			return 0, floor, err
		}
		e.Event, e.Payload = events.Event(ev), json.RawMessage(payload)
		d.Add(e)
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, floor, err
	}
	if len(ids) == 0 {
		return 0, floor, nil
	}
	b := &pgx.Batch{}
	queueDetails(b, &d)
	b.Queue(markSummarised, ids)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, floor, err
	}
	return len(ids), ids[len(ids)-1], nil
}

// caughtUp brings the summary up to date before it is read: when the partial
// index shows rows not folded yet, it folds them in a transaction. When the
// summary is current (every row appended by this module's stores), it costs
// one probe of the index above the last row folded; once a second, of the
// whole index (see fullProbeEvery).
func (s *Store) caughtUp(ctx context.Context) error {
	p, err := s.db(ctx)
	if err != nil {
		return err
	}
	s.cu.mu.Lock()
	floor, full := s.cu.floor, time.Since(s.cu.fullAt) >= fullProbeEvery
	s.cu.mu.Unlock()
	if full {
		floor = 0
	}
	var pending bool
	if err := p.QueryRow(ctx, pendingAbove, floor).Scan(&pending); err != nil {
		return err
	}
	if full {
		s.cu.mu.Lock()
		s.cu.fullAt = time.Now()
		s.cu.mu.Unlock()
	}
	if !pending {
		return nil
	}
	// A transaction per chunk: a catch-up cut short (its ctx ended) keeps
	// what it folded.
	for {
		var n int
		err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			var err error
			n, floor, err = catchUp(ctx, tx, floor)
			return err
		})
		if err != nil {
			return err
		}
		s.cu.mu.Lock()
		s.cu.floor = max(s.cu.floor, floor)
		s.cu.mu.Unlock()
		if n < catchUpChunk {
			return nil
		}
	}
}
