package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/internal/entries"
	"github.com/alineo-labs/alineo/adapters/internal/summary"
	"github.com/alineo-labs/alineo/events"
)

// entryCols are read by scanEntry; Seq is the ledger sequence of a projected
// row, else the row id.
const entryCols = `COALESCE(ledger_seq, id), ts, name, sandbox_id, step_idx, branch, event, payload, error, actor, prev_hash, hash`

func scanEntry(row pgx.CollectableRow) (events.Entry, error) { return scanEntryWith(row, true) }

// scanEntryWith scans one row; unwrap reads a payload stored as a JSONB
// string holding JSON as that JSON.
func scanEntryWith(row pgx.CollectableRow, unwrap bool) (events.Entry, error) {
	var (
		e       events.Entry
		seq     int64
		step    int32
		branch  *int32
		ev      string
		payload []byte
		errText *string
		actor   *string
		prev    *string
		hash    *string
	)
	if err := row.Scan(&seq, &e.Ts, &e.Name, &e.SandboxID, &step, &branch, &ev, &payload, &errText, &actor, &prev, &hash); err != nil {
		return e, err
	}
	e.Seq, e.StepIndex, e.Event = uint64(seq), int(step), events.Event(ev)
	if branch != nil {
		b := int(*branch)
		e.Branch = &b
	}
	if payload != nil && unwrap {
		// A payload stored as a JSONB string holding JSON (the TypeScript
		// SDK's Postgres adapter stores every payload so) reads as that JSON.
		e.Payload = events.UnwrapPayload(json.RawMessage(payload))
	} else if payload != nil {
		e.Payload = json.RawMessage(payload)
	}
	if errText != nil {
		e.Error = *errText
	}
	if actor != nil {
		e.Actor = *actor
	}
	if hash != nil && prev != nil {
		e.PrevHash, e.Hash = *prev, *hash
	}
	return e, nil
}

// collect runs q on the pool and scans every row with scan; errors are translated as op's.
func collect[T any](ctx context.Context, s *Store, op string, scan pgx.RowToFunc[T], q string, a ...any) ([]T, error) {
	p, err := s.db(ctx)
	if err != nil {
		return nil, s.translate(ctx, op, err)
	}
	rows, err := p.Query(ctx, q, a...)
	if err != nil {
		return nil, s.translate(ctx, op, err)
	}
	out, err := pgx.CollectRows(rows, scan)
	return out, s.translate(ctx, op, err)
}

func (s *Store) entries(ctx context.Context, op, q string, a ...any) ([]events.Entry, error) {
	return collect(ctx, s, op, scanEntry, q, a...)
}

// checkpointNames lists sandbox.checkpoint_created in both vocabularies.
var checkpointNames = summary.InList(events.CheckpointCreated)

// ReadAll implements adapters.Ledger.
func (s *Store) ReadAll(ctx context.Context, name, sandboxID string) ([]events.Entry, error) {
	return s.entries(ctx, "read all", `SELECT `+entryCols+` FROM alineo_events
		WHERE name = $1 AND sandbox_id = $2 ORDER BY ts, id`, name, sandboxID)
}

// LastCheckpoint implements adapters.Ledger.
func (s *Store) LastCheckpoint(ctx context.Context, name, sandboxID string) (*events.Entry, error) {
	es, err := s.entries(ctx, "last checkpoint", `SELECT `+entryCols+` FROM alineo_events
		WHERE name = $1 AND sandbox_id = $2 AND event IN `+checkpointNames+` ORDER BY ts DESC, id DESC LIMIT 1`,
		name, sandboxID)
	if err != nil || len(es) == 0 {
		return nil, err
	}
	return &es[0], nil
}

// ListCheckpoints implements adapters.Ledger.
func (s *Store) ListCheckpoints(ctx context.Context, name, sandboxID string) ([]adapters.CheckpointInfo, error) {
	es, err := s.entries(ctx, "list checkpoints", `SELECT `+entryCols+` FROM alineo_events
		WHERE name = $1 AND sandbox_id = $2 AND event IN `+checkpointNames+` ORDER BY ts, id`,
		name, sandboxID)
	if err != nil {
		return nil, err
	}
	out, err := entries.Checkpoints(es)
	if err != nil {
		return nil, fmt.Errorf("postgres: list checkpoints: %w", err)
	}
	return out, nil
}

const detailsCols = `name, sandbox_id, status, started_at, COALESCE(completed_at, 0), exec_count, COALESCE(run_id, sandbox_id)`

func scanDetails(row pgx.CollectableRow) (adapters.SandboxDetails, error) {
	var (
		d      adapters.SandboxDetails
		status string
		execs  int32
	)
	err := row.Scan(&d.Name, &d.SandboxID, &status, &d.StartedAt, &d.CompletedAt, &execs, &d.RunID)
	d.Status, d.ExecCount = adapters.SandboxStatus(status), int(execs)
	return d, err
}

