package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/internal/entries"
	"github.com/alineo-labs/alineo/adapters/internal/groupcommit"
	"github.com/alineo-labs/alineo/adapters/internal/summary"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/validated"
)

// columns of alineo_events that a write sets, in the order of row. summarised
// is true on every row this store writes: it folds the row into the summary in
// the same transaction.
var columns = []string{"sandbox_id", "name", "step_idx", "branch", "event", "payload", "error", "ts", "ledger_seq", "actor", "prev_hash", "hash", "summarised"}

const insertOne = `INSERT INTO alineo_events (sandbox_id, name, step_idx, branch, event, payload, error, ts, ledger_seq, actor, prev_hash, hash, summarised)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, true)`

// insertArrays inserts rows in order (their ids, hence their Seq, follow it)
// from one array per column (columnArrays).
const insertArrays = `INSERT INTO alineo_events (sandbox_id, name, step_idx, branch, event, payload, error, ts, ledger_seq, actor, prev_hash, hash, summarised)
SELECT sandbox_id, name, step_idx, branch, event, payload::jsonb, error, ts, ledger_seq, actor, prev_hash, hash, true
FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::bigint[], $10::text[], $11::text[], $12::text[])
  WITH ORDINALITY AS r(sandbox_id, name, step_idx, branch, event, payload, error, ts, ledger_seq, actor, prev_hash, hash, n)
ORDER BY n`

// insertProjected is insertArrays skipping entries whose ledger sequence is
// stored already; it returns the sequences it stored.
const insertProjected = insertArrays + `
ON CONFLICT (ledger_seq) DO NOTHING
RETURNING ledger_seq`

// upsertDetails folds a delta into a session's summary row.
const upsertDetails = `
INSERT INTO alineo_sandbox_details AS d (name, sandbox_id, status, started_at, completed_at, exec_count, run_id)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (name, sandbox_id) DO UPDATE SET
  started_at   = CASE WHEN d.started_at IS NULL OR excluded.started_at < d.started_at THEN excluded.started_at ELSE d.started_at END,
  run_id       = CASE WHEN d.started_at IS NULL OR excluded.started_at < d.started_at THEN excluded.run_id ELSE d.run_id END,
  completed_at = CASE WHEN d.completed_at IS NULL OR excluded.completed_at > d.completed_at THEN excluded.completed_at ELSE d.completed_at END,
  status       = CASE WHEN d.completed_at IS NULL AND excluded.completed_at IS NULL THEN 'running' ELSE 'completed' END,
  exec_count   = d.exec_count + excluded.exec_count`

const upsertOffset = `INSERT INTO alineo_projection_offsets (consumer, "offset") VALUES ($1, $2)
ON CONFLICT (consumer) DO UPDATE SET "offset" = excluded."offset"`

// row returns the column values of e; ledger_seq is seq, NULL when 0, and
// actor NULL when "". The payload goes as raw JSON text into the JSONB
// column; nil stays SQL NULL.
func row(e events.Entry, seq uint64) []any {
	var branch, payload, errText, ledgerSeq, actor, prev, hash any
	if e.Branch != nil {
		branch = int32(*e.Branch)
	}
	if e.Payload != nil {
		payload = []byte(e.Payload)
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
	return []any{e.SandboxID, e.Name, int32(e.StepIndex), branch, string(e.Event), payload, errText, e.Ts, ledgerSeq, actor, prev, hash, true}
}

// Append implements adapters.Ledger: it validates e.
func (s *Store) Append(ctx context.Context, e events.Entry) error {
	if err := events.Validate(e); err != nil {
		return fmt.Errorf("postgres: append: %w", err)
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
		return fmt.Errorf("postgres: append: %w", err)
	}
	return s.commitShared(ctx, "append", []events.Entry{e})
}

// AppendBatch implements adapters.Ledger: it validates every entry first.
func (s *Store) AppendBatch(ctx context.Context, es []events.Entry) error {
	for i, e := range es {
		if err := events.Validate(e); err != nil {
			return fmt.Errorf("postgres: append batch: entry %d: %w", i, err)
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
		return fmt.Errorf("postgres: append batch: %w", err)
	}
	return s.commitShared(ctx, "append batch", es)
}

// commitShared commits one append's encoded entries es, all or nothing,
// through the store's group commit: alone at once while fewer than
// maxCommitsInFlight commits are in flight, else in one transaction (one
// round trip) with the other appends queued meanwhile.
func (s *Store) commitShared(ctx context.Context, op string, es []events.Entry) error {
	err := s.gc.Do(ctx, es)
	if errors.Is(err, groupcommit.ErrClosed) {
		err = adapters.ErrClosed
	}
	return s.translate(ctx, op, err)
}

// copyAbove is the number of rows above which a commit copies its rows in
// with COPY (three round trips) rather than one INSERT from arrays.
const copyAbove = 1000

// commitTimeout bounds a batch's commit, which no caller's ctx bounds.
const commitTimeout = 30 * time.Second

// commitAppends is the group commit's Commit: it writes the entries of every
// append of the batch, in order, and folds them into the details, in one
// transaction. Up to copyAbove rows that is one round trip: a pgx batch (an
// implicit transaction) of one INSERT from arrays and the details' upserts;
// one entry is a single-row INSERT.
func (s *Store) commitAppends(ctx context.Context, appends [][]events.Entry) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, commitTimeout)
		defer cancel()
	}
	p, err := s.db(ctx)
	if err != nil {
		return err
	}
	in := appends[0]
	if len(appends) > 1 {
		in = slices.Concat(appends...)
	}
	var d summary.Deltas
	for _, e := range in {
		d.Add(e)
	}
	es := make([]events.Entry, len(in))
	moves, err := s.heads.link(es, in)
	if err != nil {
		return err
	}
	err = commitLinked(ctx, p, es, &d, moves)
	if err == nil {
		s.heads.commit(moves)
		return nil
	}
	s.heads.forget(moves)
	if !headMoved(err) {
		return err
	}
	// Another writer moved a head since this store last saw it: link again
	// under the heads' row locks.
	if moves, err = commitLocked(ctx, p, es, in, &d); err != nil {
		return err
	}
	s.heads.commit(moves)
	return nil
}

