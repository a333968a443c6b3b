package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/alineo-labs/alineo/events"
)

// sessionCols are the columns readSession reads: name and sandbox_id are the
// query's own arguments (TEXT = compares bytes), so they are not read back.
// Each column the driver hands over costs about as much as a row's step, so
// step_idx, branch, event and error come in one: kind (see kindCol). The
// payload is read as a BLOB: its bytes, without a string in between. The
// actor comes after it, on its own: it is set on nearly every row we write,
// so packing it into kind would send every row down the JSON path; then the
// hash chain's two columns.
var sessionCols = `COALESCE(ledger_seq, id), ts, ` + kindCol() + `, CAST(payload AS BLOB), actor, prev_hash, hash`

// sessionEvents are the event names kindCol packs, by their index there: the
// exec events first (most rows, and a CASE compares in order), then every
// other name of either vocabulary.
var sessionEvents = [...]events.Event{
	events.ExecOutput, events.ExecStarted, events.ExecCompleted,
	events.TSExecEvent, events.TSExecStart, events.TSExecComplete,
	events.SandboxCreated, events.CheckpointCreated, events.SandboxPaused, events.SandboxResumed,
	events.EgressRuleAdded, events.EgressRuleRemoved, events.CredentialBound, events.CredentialRevoked,
	events.SandboxClosed, events.TSSandboxCreated, events.TSCheckpointCreated, events.TSSandboxPaused,
	events.TSSandboxResumed, events.TSSandboxClosed,
}

// eventBits is the width of the event's index in a packed kind; maxPackedStep
// the greatest step_idx one holds.
const (
	eventBits     = 5
	maxPackedStep = math.MaxInt64>>eventBits - 1
)

// kindCol is the kind column: for a row with no branch and no error, an
// integer step_idx in [-1, maxPackedStep] and a name of sessionEvents (nearly
// every row), the integer (step_idx+1)<<eventBits | index; for any other, the
// JSON array [step_idx, branch, event, error] (event and error as text).
func kindCol() string {
	var b strings.Builder
	fmt.Fprintf(&b, "COALESCE(CASE WHEN branch IS NULL AND error IS NULL AND typeof(step_idx) = 'integer' AND step_idx BETWEEN -1 AND %d THEN (step_idx + 1) * %d + CASE event", maxPackedStep, 1<<eventBits)
	for i, ev := range sessionEvents {
		fmt.Fprintf(&b, " WHEN '%s' THEN %d", ev, i)
	}
	b.WriteString(" END END, json_array(step_idx, branch, CAST(event AS TEXT), CAST(error AS TEXT)))")
	return b.String()
}

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
	actors          map[string]string
	arena           []byte
}

// entry converts the current row.
func (r *sessionReader) entry() (events.Entry, error) {
	e := events.Entry{Name: r.name, SandboxID: r.sandboxID}
	seq, ok1 := r.row[0].(int64)
	ts, ok2 := r.row[1].(int64)
	if !ok1 || !ok2 {
		return e, fmt.Errorf("row of %T, %T: want integers for seq and ts", r.row[0], r.row[1])
	}
	e.Seq, e.Ts = uint64(seq), ts
	switch k := r.row[2].(type) {
	case int64:
		i := k & (1<<eventBits - 1)
		if i >= int64(len(sessionEvents)) {
			return e, fmt.Errorf("event %d: not a name of sessionEvents", i)
		}
		e.StepIndex, e.Event = int(k>>eventBits-1), sessionEvents[i]
	case string:
		if err := r.unpacked(&e, k); err != nil {
			return e, err
		}
	default:
		return e, fmt.Errorf("row kind of type %T", k)
	}
	switch p := r.row[3].(type) {
	case nil:
	case []byte:
		// A payload stored as a JSON string holding JSON reads as that JSON.
		e.Payload = events.UnwrapPayload(r.copy(p))
	default:
		return e, fmt.Errorf("payload of type %T", p)
	}
	switch a := r.row[4].(type) {
	case nil:
	case string:
		e.Actor = r.actor(a)
	case []byte:
		e.Actor = r.actor(string(a))
	default:
		return e, fmt.Errorf("actor of type %T", a)
	}
	if h, ok := r.row[6].(string); ok { // NULL on rows written without the chain
		e.PrevHash, _ = r.row[5].(string)
		e.Hash = h
	}
	return e, nil
}

