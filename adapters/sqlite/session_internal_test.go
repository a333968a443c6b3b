package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/events"
)

// bigSession appends a session of n entries to s, beside another session,
// with timestamps that repeat and, from the second half on, go backward in
// groups: the (ts, id) order is not the order of ids. It returns the
// session's entries in (ts, id) order.
func bigSession(t *testing.T, s *Store, name, id string, n int) []events.Entry {
	t.Helper()
	ctx := t.Context()
	var batch []events.Entry
	for i := range n {
		ts := int64(1 + i/5)
		if i >= n/2 {
			ts = int64(n - i/3)
		}
		batch = append(batch,
			events.New(ts, name, id, i, events.ExecOutput, events.NewOutput(i, events.Stdout, []byte("line "+strconv.Itoa(i)+"\n"))),
			events.New(ts, name, "other", i, events.ExecStarted, events.ExecStartedPayload{Seq: i, Cmd: "x"}))
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
	if !slices.IsSortedFunc(es, func(a, b events.Entry) int { return int(a.Ts - b.Ts) }) {
		t.Fatal("serial read is not in ts order")
	}
	return es
}

// serialRead reads the session forward on one connection.
func serialRead(t *testing.T, s *Store, name, id string) ([]events.Entry, error) {
	t.Helper()
	var out []events.Entry
	err := onReader(t, s, func(q driver.QueryerContext) error {
		n, last, err := span(t.Context(), q, name, id)
		if err != nil {
			return err
		}
		out, err = readRows(t.Context(), q, forwardQuery, name, id, last, make([]events.Entry, 0, n), nil)
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

// TestReadAllMeetsInTheMiddle reads a session large enough to be read by two
// connections, one from each end: the entries are those of a serial read,
// in order, each once.
func TestReadAllMeetsInTheMiddle(t *testing.T) {
	s, err := Open(t.TempDir()+"/l.db", Config{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := bigSession(t, s, "n", "S", splitAt+537)

	got, err := s.ReadAll(t.Context(), "n", "S")
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, got, want)

	// The second reader read its share, backward: the tail of the session.
	var back []events.Entry
	err = onReader(t, s, func(q driver.QueryerContext) error {
		_, last, err := span(t.Context(), q, "n", "S")
		if err != nil {
			return err
		}
		_, r, _ := s.dbs(t.Context())
		c := &claims{n: int64(len(want))}
		c.taken.Store(int64(len(want) - 700)) // the first reader has claimed all but 700
		back = readBack(t.Context(), t.Context(), r, "n", "S", last, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(back)
	sameEntries(t, back, want[len(want)-700:])
}

// TestReadAllSecondReaderWaits reads a large session while every other
// connection of the pool is held: the first reader claims every row itself
// and the read ends.
func TestReadAllSecondReaderWaits(t *testing.T) {
	s, err := Open(t.TempDir()+"/l.db", Config{Synchronous: "NORMAL", MaxReaders: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := bigSession(t, s, "n", "S", splitAt+1)
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
}

// TestReadMeetingSessionGone: when the session is deleted after its size was
// taken, the readers find fewer rows than counted and say so, and ReadAll
// (reading again) finds the session empty.
func TestReadMeetingSessionGone(t *testing.T) {
	s, err := Open(t.TempDir()+"/l.db", Config{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := bigSession(t, s, "n", "S", splitAt)
	_, r, err := s.dbs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	err = onReader(t, s, func(q driver.QueryerContext) error {
		n, last, err := span(t.Context(), q, "n", "S")
		if err != nil || n != len(want) {
			return errors.Join(err, errors.New("span "+strconv.Itoa(n)))
		}
		if err := s.DeleteSandbox(t.Context(), "n", "S"); err != nil {
			return err
		}
		out, err := readMeeting(t.Context(), r, q, "n", "S", n, last)
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
	if got, err := s.ReadAll(t.Context(), "n", "other"); err != nil || len(got) != len(want) {
		t.Fatalf("ReadAll(other) = %d entries, %v; want %d", len(got), err, len(want))
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
