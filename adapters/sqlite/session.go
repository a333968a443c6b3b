package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync/atomic"

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

// splitAt is the session size from which readSession reads with two
// connections at once, one from the session's start and one from its end,
// meeting in its middle.
const splitAt = 8 << 10

// The queries of readSession: the session's size and last row id, then its
// rows up to that id, forward and backward, on the composite index.
const (
	spanQuery     = `SELECT count(*), COALESCE(max(id), 0) FROM alineo_events WHERE name = ? AND sandbox_id = ?`
	forwardQuery  = `SELECT ` + sessionCols + ` FROM alineo_events WHERE name = ? AND sandbox_id = ? AND +id <= ? ORDER BY ts, id`
	backwardQuery = `SELECT ` + sessionCols + ` FROM alineo_events WHERE name = ? AND sandbox_id = ? AND +id <= ? ORDER BY ts DESC, id DESC`
)

// readSession reads the entries of one session in (ts, id) order, on the
// driver's connection directly: one row buffer for the whole read, payloads
// copied once into shared slabs, no per-row Scan.
//
// It first takes the session's size n and last id: the rows read are those
// of that moment (a row appended later has a greater id). A session of
// splitAt rows or more is read by two connections, when the pool has them:
// this one from the start and a second from the end, each claiming rows in
// chunks until the n are claimed. Rows are appended, and a session's rows are
// deleted together, so two readers that took their n rows between them took
// each row once; if one found the session gone, it is read again, alone.
func (s *Store) readSession(ctx context.Context, op, name, id string) ([]events.Entry, error) {
	_, r, err := s.dbs(ctx)
	if err != nil {
		return nil, s.translate(op, err)
	}
	conn, err := r.Conn(ctx)
	if err != nil {
		return nil, s.translate(op, err)
	}
	defer conn.Close()
	var out []events.Entry
	err = conn.Raw(func(dc any) error {
		q, ok := dc.(driver.QueryerContext)
		if !ok {
			return errors.New("the driver's connection runs no queries")
		}
		n, last, err := span(ctx, q, name, id)
		if err != nil || n == 0 {
			return err
		}
		if n >= splitAt && s.path != Memory && s.cfg.MaxReaders > 1 {
			if out, err = readMeeting(ctx, r, q, name, id, n, last); err != nil || len(out) == n {
				return err
			}
			if n, last, err = span(ctx, q, name, id); err != nil || n == 0 {
				return err
			}
		}
		out, err = readRows(ctx, q, forwardQuery, name, id, last, make([]events.Entry, 0, n), nil)
		return err
	})
	if err != nil {
		return nil, s.translate(op, err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// readMeeting reads the session's n rows (ids up to last) forward on q while
// a second connection reads them backward. It returns fewer than n entries
// when the session was deleted from under one of them.
func readMeeting(ctx context.Context, r *sql.DB, q driver.QueryerContext, name, id string, n int, last int64) ([]events.Entry, error) {
	c := &claims{n: int64(n)}
	// The second reader may wait for a connection; once the first has
	// claimed every row it stops waiting.
	wait, stop := context.WithCancel(ctx)
	defer stop()
	var back []events.Entry
	done := make(chan struct{})
	go func() {
		defer close(done)
		back = readBack(ctx, wait, r, name, id, last, c)
	}()
	out, err := readRows(ctx, q, forwardQuery, name, id, last, make([]events.Entry, 0, n), c)
	stop()
	<-done
	if err != nil {
		return nil, err
	}
	if len(out)+len(back) < n {
		return out[:0], nil
	}
	slices.Reverse(back)
	return append(out, back...), nil
}

// readBack reads the session backward on a connection of r taken before wait
// ends, claiming rows from c; it returns what it read. Its errors are not
// returned: rows it claimed and did not read make the read fall back.
func readBack(ctx, wait context.Context, r *sql.DB, name, id string, last int64, c *claims) []events.Entry {
	conn, err := r.Conn(wait)
	if err != nil {
		return nil
	}
	defer conn.Close()
	var out []events.Entry
	_ = conn.Raw(func(dc any) error {
		q, ok := dc.(driver.QueryerContext)
		if !ok {
			return nil
		}
		out, _ = readRows(ctx, q, backwardQuery, name, id, last, make([]events.Entry, 0, c.n/2), c)
		return nil
	})
	return out
}

// claims hands a session's n rows out, in chunks, to the readers that share
// it.
type claims struct {
	n     int64
	taken atomic.Int64
}

const claimChunk = 512

// take claims the next chunk: the number of rows the caller may read, 0 when
// all n are claimed.
func (c *claims) take() int {
	hi := c.taken.Add(claimChunk)
	return int(max(0, min(hi, c.n)-(hi-claimChunk)))
}

// span returns the session's row count and greatest row id.
func span(ctx context.Context, q driver.QueryerContext, name, id string) (n int, last int64, err error) {
	rows, err := q.QueryContext(ctx, spanQuery, []driver.NamedValue{{Ordinal: 1, Value: name}, {Ordinal: 2, Value: id}})
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	v := make([]driver.Value, 2)
	if err := rows.Next(v); err != nil {
		return 0, 0, err
	}
	count, ok1 := v[0].(int64)
	last, ok2 := v[1].(int64)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("span of %T, %T: want integers", v[0], v[1])
	}
	return int(count), last, nil
}

// readRows runs query (forwardQuery or backwardQuery) and appends its rows
// to out, claiming them from c in chunks (nil: all of them), until the rows
// or the claims end.
func readRows(ctx context.Context, q driver.QueryerContext, query, name, id string, last int64, out []events.Entry, c *claims) ([]events.Entry, error) {
	grant := math.MaxInt
	if c != nil {
		if grant = c.take(); grant == 0 {
			return out, nil
		}
	}
	rows, err := q.QueryContext(ctx, query, []driver.NamedValue{{Ordinal: 1, Value: name}, {Ordinal: 2, Value: id}, {Ordinal: 3, Value: last}})
	if err != nil {
		return out, err
	}
	defer rows.Close()
	rd := &sessionReader{name: name, sandboxID: id, row: make([]driver.Value, 7), events: map[string]events.Event{}}
	for i := 1; ; i++ {
		if grant == 0 {
			if grant = c.take(); grant == 0 {
				return out, nil
			}
		}
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil { // the driver's rows do not watch ctx
				return out, err
			}
		}
		if err := rows.Next(rd.row); err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		e, err := rd.entry()
		if err != nil {
			return out, err
		}
		out = append(out, e)
		grant--
	}
}