// batcher is a pool, or a transaction (in which Begin makes a savepoint).
type batcher interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// commitLinked writes the chained entries es, moves the chain heads and
// folds d into the details, in one transaction.
func commitLinked(ctx context.Context, p batcher, es []events.Entry, d *summary.Deltas, moves []headMove) error {
	if len(es) > copyAbove {
		return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			src := pgx.CopyFromSlice(len(es), func(i int) ([]any, error) { return row(es[i], 0), nil })
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"alineo_events"}, columns, src); err != nil {
				return err
			}
			b := &pgx.Batch{}
			queueHeads(b, moves)
			queueDetails(b, d)
			return tx.SendBatch(ctx, b).Close()
		})
	}
	b := &pgx.Batch{}
	if len(es) == 1 {
		b.Queue(insertOne, row(es[0], 0)[:12]...)
	} else {
		b.Queue(insertArrays, columnArrays(es)...)
	}
	queueHeads(b, moves)
	queueDetails(b, d)
	return p.SendBatch(ctx, b).Close()
}

// ApplyBatch implements adapters.ProjectionStore. A batch normally holds
// only sequences not stored yet (the offset is stored with the rows), so it
// copies the entries in with COPY and sets the details and the offset, in
// one transaction. When a sequence is stored already (a unique violation: a
// redelivery, or another consumer projecting into the same tables), or the
// batch repeats one, it applies the batch with one INSERT ... ON CONFLICT DO
// NOTHING instead, which skips the stored rows. It validates every entry.
func (s *Store) ApplyBatch(ctx context.Context, consumer string, es []events.Entry, offset uint64) error {
	if err := entries.ValidateProjected(consumer, es); err != nil {
		return fmt.Errorf("postgres: apply batch: %w", err)
	}
	return s.apply(ctx, consumer, es, offset)
}

// ApplyValidated is ApplyBatch for entries the projector validated as it
// decoded them: it checks only the consumer and each entry's Seq.
func (s *Store) ApplyValidated(ctx context.Context, consumer string, v validated.Entries, offset uint64) error {
	if err := entries.CheckProjectedSeqs(consumer, v.Slice()); err != nil {
		return fmt.Errorf("postgres: apply batch: %w", err)
	}
	return s.apply(ctx, consumer, v.Slice(), offset)
}

func (s *Store) apply(ctx context.Context, consumer string, es []events.Entry, offset uint64) error {
	es, err := entries.Encode(s.cfg.Vocabulary, es)
	if err != nil {
		return fmt.Errorf("postgres: apply batch: %w", err)
	}
	p, err := s.db(ctx)
	if err != nil {
		return s.translate(ctx, "apply batch", err)
	}
	var pe *pgconn.PgError
	if ascending(es) {
		err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			var d summary.Deltas
			if len(es) > 0 {
				src := pgx.CopyFromSlice(len(es), func(i int) ([]any, error) {
					d.Add(es[i])
					return row(es[i], es[i].Seq), nil
				})
				if _, err := tx.CopyFrom(ctx, pgx.Identifier{"alineo_events"}, columns, src); err != nil {
					return err
				}
			}
			return finishApply(ctx, tx, es, &d, consumer, offset)
		})
		if !errors.As(err, &pe) || pe.Code != "23505" { // not a unique_violation
			return s.translate(ctx, "apply batch", err)
		}
	}
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		var d summary.Deltas
		if len(es) > 0 {
			stored, err := insertProjectedArrays(ctx, tx, es)
			if err != nil {
				return err
			}
			for _, e := range es {
				if stored[e.Seq] {
					delete(stored, e.Seq) // a repeat within the batch was skipped
					d.Add(e)
				}
			}
		}
		return finishApply(ctx, tx, es, &d, consumer, offset)
	})
	return s.translate(ctx, "apply batch", err)
}

