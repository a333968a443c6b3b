package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/internal/entries"
	"github.com/alineo-labs/alineo/adapters/internal/groupcommit"
	"github.com/alineo-labs/alineo/adapters/internal/summary"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/validated"
)

// insertCols starts an INSERT of rows folded into the summary in the same
// transaction: summarised is 1 on every row this store writes.
const insertCols = `INSERT INTO alineo_events (sandbox_id, name, step_idx, branch, event, payload, error, ts, ledger_seq, actor, prev_hash, hash, summarised) VALUES `

// values is one row's placeholders, cols of them.
const values = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)`

// cols is the number of values args appends per row.
const cols = 12

// chunk is the number of rows of one multi-row INSERT of a commit.
const chunk = 100

var insertChunk = insertRows(chunk)

// insertsOf holds the multi-row INSERTs of 1 to chunk rows, built once.
var insertsOf = func() (q [chunk + 1]string) {
	for n := 1; n <= chunk; n++ {
		q[n] = buildInsert(n)
	}
	return q
}()

// insertRows returns a multi-row INSERT of n rows.
func insertRows(n int) string {
	if n > 0 && n <= chunk {
		return insertsOf[n]
	}
	return buildInsert(n)
}

func buildInsert(n int) string {
	return insertCols + strings.TrimSuffix(strings.Repeat(values+`, `, n), ", ")
}

// onConflictSeq makes ApplyBatch's INSERTs skip a row whose ledger sequence is
// stored already (a safety net: ApplyBatch leaves those rows out).
const onConflictSeq = ` ON CONFLICT (ledger_seq) DO NOTHING`

var insertChunkProjected = insertChunk + onConflictSeq

// upsertDetails folds a delta into a session's summary row.
const upsertDetails = `
INSERT INTO alineo_sandbox_details AS d (name, sandbox_id, status, started_at, completed_at, exec_count, run_id)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (name, sandbox_id) DO UPDATE SET
  started_at   = CASE WHEN d.started_at IS NULL OR excluded.started_at < d.started_at THEN excluded.started_at ELSE d.started_at END,
  run_id       = CASE WHEN d.started_at IS NULL OR excluded.started_at < d.started_at THEN excluded.run_id ELSE d.run_id END,
  completed_at = CASE WHEN d.completed_at IS NULL OR excluded.completed_at > d.completed_at THEN excluded.completed_at ELSE d.completed_at END,
  status       = CASE WHEN d.completed_at IS NULL AND excluded.completed_at IS NULL THEN 'running' ELSE 'completed' END,
  exec_count   = d.exec_count + excluded.exec_count`

// addExecs counts a session's exec.completed entries into its summary row, when
// the row exists. It sets only exec_count, which no index holds: the upsert,
// setting every column, rewrites the row's entry in each of the five details
// indexes, 5 of the 9 pages an exec's completion wrote.
const addExecs = `UPDATE alineo_sandbox_details SET exec_count = exec_count + ? WHERE name = ? AND sandbox_id = ?`

// appendDetails folds the deltas of appended entries into the summary:
// exec counts alone (the common case: a batch of an exec's output and its
// exec.completed) with addExecs, anything else, or a session with no row
// yet, with the upsert applyDetails runs.
func (s *Store) appendDetails(ctx context.Context, tx *sql.Tx, d *summary.Deltas) error {
	for _, r := range d.Rows() {
		if r.Started == nil && r.Completed == nil && r.Execs > 0 {
			res, err := s.execPrepared(ctx, tx, addExecs, r.Execs, r.Session.Name, r.Session.SandboxID)
			if err != nil {
				return err
			}
			if rowsAffected(res) == 1 {
				continue
			}
		}
		if _, err := tx.ExecContext(ctx, upsertDetails, r.Session.Name, r.Session.SandboxID,
			string(r.Status), r.Started, r.Completed, r.Execs, r.RunID); err != nil {
			return err
		}
	}
	return nil
}

// prepared returns the statement q prepared on the writer w, preparing it on
// first use: the appends of an exec run the same few statements, and parsing
// them again on every commit was a good part of its CPU. The statements live
// as long as w (the store's one writer handle); database/sql prepares them
// again on a new connection should the writer's be replaced.
func (s *Store) prepared(ctx context.Context, w *sql.DB, q string) (*sql.Stmt, error) {
	if st, ok := s.stmts.Load(q); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := w.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if prev, loaded := s.stmts.LoadOrStore(q, st); loaded {
		_ = st.Close()
		return prev.(*sql.Stmt), nil
	}
	return st, nil
}

// appendQueries are the statements the append path prepares (prepareAppends).
var appendQueries = []string{insertRows(1), insertRows(2), insertRows(3), insertRows(4), addExecs, lastRow, sessionHead}

// prepareAppends prepares appendQueries on the writer, once, outside any
// transaction: the writer has one connection, which a transaction holds.
func (s *Store) prepareAppends(ctx context.Context) error {
	if s.appendsPrepared.Load() {
		return nil
	}
	w, _, err := s.dbs(ctx)
	if err != nil {
		return err
	}
	for _, q := range appendQueries {
		if _, err := s.prepared(ctx, w, q); err != nil {
			return err
		}
	}
	s.appendsPrepared.Store(true)
	return nil
}

// execPrepared runs q in tx, with its prepared statement if it has one.
func (s *Store) execPrepared(ctx context.Context, tx *sql.Tx, q string, a ...any) (sql.Result, error) {
	if st, ok := s.stmts.Load(q); ok {
		return tx.StmtContext(ctx, st.(*sql.Stmt)).ExecContext(ctx, a...)
	}
	return tx.ExecContext(ctx, q, a...)
}

// args appends the column values of e (ledger_seq is seq, NULL when 0; actor
// NULL when "").
func args(dst []any, e events.Entry, seq uint64) []any {
	var branch, payload, errText, ledgerSeq, actor, prev, hash any
	if e.Branch != nil {
		branch = int64(*e.Branch)
	}
	if e.Payload != nil {
		payload = string(e.Payload) // TEXT, as the TypeScript SDK stores it
	}
	if e.Error != "" {
		errText = e.Error
	}
	if seq != 0 {
		ledgerSeq = int64(seq)
	}
	if e.Actor != "" {
		actor = e.Actor
	}
	if e.Hash != "" {
		prev, hash = e.PrevHash, e.Hash
	}
	return append(dst, e.SandboxID, e.Name, int64(e.StepIndex), branch, string(e.Event), payload, errText, e.Ts, ledgerSeq, actor, prev, hash)
}

// write runs f in one immediate transaction on the writer connection. Its
// commit moves the connection's data version: the next append's commit
// does not trust the heads it remembers (headCache.seed) whatever f wrote.
func (s *Store) write(ctx context.Context, op string, f func(tx *sql.Tx) error) error {
	return s.translate(op, s.inTx(ctx, f))
}

// inTx is write with the driver's error untranslated.
func (s *Store) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	w, _, err := s.dbs(ctx)
	if err != nil {
		return err
	}
	return s.inTxOn(ctx, w, f)
}

// txBeginner is the writer's handle (*sql.DB) or its connection (*sql.Conn).
type txBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// inTxOn runs f in one immediate transaction begun on b and commits it,
// or rolls it back when f fails: it committed when it returns nil. A commit
// asks the background checkpointer for a round.
func (s *Store) inTxOn(ctx context.Context, b txBeginner, f func(tx *sql.Tx) error) error {
	tx, err := b.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.askCheckpoint()
	return nil
}

// Append implements adapters.Ledger: it validates e.
func (s *Store) Append(ctx context.Context, e events.Entry) error {
	if err := events.Validate(e); err != nil {
		return fmt.Errorf("sqlite: append: %w", err)
	}
	return s.append(ctx, e)
}

// ValidatedSelf returns the receiver: a type embedding this one does not
// inherit the validated hand-over of AppendValidated and ApplyValidated.
func (s *Store) ValidatedSelf() any { return s }

// AppendValidated appends entries the SDK's ledger writer validated, without
// validating them again (see the adapters package doc): one entry as Append,
// several as AppendBatch. Only this module can call it with entries.
func (s *Store) AppendValidated(ctx context.Context, v validated.Entries) error {
	if es := v.Slice(); len(es) == 1 {
		return s.append(ctx, es[0])
	}
	return s.appendBatch(ctx, v.Slice())
}

func (s *Store) append(ctx context.Context, e events.Entry) error {
	e, err := s.cfg.Vocabulary.Encode(e)
	if err != nil {
		return fmt.Errorf("sqlite: append: %w", err)
	}
	return s.commitShared(ctx, "append", []events.Entry{e})
}

// AppendBatch implements adapters.Ledger: it validates every entry first.
func (s *Store) AppendBatch(ctx context.Context, es []events.Entry) error {
	for i, e := range es {
		if err := events.Validate(e); err != nil {
			return fmt.Errorf("sqlite: append batch: entry %d: %w", i, err)
		}
	}
	return s.appendBatch(ctx, es)
}

func (s *Store) appendBatch(ctx context.Context, es []events.Entry) error {
	if len(es) == 0 {
		return nil
	}
	es, err := entries.Encode(s.cfg.Vocabulary, es)
	if err != nil {
		return fmt.Errorf("sqlite: append batch: %w", err)
	}
	return s.commitShared(ctx, "append batch", es)
}

// commitShared commits one append's encoded entries es, all or nothing,
// through the store's group commit: alone at once when the writer is idle,
// else in one transaction with the other appends queued while the writer
// was busy.
func (s *Store) commitShared(ctx context.Context, op string, es []events.Entry) error {
	if err := s.prepareAppends(ctx); err != nil {
		return s.translate(op, err)
	}
	err := s.gc.Do(ctx, es)
	if errors.Is(err, groupcommit.ErrClosed) {
		err = adapters.ErrClosed
	}
	return s.translate(op, err)
}

// commitAppends is the group commit's Commit: it writes the entries of
// every append of the batch in one immediate transaction (one fsync), in
// order, with prepared multi-row INSERTs, chains them (heads.seed) and folds
// them into the details summary there.
func (s *Store) commitAppends(ctx context.Context, appends [][]events.Entry) error {
	n := 0
	for _, es := range appends {
		n += len(es)
	}
	// The statements are prepared outside the transaction: the writer has
	// one connection, which the transaction holds.
	w, _, err := s.dbs(ctx)
	if err != nil {
		return err
	}
	if n >= chunk {
		if _, err := s.prepared(ctx, w, insertChunk); err != nil {
			return err
		}
	}
	if tail := n % chunk; tail > 0 {
		if _, err := s.prepared(ctx, w, insertRows(tail)); err != nil {
			return err
		}
	}
	// The writer's one connection, held from the transaction's start to
	// the data version read after its commit: no other transaction can
	// run on it in between. ctx bounds the wait for it.
	conn, err := w.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// The transaction's statements run without ctx's end: for a context
	// that can end, the driver starts a goroutine per statement to
	// interrupt it (three a commit), and a commit, once begun, is short; a
	// wait for another process's lock ends at Config.BusyTimeout. (A batch
	// of the group commit has no caller's ctx anyway.)
	ctx = context.WithoutCancel(ctx)
	if s.unchained {
		return s.inTxOn(ctx, conn, func(tx *sql.Tx) error { return s.insertUnchained(ctx, tx, appends, n) })
	}
	var moved headsMoved
	err = s.inTxOn(ctx, conn, func(tx *sql.Tx) error { return s.chainInsert(ctx, conn, tx, appends, n, &moved) })
	committed := err == nil
	if committed {
		// The appends are stored whatever follows; the heads are trusted
		// only with the data version this commit left.
		var verr error
		moved.at.dataVersion, verr = connDataVersion(conn)
		committed = verr == nil
	}
	s.heads.moved(moved, committed)
	return err
}

// chainInsert is commitAppends' transaction tx on conn: it chains the
// appends after their sessions' heads (heads.seed), inserts them with
// prepared multi-row INSERTs and folds them into the details summary,
// telling in moved what the cache learns should tx commit.
func (s *Store) chainInsert(ctx context.Context, conn *sql.Conn, tx *sql.Tx, appends [][]events.Entry, n int, moved *headsMoved) error {
	// Read here, inside the transaction: the connection's data version
	// moved with any commit since the last one of this store's, another
	// connection's included (seen as the transaction began).
	var err error
	moved.at = writerState{conn: s.writerConns.Load()}
	if moved.at.dataVersion, err = connDataVersion(conn); err != nil {
		return err
	}
	chain, err := s.heads.seed(ctx, tx, s.stmtQueryRow, appends, moved.at)
	if err != nil {
		return err
	}
	var d summary.Deltas
	var last sql.Result
	a := make([]any, 0, cols*min(n, chunk))
	left := n
	for _, es := range appends {
		for _, e := range es {
			if e, err = chain.Link(e); err != nil {
				return err
			}
			a = args(a, e, 0)
			d.Add(e)
			moved.lastHash = e.Hash
			if rows := len(a) / cols; rows == chunk || rows == left {
				if last, err = s.execPrepared(ctx, tx, insertRows(rows), a...); err != nil {
					return err
				}
				left -= rows
				a = a[:0]
			}
		}
	}
	if moved.lastID, err = last.LastInsertId(); err != nil {
		return err
	}
	moved.chain, moved.appends = &chain, appends
	return s.appendDetails(ctx, tx, &d)
}

// insertUnchained is commitAppends' transaction without the chain, for the
// benchmark that measures the chain's cost.
func (s *Store) insertUnchained(ctx context.Context, tx *sql.Tx, appends [][]events.Entry, n int) error {
	var d summary.Deltas
	a := make([]any, 0, cols*min(n, chunk))
	left := n
	for _, es := range appends {
		for _, e := range es {
			a = args(a, e, 0)
			d.Add(e)
			if rows := len(a) / cols; rows == chunk || rows == left {
				if _, err := s.execPrepared(ctx, tx, insertRows(rows), a...); err != nil {
					return err
				}
				left -= rows
				a = a[:0]
			}
		}
	}
	return s.appendDetails(ctx, tx, &d)
}

// stmtQueryRow runs q in tx, with its prepared statement if it has one.
func (s *Store) stmtQueryRow(ctx context.Context, tx *sql.Tx, q string, a ...any) *sql.Row {
	if st, ok := s.stmts.Load(q); ok {
		return tx.StmtContext(ctx, st.(*sql.Stmt)).QueryRowContext(ctx, a...)
	}
	return tx.QueryRowContext(ctx, q, a...)
}

// ApplyBatch implements adapters.ProjectionStore. It looks up which of the
// batch's ledger sequences are stored already (one index range scan, inside
// the immediate transaction, so the answer holds until commit), then inserts
// the others with prepared multi-row INSERTs.
func (s *Store) ApplyBatch(ctx context.Context, consumer string, es []events.Entry, offset uint64) error {
	if err := entries.ValidateProjected(consumer, es); err != nil {
		return fmt.Errorf("sqlite: apply batch: %w", err)
	}
	return s.apply(ctx, consumer, es, offset)
}

// ApplyValidated is ApplyBatch for entries the projector validated as it
// decoded them: it checks only the consumer and each entry's Seq.
func (s *Store) ApplyValidated(ctx context.Context, consumer string, v validated.Entries, offset uint64) error {
	if err := entries.CheckProjectedSeqs(consumer, v.Slice()); err != nil {
		return fmt.Errorf("sqlite: apply batch: %w", err)
	}
	return s.apply(ctx, consumer, v.Slice(), offset)
}

func (s *Store) apply(ctx context.Context, consumer string, es []events.Entry, offset uint64) error {
	es, err := entries.Encode(s.cfg.Vocabulary, es)
	if err != nil {
		return fmt.Errorf("sqlite: apply batch: %w", err)
	}
	return s.write(ctx, "apply batch", func(tx *sql.Tx) error {
		fresh, err := unstored(ctx, tx, es)
		if err != nil {
			return err
		}
		var d summary.Deltas
		a := make([]any, 0, cols*min(chunk, len(fresh)))
		if len(fresh) >= chunk {
			stmt, err := tx.PrepareContext(ctx, insertChunkProjected)
			if err != nil {
				return err
			}
			defer stmt.Close()
			for len(fresh) >= chunk {
				a = a[:0]
				for _, e := range fresh[:chunk] {
					a = args(a, e, e.Seq)
					d.Add(e)
				}
				if _, err := stmt.ExecContext(ctx, a...); err != nil {
					return err
				}
				fresh = fresh[chunk:]
			}
		}
		if len(fresh) > 0 {
			a = a[:0]
			for _, e := range fresh {
				a = args(a, e, e.Seq)
				d.Add(e)
			}
			q := insertRows(len(fresh)) + onConflictSeq
			if _, err := tx.ExecContext(ctx, q, a...); err != nil {
				return err
			}
		}
		if err := applyDetails(ctx, tx, &d); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO alineo_projection_offsets (consumer, "offset") VALUES (?, ?)
			ON CONFLICT (consumer) DO UPDATE SET "offset" = excluded."offset"`, consumer, int64(offset))
		return err
	})
}

