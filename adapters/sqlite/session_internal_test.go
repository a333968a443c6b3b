package sqlite

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/events"
)

// layout is how a test session lies in the table: others rows of another
// session follow each of its rows, and ts gives row i of n its timestamp.
type layout struct {
	name   string
	others int
	ts     func(i, n int) int64
	byID   bool // the session is read by id
	// complete: read by id between its ends' ids, the session is all there.
	complete bool
}

var layouts = []layout{
	// Timestamps that grow with ids (and repeat): the usual session.
	{"by id", 1, func(i, n int) int64 { return int64(1 + i/5) }, true, true},
	// Timestamps that go back here and there between the first and the last.
	{"by id, ts back", 1, func(i, n int) int64 {
		if i == n-1 {
			return int64(10 * n)
		}
		return int64(1 + i + 3*(i%4))
	}, true, true},
	// The last quarter's timestamps go back below the rest: the last row in
	// (ts, id) order is not the last row, and a read by id misses rows.
	{"by id, ends inside", 1, func(i, n int) int64 {
		if i >= 3*n/4 {
			return int64(1 + i - n/2)
		}
		return int64(1 + i)
	}, true, false},
	// A fifth of its id range: read on the index.
	{"on the index", 4, func(i, n int) int64 {
		if i >= n/2 {
			return int64(n - i/3)
		}
		return int64(1 + i/5)
	}, false, false},
}