// ascending reports whether the sequences of es strictly increase (no
// repeats), as a projector's batches do.
func ascending(es []events.Entry) bool {
	for i := 1; i < len(es); i++ {
		if es[i].Seq <= es[i-1].Seq {
			return false
		}
	}
	return true
}

// finishApply folds d into the details and sets consumer's offset, in one
// round trip.
func finishApply(ctx context.Context, tx pgx.Tx, es []events.Entry, d *summary.Deltas, consumer string, offset uint64) error {
	b := &pgx.Batch{}
	queueProjectedHeads(b, es)
	queueDetails(b, d)
	b.Queue(upsertOffset, consumer, int64(offset))
	return tx.SendBatch(ctx, b).Close()
}

// insertProjectedArrays inserts projected entries in one statement and
// returns the ledger sequences it stored (those not stored before).
func insertProjectedArrays(ctx context.Context, tx pgx.Tx, es []events.Entry) (map[uint64]bool, error) {
	rows, err := tx.Query(ctx, insertProjected, columnArrays(es)...)
	if err != nil {
		return nil, err
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	stored := make(map[uint64]bool, len(got))
	for _, seq := range got {
		stored[uint64(seq)] = true
	}
	return stored, nil
}

// columnArrays returns the arguments of insertArrays for es: one array per
// column, ledger_seq being each entry's Seq (NULL when 0).
func columnArrays(es []events.Entry) []any {
	var (
		sandboxIDs, names, evs = make([]string, len(es)), make([]string, len(es)), make([]string, len(es))
		steps                  = make([]int32, len(es))
		branches               = make([]*int32, len(es))
		payloads, errs, actors = make([]*string, len(es)), make([]*string, len(es)), make([]*string, len(es))
		tss, seqs              = make([]int64, len(es)), make([]*int64, len(es))
		prevs, hashes          = make([]*string, len(es)), make([]*string, len(es))
	)
	for i, e := range es {
		sandboxIDs[i], names[i], evs[i] = e.SandboxID, e.Name, string(e.Event)
		steps[i], tss[i] = int32(e.StepIndex), e.Ts
		if e.Seq != 0 {
			seq := int64(e.Seq)
			seqs[i] = &seq
		}
		if e.Branch != nil {
			b := int32(*e.Branch)
			branches[i] = &b
		}
		if e.Payload != nil {
			p := string(e.Payload)
			payloads[i] = &p
		}
		if e.Error != "" {
			errs[i] = &e.Error
		}
		if e.Actor != "" {
			actors[i] = &e.Actor
		}
		if e.Hash != "" {
			prevs[i], hashes[i] = &es[i].PrevHash, &es[i].Hash
		}
	}
	return []any{sandboxIDs, names, steps, branches, evs, payloads, errs, tss, seqs, actors, prevs, hashes}
}

// DeleteSandbox implements adapters.Ledger.
func (s *Store) DeleteSandbox(ctx context.Context, name, sandboxID string) error {
	p, err := s.db(ctx)
	if err != nil {
		return s.translate(ctx, "delete sandbox", err)
	}
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM alineo_events WHERE name = $1 AND sandbox_id = $2`, name, sandboxID)
	b.Queue(`DELETE FROM alineo_sandbox_details WHERE name = $1 AND sandbox_id = $2`, name, sandboxID)
	b.Queue(`DELETE FROM alineo_chain_heads WHERE name = $1 AND sandbox_id = $2`, name, sandboxID)
	s.heads.forget([]headMove{{session: events.Session{Name: name, SandboxID: sandboxID}}})
	return s.translate(ctx, "delete sandbox", p.SendBatch(ctx, b).Close())
}

// SaveEnvironment implements adapters.ReadModel.
func (s *Store) SaveEnvironment(ctx context.Context, rec adapters.EnvironmentRecord) error {
	if rec.Name == "" {
		return fmt.Errorf("postgres: save environment: %w", &events.ValidationError{Field: "environment.name", Reason: "is empty"})
	}
	p, err := s.db(ctx)
	if err != nil {
		return s.translate(ctx, "save environment", err)
	}
	var fp any
	if rec.Fingerprint != "" {
		fp = rec.Fingerprint
	}
	_, err = p.Exec(ctx, `INSERT INTO alineo_environments (name, snapshot_id, image, built_at, fingerprint)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (name) DO UPDATE SET snapshot_id = excluded.snapshot_id, image = excluded.image,
		  built_at = excluded.built_at, fingerprint = excluded.fingerprint`,
		rec.Name, rec.SnapshotID, rec.Image, rec.BuiltAt, fp)
	return s.translate(ctx, "save environment", err)
}

// DeleteEnvironment implements adapters.ReadModel.
func (s *Store) DeleteEnvironment(ctx context.Context, name string) error {
	p, err := s.db(ctx)
	if err != nil {
		return s.translate(ctx, "delete environment", err)
	}
	_, err = p.Exec(ctx, `DELETE FROM alineo_environments WHERE name = $1`, name)
	return s.translate(ctx, "delete environment", err)
}
