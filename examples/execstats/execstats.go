package execstats

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
)

// Name is the projection's registered name.
const Name = "execstats"

// Filter is what the projection reads.
var Filter = projections.Filter{Events: []events.Event{events.SandboxCreated, events.ExecStarted, events.ExecCompleted}}

// Definition returns the projection as cmd/projector runs, rebuilds and
// verifies it by Name (projections.Register).
func Definition() projections.Definition {
	return projections.Definition{
		Name:   Name,
		Help:   "exec count, duration p50/p95 and exit codes per image, session name and day",
		Filter: Filter,
		Open: func(_ context.Context, t projections.Target) (projections.Handler, error) {
			return New(t.DB, t.Dialect), nil
		},
		Verify: func(ctx context.Context, a, b projections.Target) error {
			return Verify(ctx, a.DB, a.Dialect, b.DB, b.Dialect)
		},
	}
}

// New returns the projection's handler on db.
func New(db *sql.DB, d projections.Dialect) *projections.SQLHandler {
	return &projections.SQLHandler{DB: db, Dialect: d, Name: Name, Schema: schema, ApplyTx: func(ctx context.Context, tx *sql.Tx, es []events.Entry) error {
		return apply(ctx, tx, d, es)
	}}
}

func schema(ctx context.Context, tx *sql.Tx) error {
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS execstats_running (
			sandbox_id TEXT NOT NULL, name TEXT NOT NULL, step INTEGER NOT NULL, branch INTEGER NOT NULL,
			started_at BIGINT NOT NULL, PRIMARY KEY (sandbox_id, name, step, branch))`,
		`CREATE TABLE IF NOT EXISTS execstats_sandboxes (
			sandbox_id TEXT PRIMARY KEY, image TEXT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS execstats_execs (
			seq BIGINT PRIMARY KEY, image TEXT NOT NULL, name TEXT NOT NULL, day TEXT NOT NULL,
			duration_ms BIGINT NOT NULL, exit_code INTEGER NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS execstats_execs_image_name_day ON execstats_execs (image, name, day)`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func branch(e events.Entry) int {
	if e.Branch == nil {
		return -1
	}
	return *e.Branch
}

func apply(ctx context.Context, tx *sql.Tx, d projections.Dialect, es []events.Entry) error {
	for _, e := range es {
		switch e.Event {
		case events.SandboxCreated:
			var p events.SandboxCreatedPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				return projections.Poison(e.Seq, fmt.Errorf("sandbox.created payload: %w", err))
			}
			// A sandbox has one image; a later session on the same id (a
			// connect under another name) keeps the one recorded first.
			if _, err := tx.ExecContext(ctx, d.Rebind(`INSERT INTO execstats_sandboxes (sandbox_id, image) VALUES (?, ?)
				ON CONFLICT (sandbox_id) DO UPDATE SET image = excluded.image WHERE execstats_sandboxes.image = ''`),
				e.SandboxID, p.Image); err != nil {
				return fmt.Errorf("sandbox.created at %d: %w", e.Seq, err)
			}
		case events.ExecStarted:
			if _, err := tx.ExecContext(ctx, d.Rebind(`INSERT INTO execstats_running (sandbox_id, name, step, branch, started_at)
				VALUES (?, ?, ?, ?, ?) ON CONFLICT (sandbox_id, name, step, branch) DO UPDATE SET started_at = excluded.started_at`),
				e.SandboxID, e.Name, e.StepIndex, branch(e), e.Ts); err != nil {
				return fmt.Errorf("exec.started at %d: %w", e.Seq, err)
			}
		case events.ExecCompleted:
			if err := completed(ctx, tx, d, e); err != nil {
				return err
			}
		}
	}
	return nil
}

func completed(ctx context.Context, tx *sql.Tx, d projections.Dialect, e events.Entry) error {
	var p events.ExecCompletedPayload
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		return projections.Poison(e.Seq, fmt.Errorf("exec.completed payload: %w", err))
	}
	var started int64
	err := tx.QueryRowContext(ctx, d.Rebind(`SELECT started_at FROM execstats_running
		WHERE sandbox_id = ? AND name = ? AND step = ? AND branch = ?`), e.SandboxID, e.Name, e.StepIndex, branch(e)).Scan(&started)
	if errors.Is(err, sql.ErrNoRows) {
		started = e.Ts // its start is not in the history read (rebuilt from a later sequence)
	} else if err != nil {
		return fmt.Errorf("exec.completed at %d: %w", e.Seq, err)
	}
	var image string
	err = tx.QueryRowContext(ctx, d.Rebind(`SELECT image FROM execstats_sandboxes WHERE sandbox_id = ?`), e.SandboxID).Scan(&image)
	if err != nil && !errors.Is(err, sql.ErrNoRows) { // none: its sandbox.created is not in the history read
		return fmt.Errorf("exec.completed at %d: %w", e.Seq, err)
	}
	day := time.UnixMilli(e.Ts).UTC().Format(time.DateOnly)
	if _, err := tx.ExecContext(ctx, d.Rebind(`INSERT INTO execstats_execs (seq, image, name, day, duration_ms, exit_code)
		VALUES (?, ?, ?, ?, ?, ?)`), int64(e.Seq), image, e.Name, day, max(e.Ts-started, 0), p.ExitCode); err != nil {
		return fmt.Errorf("exec.completed at %d: %w", e.Seq, err)
	}
	_, err = tx.ExecContext(ctx, d.Rebind(`DELETE FROM execstats_running WHERE sandbox_id = ? AND name = ? AND step = ? AND branch = ?`),
		e.SandboxID, e.Name, e.StepIndex, branch(e))
	return err
}

// Row is the statistics of one image and session name on one day.
type Row struct {
	Image string // "" for execs of sandboxes that recorded none
	Name  string
	Day   string // YYYY-MM-DD, UTC
	Count int
	// P50 and P95 are nearest-rank percentiles of the durations, in ms.
	P50, P95 int64
	// ExitCodes counts the execs by exit code.
	ExitCodes map[int]int
}

// Stats returns the statistics, ordered by image, name, then day.
func Stats(ctx context.Context, db *sql.DB) ([]Row, error) {
	rows, err := db.QueryContext(ctx, `SELECT image, name, day, duration_ms, exit_code FROM execstats_execs ORDER BY image, name, day, duration_ms`)
	if err != nil {
		return nil, fmt.Errorf("execstats: %w", err)
	}
	defer rows.Close()
	var out []Row
	var durs []int64
	end := func() {
		if len(out) > 0 {
			r := &out[len(out)-1]
			r.P50, r.P95 = Percentile(durs, 50), Percentile(durs, 95)
		}
		durs = durs[:0]
	}
	for rows.Next() {
		var image, name, day string
		var dur int64
		var code int
		if err := rows.Scan(&image, &name, &day, &dur, &code); err != nil {
			return nil, fmt.Errorf("execstats: %w", err)
		}
		if l := len(out) - 1; l < 0 || out[l].Image != image || out[l].Name != name || out[l].Day != day {
			end()
			out = append(out, Row{Image: image, Name: name, Day: day, ExitCodes: map[int]int{}})
		}
		r := &out[len(out)-1]
		r.Count++
		r.ExitCodes[code]++
		durs = append(durs, dur)
	}
	end()
	return out, rows.Err()
}

// Percentile returns the nearest-rank p-th percentile of sorted values (0 for none).
func Percentile(sorted []int64, p int) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 × n)
	return sorted[max(rank, 1)-1]
}

// Verify compares the statistics and the exec rows of two targets.
func Verify(ctx context.Context, a *sql.DB, _ projections.Dialect, b *sql.DB, _ projections.Dialect) error {
	sa, err := Stats(ctx, a)
	if err != nil {
		return err
	}
	sb, err := Stats(ctx, b)
	if err != nil {
		return err
	}
	for i := range max(len(sa), len(sb)) {
		var x, y string
		if i < len(sa) {
			x = fmt.Sprint(sa[i])
		}
		if i < len(sb) {
			y = fmt.Sprint(sb[i])
		}
		if x != y {
			return &projections.MismatchError{Where: "execstats", Index: i, A: x, B: y}
		}
	}
	ea, err := execs(ctx, a)
	if err != nil {
		return err
	}
	eb, err := execs(ctx, b)
	if err != nil {
		return err
	}
	if i, differ := firstDiff(ea, eb); differ {
		return &projections.MismatchError{Where: "execstats_execs", Index: i, A: at(ea, i), B: at(eb, i)}
	}
	return nil
}

func execs(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT seq, image, name, day, duration_ms, exit_code FROM execstats_execs ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("execstats: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var seq, dur int64
		var image, name, day string
		var code int
		if err := rows.Scan(&seq, &image, &name, &day, &dur, &code); err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprint(seq, image, name, day, dur, code))
	}
	return out, rows.Err()
}

func firstDiff(a, b []string) (int, bool) {
	for i := range max(len(a), len(b)) {
		if at(a, i) != at(b, i) {
			return i, true
		}
	}
	return -1, false
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(none)"
}