// bigSession appends a session of n entries to s as l lays it out. It
// returns the session's entries in (ts, id) order.
func bigSession(t *testing.T, s *Store, name, id string, n int, l layout) []events.Entry {
	t.Helper()
	ctx := t.Context()
	var batch []events.Entry
	for i := range n {
		ts := l.ts(i, n)
		batch = append(batch, events.New(ts, name, id, i, events.ExecOutput, events.NewOutput(i, events.Stdout, []byte("line "+strconv.Itoa(i)+"\n"))))
		for range l.others {
			batch = append(batch, events.New(ts, name, "other", i, events.ExecStarted, events.ExecStartedPayload{Seq: i, Cmd: "x"}))
		}
		if len(batch) >= 2000 {
			if err := s.AppendBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := s.AppendBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	es, err := serialRead(t, s, name, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != n {
		t.Fatalf("serial read = %d entries, want %d", len(es), n)
	}
	if !slices.IsSortedFunc(es, func(a, b events.Entry) int { return cmp.Compare(a.Ts, b.Ts) }) {
		t.Fatal("serial read is not in ts order")
	}
	return es
}

// sessionStore opens a store with cfg holding one session "n"/"S" of n
// entries laid out by l; it returns the store and the session's entries.
func sessionStore(t *testing.T, cfg Config, n int, l layout) (*Store, []events.Entry) {
	t.Helper()
	s, err := Open(t.TempDir()+"/l.db", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, bigSession(t, s, "n", "S", n, l)
}

// serialRead reads the session forward on one connection, on the index in
// (ts, id) order whatever the session's span: the reference read.
func serialRead(t *testing.T, s *Store, name, id string) ([]events.Entry, error) {
	t.Helper()
	var out []events.Entry
	err := onReader(t, s, func(q driver.QueryerContext) error {
		var err error
		out, err = readRows(t.Context(), q, sessionSpan{name: name, id: id, last: math.MaxInt64}, false, nil, nil)
		return err
	})
	return out, err
}

// onReader runs f on a connection of s's reader pool.
func onReader(t *testing.T, s *Store, f func(driver.QueryerContext) error) error {
	t.Helper()
	_, r, err := s.dbs(t.Context())
	if err != nil {
		return err
	}
	conn, err := r.Conn(t.Context())
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error { return f(dc.(driver.QueryerContext)) })
}

func sameEntries(t *testing.T, got, want []events.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.Ts != w.Ts || g.StepIndex != w.StepIndex || g.Event != w.Event || string(g.Payload) != string(w.Payload) {
			t.Fatalf("entry %d = %+v, want %+v", i, g, w)
		}
	}
}

// TestReadAllMeetsInTheMiddle reads sessions large enough to be read by two
// connections, in every layout: the entries are those of a serial read on
// the index, in order, each once. The two connections' reads are checked
// apart too.
func TestReadAllMeetsInTheMiddle(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			s, want := sessionStore(t, Config{Synchronous: "NORMAL"}, splitAt+537, l)

			got, err := s.ReadAll(t.Context(), "n", "S")
			if err != nil {
				t.Fatal(err)
			}
			sameEntries(t, got, want)

			_, r, _ := s.dbs(t.Context())
			err = onReader(t, s, func(q driver.QueryerContext) error {
				sp, err := span(t.Context(), q, "n", "S")
				if err != nil {
					return err
				}
				if sp.byID != l.byID || sp.n != len(want) {
					t.Fatalf("span %+v: byID %v, want %v", sp, sp.byID, l.byID)
				}
				if l.byID {
					// Two halves, or none when rows lie beyond the ends.
					out, err := readHalves(t.Context(), r, q, sp)
					if err != nil {
						return err
					}
					if !l.complete {
						if len(out) != 0 {
							t.Errorf("readHalves = %d entries, want none (rows beyond the ends)", len(out))
						}
						return nil
					}
					sameEntries(t, out, want)
					return nil
				}
				// The second reader reads its share backward: the tail.
				c := &claims{n: int64(len(want))}
				c.taken.Store(int64(len(want) - 700)) // the first reader has claimed all but 700
				back := readBack(t.Context(), t.Context(), r, sp, c)
				slices.Reverse(back)
				sameEntries(t, back, want[len(want)-700:])
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReadAllSmallSessions reads sessions below splitAt, in every layout:
// the entries of the reference read.
func TestReadAllSmallSessions(t *testing.T) {
	for _, l := range layouts {
		for _, n := range []int{1, 2, 3, 100, 1001} {
			s, want := sessionStore(t, Config{Synchronous: "NORMAL"}, n, l)
			got, err := s.ReadAll(t.Context(), "n", "S")
			if err != nil {
				t.Fatal(err)
			}
			sameEntries(t, got, want)
		}
	}
}

// TestReadAllSecondReaderWaits reads a large session while every other
// connection of the pool is held: the first reader reads every row itself
// and the read ends.
func TestReadAllSecondReaderWaits(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			s, want := sessionStore(t, Config{Synchronous: "NORMAL", MaxReaders: 2}, splitAt+1, l)
			_, r, err := s.dbs(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			held, err := r.Conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			got, err := s.ReadAll(ctx, "n", "S")
			if err != nil {
				t.Fatal(err)
			}
			sameEntries(t, got, want)
		})
	}
}

// TestReadMeetingSessionGone: when the session is deleted after its span was
// taken, the readers find fewer rows than counted and say so, and ReadAll
// (reading again) finds the session empty.
func TestReadMeetingSessionGone(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			s, want := sessionStore(t, Config{Synchronous: "NORMAL"}, splitAt, l)
			others, err := s.ReadAll(t.Context(), "n", "other")
			if err != nil {
				t.Fatal(err)
			}
			_, r, err := s.dbs(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			err = onReader(t, s, func(q driver.QueryerContext) error {
				sp, err := span(t.Context(), q, "n", "S")
				if err != nil || sp.n != len(want) {
					return errors.Join(err, errors.New("span "+strconv.Itoa(sp.n)))
				}
				if err := s.DeleteSandbox(t.Context(), "n", "S"); err != nil {
					return err
				}
				out, err := readMeeting(t.Context(), r, q, sp)
				if err != nil {
					return err
				}
				if len(out) != 0 {
					t.Errorf("readMeeting after the delete = %d entries, want none", len(out))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got, err := s.ReadAll(t.Context(), "n", "S"); err != nil || got != nil {
				t.Fatalf("ReadAll after the delete = %d entries, %v", len(got), err)
			}
			if got, err := s.ReadAll(t.Context(), "n", "other"); err != nil || len(got) != len(others) {
				t.Fatalf("ReadAll(other) = %d entries, %v; want %d", len(got), err, len(others))
			}
		})
	}
}

// TestClaimsHandOutEachRowOnce: readers taking chunks concurrently are
// granted n rows in all.
func TestClaimsHandOutEachRowOnce(t *testing.T) {
	for _, n := range []int64{0, 1, claimChunk - 1, claimChunk, 10*claimChunk + 3} {
		c := &claims{n: n}
		var mu sync.Mutex
		var total int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					g := c.take()
					if g == 0 {
						return
					}
					if g < 0 || g > claimChunk {
						t.Errorf("grant %d", g)
					}
					mu.Lock()
					total += int64(g)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if total != n {
			t.Errorf("n=%d: granted %d", n, total)
		}
	}
}

// TestSessionRowKinds: kindCol packs every name of sessionEvents, at its
// index, with the steps of its range, and leaves any other row (a branch, an
// error, a step beyond the range, a name of neither vocabulary) to its JSON
// array; every one reads back as written.
func TestSessionRowKinds(t *testing.T) {
	s, err := Open(t.TempDir()+"/l.db", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	one := 1
	var want []events.Entry
	add := func(e events.Entry) {
		e.Ts, e.Name, e.SandboxID = int64(len(want)+1), "n", "S"
		want = append(want, e)
	}
	for i, ev := range sessionEvents {
		add(events.Entry{StepIndex: i, Event: ev})
	}
	packed := len(want)
	add(events.Entry{StepIndex: events.SandboxLevel, Event: events.SandboxCreated})
	add(events.Entry{StepIndex: maxPackedStep, Event: events.ExecStarted})
	packed += 2
	add(events.Entry{StepIndex: maxPackedStep + 1, Event: events.ExecStarted})
	add(events.Entry{StepIndex: 3, Branch: &one, Event: events.ExecOutput})
	add(events.Entry{StepIndex: 3, Event: events.ExecCompleted, Error: `exit "7"`})
	if err := s.AppendBatch(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	// Names no writer of this module stores, and a step it refuses, written
	// by another.
	w, _, err := s.dbs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []events.Entry{{StepIndex: 1, Event: "exec.output2"}, {StepIndex: 1, Event: "0"}, {StepIndex: 3, Event: "custom.event"},
		{StepIndex: 1, Event: "exec.output'"}, {StepIndex: -2, Event: events.ExecStarted}} {
		if _, err := w.ExecContext(t.Context(), `INSERT INTO alineo_events (sandbox_id, name, step_idx, event, ts) VALUES ('S', 'n', ?, ?, ?)`,
			e.StepIndex, string(e.Event), len(want)+1); err != nil {
			t.Fatal(err)
		}
		add(e)
	}
	rows, err := w.QueryContext(t.Context(), `SELECT `+kindCol()+` FROM alineo_events WHERE name = 'n' ORDER BY ts, id`)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; rows.Next(); i++ {
		var k any
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		if _, isInt := k.(int64); isInt != (i < packed) {
			t.Errorf("row %d (%+v): kind %v, packed %v", i, want[i], k, isInt)
		}
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadAll(t.Context(), "n", "S")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("ReadAll = %d entries, want %d", len(got), len(want))
	}
	for i, e := range got {
		w := want[i]
		if e.Event != w.Event || e.StepIndex != w.StepIndex || e.Error != w.Error || (e.Branch == nil) != (w.Branch == nil) ||
			e.Branch != nil && *e.Branch != *w.Branch || e.Ts != w.Ts {
			t.Errorf("entry %d = %+v, want %+v", i, e, w)
		}
	}
	// A row it cannot read fails the read, with no panic.
	for _, bad := range []string{`'S', 'u', 'one', NULL`, `'S', 'v', 1, 'two'`} {
		if _, err := w.ExecContext(t.Context(), `INSERT INTO alineo_events (sandbox_id, name, step_idx, branch, event, ts) VALUES (`+bad+`, 'exec.started', 1)`); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"u", "v"} {
		if _, err := s.ReadAll(t.Context(), name, "S"); err == nil || !strings.Contains(err.Error(), "want an integer") {
			t.Errorf("ReadAll of %s = %v, want an error saying an integer is wanted", name, err)
		}
	}
}