// actor interns an actor name: a session has one or a few, so its rows
// share one string instead of one copy each.
func (r *sessionReader) actor(name string) string {
	if r.actors == nil {
		r.actors = map[string]string{}
	}
	if a, ok := r.actors[name]; ok {
		return a
	}
	name = strings.Clone(name)
	r.actors[name] = name
	return name
}

// unpacked sets e's step, branch, event and error from a kind kindCol did
// not pack: the JSON array [step_idx, branch, event, error].
func (r *sessionReader) unpacked(e *events.Entry, kind string) error {
	var cols [4]json.RawMessage
	if err := json.Unmarshal([]byte(kind), &cols); err != nil {
		return fmt.Errorf("row kind %q: %w", kind, err)
	}
	var step, branch *int64
	var ev, errText *string
	for i, c := range []struct {
		name, want string
		v          any
	}{{"step_idx", "an integer", &step}, {"branch", "an integer", &branch}, {"event", "text", &ev}, {"error", "text", &errText}} {
		if err := json.Unmarshal(cols[i], c.v); err != nil {
			return fmt.Errorf("%s %s: want %s", c.name, cols[i], c.want)
		}
	}
	if step == nil || ev == nil {
		return fmt.Errorf("row kind %s: step_idx and event must not be NULL", kind)
	}
	e.StepIndex = int(*step)
	if branch != nil {
		n := int(*branch)
		e.Branch = &n
	}
	e.Event = r.event(*ev)
	if errText != nil {
		e.Error = *errText
	}
	return nil
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

// splitAt is the session size from which readSession reads with two
// connections at once (readMeeting).
const splitAt = 8 << 10

// The queries of readSession. spanQuery takes the session's size and the
// ids of its first and last rows in (ts, id) order (two index probes), in one
// snapshot; exactQuery its size and greatest id, in one snapshot. The rows are
// read either on the composite index in (ts, id) order, up to the greatest
// id, or, when the session fills most of the id range between its ends, off
// the table itself in id order (no index lookup per row) and sorted after.
const (
	spanQuery = `SELECT count(*),
		(SELECT id FROM alineo_events WHERE name = ?1 AND sandbox_id = ?2 ORDER BY ts, id LIMIT 1),
		(SELECT id FROM alineo_events WHERE name = ?1 AND sandbox_id = ?2 ORDER BY ts DESC, id DESC LIMIT 1)
		FROM alineo_events WHERE name = ?1 AND sandbox_id = ?2`
	exactQuery = `SELECT count(*), COALESCE(max(id), 0) FROM alineo_events WHERE name = ? AND sandbox_id = ?`
)

var (
	forwardQuery  = `SELECT ` + sessionCols + ` FROM alineo_events WHERE name = ? AND sandbox_id = ? AND +id <= ? ORDER BY ts, id`
	backwardQuery = `SELECT ` + sessionCols + ` FROM alineo_events WHERE name = ? AND sandbox_id = ? AND +id <= ? ORDER BY ts DESC, id DESC`
	idForward     = `SELECT ` + sessionCols + ` FROM alineo_events WHERE id BETWEEN ? AND ? AND +name = ? AND +sandbox_id = ? ORDER BY id`
)

// sessionSpan is a session at one moment: its size n and either the ids of
// its first and last rows in (ts, id) order (read by id) or its greatest id
// (read on the index). Its rows are those of that moment: a row appended later
// has a greater id than any of them.
type sessionSpan struct {
	name, id    string
	n           int
	first, last int64
	byID        bool // read by id, from first to last; else on the index, up to last
}

// dense reports whether the session holds at least half of the rows between
// its ends' ids, so a scan of that range, skipping the others, reads fewer
// pages than index lookups would. The rows are usually all in it (ids and
// timestamps grow together); a read that finds fewer is done again on the
// index.
func (sp sessionSpan) dense() bool {
	width := sp.last - sp.first + 1
	return width >= int64(sp.n) && width <= 2*int64(sp.n)
}

// query returns the query reading the session forward, or backward, and its
// arguments. Only a span read on the index is read backward (readBack): one
// read by id is read in halves, both forward.
func (sp sessionSpan) query(backward bool) (string, []driver.NamedValue) {
	if sp.byID && !backward {
		return idForward, []driver.NamedValue{{Ordinal: 1, Value: sp.first}, {Ordinal: 2, Value: sp.last}, {Ordinal: 3, Value: sp.name}, {Ordinal: 4, Value: sp.id}}
	}
	q := forwardQuery
	if backward {
		q = backwardQuery
	}
	return q, []driver.NamedValue{{Ordinal: 1, Value: sp.name}, {Ordinal: 2, Value: sp.id}, {Ordinal: 3, Value: sp.last}}
}

// order puts entries read forward in the read's order into (ts, id) order: a
// read by id is in id order, which is that order unless timestamps go back.
func (sp sessionSpan) order(es []events.Entry) {
	byTs := func(a, b events.Entry) int { return cmp.Compare(a.Ts, b.Ts) }
	if sp.byID && !slices.IsSortedFunc(es, byTs) {
		slices.SortStableFunc(es, byTs) // stable: ties stay in id order
	}
}

// readSession reads the entries of one session in (ts, id) order, on the
// driver's connection directly: one row buffer for the whole read, payloads
// copied once into shared slabs, no per-row Scan.
//
// It first takes the session's span. A session of splitAt rows or more is
// read by two connections when the pool has them (readMeeting). Rows are
// appended, and a session's rows are deleted together, so reads that found
// the span's n rows found the session. A read that found fewer (the session
// was deleted, or, read by id, it has rows beyond its ends' ids) is done
// again, alone, on the index, in one snapshot.
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
		sp, err := span(ctx, q, name, id)
		if err != nil || sp.n == 0 {
			return err
		}
		if sp.n >= splitAt && s.path != Memory && s.cfg.MaxReaders > 1 {
			out, err = readMeeting(ctx, r, q, sp)
		} else {
			out, err = readRows(ctx, q, sp, false, make([]events.Entry, 0, sp.n), nil)
			sp.order(out)
		}
		if err != nil || len(out) == sp.n {
			return err
		}
		if sp, err = exactSpan(ctx, q, name, id); err != nil || sp.n == 0 {
			out = nil
			return err
		}
		out, err = readRows(ctx, q, sp, false, make([]events.Entry, 0, sp.n), nil)
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

// readMeeting reads the session's rows with two connections and returns them
// in (ts, id) order: by id, in two halves of its id range (readHalves); on the
// index, forward on q while a second connection reads backward, claiming rows
// until the n are claimed. It returns fewer than sp.n entries when the
// readers did not find them all.
func readMeeting(ctx context.Context, r *sql.DB, q driver.QueryerContext, sp sessionSpan) ([]events.Entry, error) {
	if sp.byID {
		return readHalves(ctx, r, q, sp)
	}
	c := &claims{n: int64(sp.n)}
	// The second reader may wait for a connection; once the first has
	// claimed every row it stops waiting.
	wait, stop := context.WithCancel(ctx)
	defer stop()
	var back []events.Entry
	done := make(chan struct{})
	go func() {
		defer close(done)
		back = readBack(ctx, wait, r, sp, c)
	}()
	out, err := readRows(ctx, q, sp, false, make([]events.Entry, 0, sp.n), c)
	stop()
	<-done
	if err != nil {
		return nil, err
	}
	if len(out)+len(back) < sp.n {
		return out[:0], nil
	}
	slices.Reverse(back)
	out = append(out, back...)
	sp.order(out)
	return out, nil
}

// readHalves reads a session by id in two halves of its id range: the first
// on q, the second on another connection of r if one is free before the first
// half is read, else on q after it. The halves do not overlap, and each holds
// at most the session's rows of the span's moment, so n entries in all are
// the session.
func readHalves(ctx context.Context, r *sql.DB, q driver.QueryerContext, sp sessionSpan) ([]events.Entry, error) {
	lo, hi := sp, sp
	lo.last = sp.first + (sp.last-sp.first)/2
	hi.first = lo.last + 1
	var taken atomic.Bool // the second half is being read
	wait, stop := context.WithCancel(ctx)
	defer stop()
	var second []events.Entry
	var secondErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := r.Conn(wait)
		if err != nil {
			return
		}
		defer conn.Close()
		if !taken.CompareAndSwap(false, true) {
			return
		}
		secondErr = conn.Raw(func(dc any) error {
			q, ok := dc.(driver.QueryerContext)
			if !ok {
				return errors.New("the driver's connection runs no queries")
			}
			second, err = readRows(ctx, q, hi, false, make([]events.Entry, 0, sp.n/2), nil)
			return err
		})
	}()
	out, err := readRows(ctx, q, lo, false, make([]events.Entry, 0, sp.n), nil)
	stop()
	if err == nil && taken.CompareAndSwap(false, true) {
		out, err = readRows(ctx, q, hi, false, out, nil)
	}
	<-done
	if err != nil {
		return nil, err
	}
	if out = append(out, second...); secondErr != nil || len(out) != sp.n {
		return out[:0], nil // read again, on the index
	}
	sp.order(out)
	return out, nil
}