// ListSandboxDetails implements adapters.ReadModel.
func (s *Store) ListSandboxDetails(ctx context.Context, name string, opts adapters.ListOptions) ([]adapters.SandboxDetails, error) {
	return s.details(ctx, "list sandbox details", &name, opts)
}

// ListAllSandboxDetails implements adapters.ReadModel.
func (s *Store) ListAllSandboxDetails(ctx context.Context, opts adapters.ListOptions) ([]adapters.SandboxDetails, error) {
	return s.details(ctx, "list all sandbox details", nil, opts)
}

// details queries the summary table: filters, order and limit all in SQL, on
// the indexes of the schema.
func (s *Store) details(ctx context.Context, op string, name *string, opts adapters.ListOptions) ([]adapters.SandboxDetails, error) {
	if err := s.caughtUp(ctx); err != nil {
		return nil, s.translate(ctx, op, err)
	}
	var a []any
	q := `SELECT ` + detailsCols + ` FROM alineo_sandbox_details` + summary.Query(name, opts, func(v any) string {
		a = append(a, v)
		return "$" + strconv.Itoa(len(a))
	})
	return collect(ctx, s, op, scanDetails, q, a...)
}

// GetSandboxDetails implements adapters.ReadModel.
func (s *Store) GetSandboxDetails(ctx context.Context, name, sandboxID string) (*adapters.SandboxDetails, error) {
	if err := s.caughtUp(ctx); err != nil {
		return nil, s.translate(ctx, "get sandbox details", err)
	}
	ds, err := collect(ctx, s, "get sandbox details", scanDetails, `SELECT `+detailsCols+` FROM alineo_sandbox_details
		WHERE name = $1 AND sandbox_id = $2 AND started_at IS NOT NULL`, name, sandboxID)
	if err != nil || len(ds) == 0 {
		return nil, err
	}
	return &ds[0], nil
}

const envCols = `name, snapshot_id, image, built_at, COALESCE(fingerprint, '')`

func scanEnv(row pgx.CollectableRow) (adapters.EnvironmentRecord, error) {
	var rec adapters.EnvironmentRecord
	err := row.Scan(&rec.Name, &rec.SnapshotID, &rec.Image, &rec.BuiltAt, &rec.Fingerprint)
	return rec, err
}

func (s *Store) environments(ctx context.Context, op, q string, a ...any) ([]adapters.EnvironmentRecord, error) {
	return collect(ctx, s, op, scanEnv, q, a...)
}

// GetEnvironment implements adapters.ReadModel.
func (s *Store) GetEnvironment(ctx context.Context, name string) (*adapters.EnvironmentRecord, error) {
	recs, err := s.environments(ctx, "get environment", `SELECT `+envCols+` FROM alineo_environments WHERE name = $1`, name)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return &recs[0], nil
}

// ListEnvironments implements adapters.ReadModel.
func (s *Store) ListEnvironments(ctx context.Context) ([]adapters.EnvironmentRecord, error) {
	return s.environments(ctx, "list environments", `SELECT `+envCols+` FROM alineo_environments ORDER BY built_at DESC, name COLLATE "C"`)
}

// Offset implements adapters.ProjectionStore.
func (s *Store) Offset(ctx context.Context, consumer string) (uint64, error) {
	p, err := s.db(ctx)
	if err != nil {
		return 0, s.translate(ctx, "offset", err)
	}
	var off int64
	err = p.QueryRow(ctx, `SELECT "offset" FROM alineo_projection_offsets WHERE consumer = $1`, consumer).Scan(&off)
	if err == pgx.ErrNoRows {
		return 0, nil
	}
	return uint64(off), s.translate(ctx, "offset", err)
}

// ScanLedger calls fn for every entry of the ledger in append order (row
// id), as stored: payloads not unwrapped (JSONB's text form), PrevHash and
// Hash as written. sandboxID ("" for all) and since/until (Ts bounds,
// inclusive, 0 for none) filter them. It streams: its memory does not grow
// with the ledger. It stops at fn's first error and returns it. Package
// audit verifies the hash chains with it.
func (s *Store) ScanLedger(ctx context.Context, sandboxID string, since, until int64, fn func(events.Entry) error) error {
	p, err := s.db(ctx)
	if err != nil {
		return s.translate(ctx, "scan ledger", err)
	}
	rows, err := p.Query(ctx, `SELECT `+entryCols+` FROM alineo_events WHERE ($1 = '' OR sandbox_id = $1)
		AND ($2 = 0 OR ts >= $2) AND ($3 = 0 OR ts <= $3) ORDER BY id`, sandboxID, since, until)
	if err != nil {
		return s.translate(ctx, "scan ledger", err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanEntryWith(rows, false)
		if err != nil {
			return s.translate(ctx, "scan ledger", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return s.translate(ctx, "scan ledger", rows.Err())
}