// unstored returns the entries of es whose ledger sequence is not stored yet,
// each sequence once, in order. It returns es itself in the usual case (in
// order, none stored).
func unstored(ctx context.Context, tx *sql.Tx, es []events.Entry) ([]events.Entry, error) {
	if len(es) == 0 {
		return es, nil
	}
	lo, hi, ascending := es[0].Seq, es[0].Seq, true
	for i := 1; i < len(es); i++ {
		seq := es[i].Seq
		ascending = ascending && seq > es[i-1].Seq
		lo, hi = min(lo, seq), max(hi, seq)
	}
	rows, err := tx.QueryContext(ctx, `SELECT ledger_seq FROM alineo_events WHERE ledger_seq BETWEEN ? AND ?`, int64(lo), int64(hi))
	if err != nil {
		return nil, err
	}
	skip := make(map[uint64]bool)
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			_ = rows.Close()
			return nil, err
		}
		skip[uint64(seq)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(skip) == 0 && ascending {
		return es, nil
	}
	fresh := make([]events.Entry, 0, len(es))
	for _, e := range es {
		if !skip[e.Seq] {
			skip[e.Seq] = true // a repeat within the batch is skipped too
			fresh = append(fresh, e)
		}
	}
	return fresh, nil
}

// DeleteSandbox implements adapters.Ledger.
func (s *Store) DeleteSandbox(ctx context.Context, name, sandboxID string) error {
	return s.write(ctx, "delete sandbox", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM alineo_events WHERE name = ? AND sandbox_id = ?`, name, sandboxID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM alineo_sandbox_details WHERE name = ? AND sandbox_id = ?`, name, sandboxID)
		return err
	})
}

// SaveEnvironment implements adapters.ReadModel.
func (s *Store) SaveEnvironment(ctx context.Context, rec adapters.EnvironmentRecord) error {
	if rec.Name == "" {
		return fmt.Errorf("sqlite: save environment: %w", &events.ValidationError{Field: "environment.name", Reason: "is empty"})
	}
	var fp any
	if rec.Fingerprint != "" {
		fp = rec.Fingerprint
	}
	return s.write(ctx, "save environment", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO alineo_environments (name, snapshot_id, image, built_at, fingerprint)
			VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET snapshot_id = excluded.snapshot_id, image = excluded.image,
			  built_at = excluded.built_at, fingerprint = excluded.fingerprint`,
			rec.Name, rec.SnapshotID, rec.Image, rec.BuiltAt, fp)
		return err
	})
}

// DeleteEnvironment implements adapters.ReadModel.
func (s *Store) DeleteEnvironment(ctx context.Context, name string) error {
	return s.write(ctx, "delete environment", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM alineo_environments WHERE name = ?`, name)
		return err
	})
}