// readBack reads the session backward on a connection of r taken before wait
// ends, claiming rows from c; it returns what it read. Its errors are not
// returned: rows it claimed and did not read make the read fall back.
func readBack(ctx, wait context.Context, r *sql.DB, sp sessionSpan, c *claims) []events.Entry {
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
		out, _ = readRows(ctx, q, sp, true, make([]events.Entry, 0, c.n/2), c)
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

// span returns the session's span: read by id when dense, else on the index.
func span(ctx context.Context, q driver.QueryerContext, name, id string) (sessionSpan, error) {
	sp := sessionSpan{name: name, id: id}
	v, err := queryRow(ctx, q, spanQuery, 3, name, id)
	if err != nil {
		return sp, err
	}
	count, ok := v[0].(int64)
	if !ok {
		return sp, fmt.Errorf("session count of %T: want an integer", v[0])
	}
	if sp.n = int(count); sp.n == 0 {
		return sp, nil
	}
	first, ok1 := v[1].(int64)
	last, ok2 := v[2].(int64)
	if !ok1 || !ok2 {
		return sp, fmt.Errorf("session ends of %T, %T: want integers", v[1], v[2])
	}
	sp.first, sp.last = first, last
	if sp.byID = sp.dense(); sp.byID {
		return sp, nil
	}
	return exactSpan(ctx, q, name, id)
}

// exactSpan returns the session's span read on the index.
func exactSpan(ctx context.Context, q driver.QueryerContext, name, id string) (sessionSpan, error) {
	sp := sessionSpan{name: name, id: id}
	v, err := queryRow(ctx, q, exactQuery, 2, name, id)
	if err != nil {
		return sp, err
	}
	count, ok1 := v[0].(int64)
	last, ok2 := v[1].(int64)
	if !ok1 || !ok2 {
		return sp, fmt.Errorf("session span of %T, %T: want integers", v[0], v[1])
	}
	sp.n, sp.last = int(count), last
	return sp, nil
}

// queryRow returns the cols values of query's one row.
func queryRow(ctx context.Context, q driver.QueryerContext, query string, cols int, name, id string) ([]driver.Value, error) {
	rows, err := q.QueryContext(ctx, query, []driver.NamedValue{{Ordinal: 1, Value: name}, {Ordinal: 2, Value: id}})
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	v := make([]driver.Value, cols)
	if err := rows.Next(v); err != nil {
		return nil, err
	}
	return v, nil
}

// readRows reads sp forward (or backward: sp.query) and appends its rows to
// out, claiming them from c in chunks (nil: all of them), until the rows or
// the claims end.
func readRows(ctx context.Context, q driver.QueryerContext, sp sessionSpan, backward bool, out []events.Entry, c *claims) ([]events.Entry, error) {
	grant := math.MaxInt
	if c != nil {
		if grant = c.take(); grant == 0 {
			return out, nil
		}
	}
	query, args := sp.query(backward)
	rows, err := q.QueryContext(ctx, query, args)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	rd := &sessionReader{name: sp.name, sandboxID: sp.id, row: make([]driver.Value, 7), events: map[string]events.Event{}}
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
