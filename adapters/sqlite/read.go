package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/internal/entries"
	"github.com/alineo-labs/alineo/adapters/internal/summary"
	"github.com/alineo-labs/alineo/events"
)

// entryCols are read by scanEntry; Seq is the ledger sequence of a projected
// row, else the row id.
const entryCols = `COALESCE(ledger_seq, id), ts, name, sandbox_id, step_idx, branch, event, payload, error, actor, prev_hash, hash`

// query runs a query on the reader pool.
func (s *Store) query(ctx context.Context, q string, a ...any) (*sql.Rows, error) {
	_, r, err := s.dbs(ctx)
	if err != nil {
		return nil, err
	}
	return r.QueryContext(ctx, q, a...)
}

func scanEntry(rows *sql.Rows) (events.Entry, error) { return scanEntryWith(rows, true) }

// scanEntryWith scans one row; unwrap reads a payload stored as a JSON string
// holding JSON as that JSON.
func scanEntryWith(rows *sql.Rows, unwrap bool) (events.Entry, error) {
	var (
		e       events.Entry
		seq     int64
		branch  sql.NullInt64
		payload []byte
		errText sql.NullString
		actor   sql.NullString
		ev      string
		prev    sql.NullString
		hash    sql.NullString
	)
	if err := rows.Scan(&seq, &e.Ts, &e.Name, &e.SandboxID, &e.StepIndex, &branch, &ev, &payload, &errText, &actor, &prev, &hash); err != nil {
		return e, err
	}
	e.Seq, e.Event, e.Error, e.Actor = uint64(seq), events.Event(ev), errText.String, actor.String
	e.PrevHash, e.Hash = prev.String, hash.String
	if branch.Valid {
		b := int(branch.Int64)
		e.Branch = &b
	}
	if payload != nil && unwrap {
		// A payload stored as a JSON string holding JSON reads as that JSON.
		e.Payload = events.UnwrapPayload(json.RawMessage(payload))
	} else if payload != nil {
		e.Payload = json.RawMessage(payload)
	}
	return e, nil
}

