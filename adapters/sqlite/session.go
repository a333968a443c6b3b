package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"

	"github.com/alineo-labs/alineo/events"
)

// sessionCols are the columns readSession reads: name and sandbox_id are the
// query's own arguments (TEXT = compares bytes), so they are not read back.
// The payload is read as a BLOB: its bytes, without a string in between.
const sessionCols = `COALESCE(ledger_seq, id), ts, step_idx, branch, event, CAST(payload AS BLOB), error`

// arenaSize is the slab the payloads of one read are copied into: one
// allocation per 64 KiB of payloads instead of one per row.
const arenaSize = 64 << 10

// sessionReader turns the rows of one session into entries. It reuses one
// row buffer, interns event names (a session has a handful) and copies
// payloads into shared slabs, each payload capped at its length so that an
// append to one never writes into the next.
type sessionReader struct {
	name, sandboxID string
	row             []driver.Value
	events          map[string]events.Event
	arena           []byte
}

// entry converts the current row.
func (r *sessionReader) entry() (events.Entry, error) {
	e := events.Entry{Name: r.name, SandboxID: r.sandboxID}
	seq, ok1 := r.row[0].(int64)
	ts, ok2 := r.row[1].(int64)
	step, ok3 := r.row[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return e, fmt.Errorf("row of %T, %T, %T: want integers for seq, ts and step_idx", r.row[0], r.row[1], r.row[2])
	}
	e.Seq, e.Ts, e.StepIndex = uint64(seq), ts, int(step)
	switch b := r.row[3].(type) {
	case nil:
	case int64:
		n := int(b)
		e.Branch = &n
	default:
		return e, fmt.Errorf("branch of type %T: want an integer", b)
	}
	ev, err := text(r.row[4])
	if err != nil {
		return e, fmt.Errorf("event: %w", err)
	}
	e.Event = r.event(ev)
	if e.Error, err = text(r.row[6]); err != nil {
		return e, fmt.Errorf("error: %w", err)
	}
	switch p := r.row[5].(type) {
	case nil:
	case []byte:
		// A payload stored as a JSON string holding JSON reads as that JSON.
		e.Payload = events.UnwrapPayload(r.copy(p))
	default:
		return e, fmt.Errorf("payload of type %T", p)
	}
	return e, nil
}

func (r *sessionReader) event(name string) events.Event {
	if ev, ok := r.events[name]; ok {
		return ev
	}
	ev := events.Event(name)
	r.events[name] = ev
	return ev
}

// copy returns p's bytes in the arena; an empty payload is kept non-nil.
func (r *sessionReader) copy(p []byte) []byte {
	if len(p) > arenaSize/4 {
		return append(make([]byte, 0, len(p)), p...)
	}
	if cap(r.arena)-len(r.arena) < len(p) {
		r.arena = make([]byte, 0, arenaSize)
	}
	n := len(r.arena)
	r.arena = append(r.arena, p...)
	return r.arena[n : n+len(p) : n+len(p)]
}

// text is a TEXT value (or NULL, as "").
func text(v driver.Value) (string, error) {
	switch t := v.(type) {
	case nil:
		return "", nil
	case string:
		return t, nil
	case []byte:
		return string(t), nil
	case int64, float64:
		return fmt.Sprint(t), nil // as database/sql's Scan into a string
	}
	return "", fmt.Errorf("value of type %T: want text", v)
}

// readSession reads the entries of one session in (ts, id) order, on one
// reader connection and straight from the driver's rows: database/sql's
// per-column conversions and copies are skipped. count, when set, is the
// condition of where without its order: the rows are counted first (on the
// index alone) so that the entries are allocated once.
func (s *Store) readSession(ctx context.Context, op, where, count string, args []driver.NamedValue) ([]events.Entry, error) {
	_, r, err := s.dbs(ctx)
	if err != nil {
		return nil, s.translate(op, err)
	}
	conn, err := r.Conn(ctx)
	if err != nil {
		return nil, s.translate(op, err)
	}
	defer conn.Close()
	name, _ := args[0].Value.(string)
	id, _ := args[1].Value.(string)
	rd := &sessionReader{name: name, sandboxID: id, row: make([]driver.Value, 7), events: map[string]events.Event{}}
	var out []events.Entry
	err = conn.Raw(func(dc any) error {
		q, ok := dc.(driver.QueryerContext)
		if !ok {
			return errors.New("the driver's connection runs no queries")
		}
		if count != "" {
			n, err := countRows(ctx, q, `SELECT count(*) FROM alineo_events WHERE `+count, args)
			if err != nil {
				return err
			}
			out = make([]events.Entry, 0, n)
		}
		rows, err := q.QueryContext(ctx, `SELECT `+sessionCols+` FROM alineo_events WHERE `+where, args)
		if err != nil {
			return err
		}
		defer rows.Close()
		for i := 1; ; i++ {
			if i%1024 == 0 {
				if err := ctx.Err(); err != nil { // the driver's rows do not watch ctx
					return err
				}
			}
			if err := rows.Next(rd.row); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
			e, err := rd.entry()
			if err != nil {
				return err
			}
			out = append(out, e)
		}
	})
	if err != nil {
		return nil, s.translate(op, err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// countRows runs a SELECT count(*).
func countRows(ctx context.Context, q driver.QueryerContext, query string, args []driver.NamedValue) (int, error) {
	rows, err := q.QueryContext(ctx, query, args)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	v := make([]driver.Value, 1)
	if err := rows.Next(v); err != nil {
		return 0, err
	}
	n, ok := v[0].(int64)
	if !ok {
		return 0, fmt.Errorf("count of type %T", v[0])
	}
	return int(n), nil
}