// collect runs q on the reader pool and scans every row with scan; errors are translated as
// op's. It returns nil when no row matches.
func collect[T any](ctx context.Context, s *Store, op string, scan func(*sql.Rows) (T, error), q string, a ...any) ([]T, error) {
	rows, err := s.query(ctx, q, a...)
	if err != nil {
		return nil, s.translate(op, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, s.translate(op, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, s.translate(op, err)
	}
	return out, nil
}

func (s *Store) entries(ctx context.Context, op, q string, a ...any) ([]events.Entry, error) {
	return collect(ctx, s, op, scanEntry, q, a...)
}

// checkpointNames lists sandbox.checkpoint_created in both vocabularies.
var checkpointNames = summary.InList(events.CheckpointCreated)

// ReadAll implements adapters.Ledger.
func (s *Store) ReadAll(ctx context.Context, name, sandboxID string) ([]events.Entry, error) {
	return s.readSession(ctx, "read all", name, sandboxID)
}

// LastCheckpoint implements adapters.Ledger.
func (s *Store) LastCheckpoint(ctx context.Context, name, sandboxID string) (*events.Entry, error) {
	es, err := s.entries(ctx, "last checkpoint", `SELECT `+entryCols+` FROM alineo_events
		WHERE name = ? AND sandbox_id = ? AND event IN `+checkpointNames+` ORDER BY ts DESC, id DESC LIMIT 1`,
		name, sandboxID)
	if err != nil || len(es) == 0 {
		return nil, err
	}
	return &es[0], nil
}

// ListCheckpoints implements adapters.Ledger.
func (s *Store) ListCheckpoints(ctx context.Context, name, sandboxID string) ([]adapters.CheckpointInfo, error) {
	es, err := s.entries(ctx, "list checkpoints", `SELECT `+entryCols+` FROM alineo_events
		WHERE name = ? AND sandbox_id = ? AND event IN `+checkpointNames+` ORDER BY ts, id`,
		name, sandboxID)
	if err != nil {
		return nil, err
	}
	out, err := entries.Checkpoints(es)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list checkpoints: %w", err)
	}
	return out, nil
}

const detailsCols = `name, sandbox_id, status, started_at, COALESCE(completed_at, 0), exec_count, COALESCE(run_id, sandbox_id)`

// ListSandboxDetails implements adapters.ReadModel.
func (s *Store) ListSandboxDetails(ctx context.Context, name string, opts adapters.ListOptions) ([]adapters.SandboxDetails, error) {
	return s.details(ctx, "list sandbox details", &name, opts)
}

// ListAllSandboxDetails implements adapters.ReadModel.
func (s *Store) ListAllSandboxDetails(ctx context.Context, opts adapters.ListOptions) ([]adapters.SandboxDetails, error) {
	return s.details(ctx, "list all sandbox details", nil, opts)
}

// details queries the summary table: filters, order and limit all in SQL, on
// the indexes of detailsSchema.
func (s *Store) details(ctx context.Context, op string, name *string, opts adapters.ListOptions) ([]adapters.SandboxDetails, error) {
	if err := s.caughtUp(ctx); err != nil {
		return nil, s.translate(op+": catch up", err)
	}
	var a []any
	q := `SELECT ` + detailsCols + ` FROM alineo_sandbox_details` + summary.Query(name, opts, func(v any) string {
		a = append(a, v)
		return "?"
	})
	return collect(ctx, s, op, scanDetails, q, a...)
}

func scanDetails(rows *sql.Rows) (adapters.SandboxDetails, error) {
	var d adapters.SandboxDetails
	err := rows.Scan(&d.Name, &d.SandboxID, &d.Status, &d.StartedAt, &d.CompletedAt, &d.ExecCount, &d.RunID)
	return d, err
}

// GetSandboxDetails implements adapters.ReadModel.
func (s *Store) GetSandboxDetails(ctx context.Context, name, sandboxID string) (*adapters.SandboxDetails, error) {
	if err := s.caughtUp(ctx); err != nil {
		return nil, s.translate("get sandbox details", err)
	}
	ds, err := collect(ctx, s, "get sandbox details", scanDetails, `SELECT `+detailsCols+` FROM alineo_sandbox_details
		WHERE name = ? AND sandbox_id = ? AND started_at IS NOT NULL`, name, sandboxID)
	if err != nil || len(ds) == 0 {
		return nil, err
	}
	return &ds[0], nil
}

const envCols = `name, snapshot_id, image, built_at, COALESCE(fingerprint, '')`

func (s *Store) environments(ctx context.Context, op, q string, a ...any) ([]adapters.EnvironmentRecord, error) {
	recs, err := collect(ctx, s, op, scanEnv, q, a...)
	if recs == nil && err == nil {
		recs = []adapters.EnvironmentRecord{} // listed as [], not null
	}
	return recs, err
}

func scanEnv(rows *sql.Rows) (adapters.EnvironmentRecord, error) {
	var rec adapters.EnvironmentRecord
	err := rows.Scan(&rec.Name, &rec.SnapshotID, &rec.Image, &rec.BuiltAt, &rec.Fingerprint)
	return rec, err
}

// GetEnvironment implements adapters.ReadModel.
func (s *Store) GetEnvironment(ctx context.Context, name string) (*adapters.EnvironmentRecord, error) {
	recs, err := s.environments(ctx, "get environment", `SELECT `+envCols+` FROM alineo_environments WHERE name = ?`, name)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return &recs[0], nil
}

// ListEnvironments implements adapters.ReadModel.
func (s *Store) ListEnvironments(ctx context.Context) ([]adapters.EnvironmentRecord, error) {
	return s.environments(ctx, "list environments", `SELECT `+envCols+` FROM alineo_environments ORDER BY built_at DESC, name`)
}

// Offset implements adapters.ProjectionStore.
func (s *Store) Offset(ctx context.Context, consumer string) (uint64, error) {
	rows, err := s.query(ctx, `SELECT "offset" FROM alineo_projection_offsets WHERE consumer = ?`, consumer)
	if err != nil {
		return 0, s.translate("offset", err)
	}
	defer rows.Close()
	var off int64
	if rows.Next() {
		if err := rows.Scan(&off); err != nil {
			return 0, s.translate("offset", err)
		}
	}
	return uint64(off), s.translate("offset", rows.Err())
}

// ScanLedger calls fn for every entry of the ledger in append order (row
// id), as stored: payloads not unwrapped, PrevHash and Hash as written.
// sandboxID ("" for all) and since/until (Ts bounds, inclusive, 0 for none)
// filter them. It streams: its memory does not grow with the ledger. It
// stops at fn's first error and returns it. Package audit verifies the
// hash chains with it.
func (s *Store) ScanLedger(ctx context.Context, sandboxID string, since, until int64, fn func(events.Entry) error) error {
	q := `SELECT ` + entryCols + ` FROM alineo_events WHERE (?1 = '' OR sandbox_id = ?1)
		AND (?2 = 0 OR ts >= ?2) AND (?3 = 0 OR ts <= ?3) ORDER BY id`
	rows, err := s.query(ctx, q, sandboxID, since, until)
	if err != nil {
		return s.translate("scan ledger", err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanRaw(rows)
		if err != nil {
			return s.translate("scan ledger", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return s.translate("scan ledger", rows.Err())
}

// scanRaw is scanEntry keeping the payload as stored.
func scanRaw(rows *sql.Rows) (events.Entry, error) { return scanEntryWith(rows, false) }
