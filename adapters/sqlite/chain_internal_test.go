package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"path/filepath"
	"testing"

	"github.com/alineo-labs/alineo/events"
)

// checkChain fails t unless the session's rows, as read (by ts: the tests'
// entries have increasing ts in append order), form the hash chain: each names the one before's hash and hashes to its own.
func checkChain(t *testing.T, s *Store, name, id string, want int) {
	t.Helper()
	got, err := s.ReadAll(context.Background(), name, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != want {
		t.Fatalf("%d entries, want %d", len(got), want)
	}
	prev := ""
	for i, e := range got {
		h, err := events.ChainHash(e, prev)
		if err != nil || e.PrevHash != prev || e.Hash != h {
			t.Fatalf("entry %d (%s, step %d): prevHash %.15q, hash %.15q; want %.15q, %.15q (%v)", i, e.Event, e.StepIndex, e.PrevHash, e.Hash, prev, h, err)
		}
		prev = e.Hash
	}
}

func started(step int) events.Entry {
	return events.New(int64(step), "job", "S", step, events.ExecStarted, events.ExecStartedPayload{Seq: step, Cmd: "x"})
}

// TestChainAcrossStores: two stores on one file append to the same session in
// turn. Each commit follows the other store's, whose rows its remembered
// heads do not know: the connection's data version tells it, so it reads the
// head again. Trusting the heads while the data version is unchanged is the
// fast path; this would fork the chain if it ignored another connection.
func TestChainAcrossStores(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	a, b := openT(t, path), openT(t, path)
	ctx := context.Background()
	for step := 1; step <= 20; step++ {
		s := a
		if step%3 == 0 { // a appends twice in a row now and then: its fast path
			s = b
		}
		if err := s.Append(ctx, started(step)); err != nil {
			t.Fatal(err)
		}
	}
	checkChain(t, a, "job", "S", 20)
}

// TestChainAfterApply: rows a projector applies to the store's own writer
// (not a commit of appends) move the session's head; the next append links
// after them: that commit moved the connection's data version.
func TestChainAfterApply(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "l.db"))
	ctx := context.Background()
	if err := s.Append(ctx, started(1)); err != nil {
		t.Fatal(err)
	}
	rows, err := s.ReadAll(ctx, "job", "S")
	if err != nil || len(rows) != 1 {
		t.Fatalf("ReadAll = %d, %v", len(rows), err)
	}
	p := started(2)
	p.Seq = 100 // a stream sequence
	p.PrevHash = rows[0].Hash
	if p.Hash, err = events.ChainHash(p, p.PrevHash); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyBatch(ctx, "proj", []events.Entry{p}, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, started(3)); err != nil {
		t.Fatal(err)
	}
	checkChain(t, s, "job", "S", 3)
}

// TestNewWriterConnectionIsCounted: a writer connection dropped (as
// caughtUp drops one it could not set back) is replaced by one with a
// data version of its own; the count of connections tells the heads apart.
func TestNewWriterConnectionIsCounted(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "l.db"))
	ctx := context.Background()
	if err := s.Append(ctx, started(1)); err != nil {
		t.Fatal(err)
	}
	before := s.writerConns.Load()
	conn := writerConn(t, s)
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
	if err := s.Append(ctx, started(2)); err != nil {
		t.Fatal(err)
	}
	if got := s.writerConns.Load(); got != before+1 {
		t.Fatalf("writer connections %d after a drop, want %d", got, before+1)
	}
	if s.heads.at.conn != before+1 {
		t.Fatalf("heads last known current on connection %d, want %d", s.heads.at.conn, before+1)
	}
	checkChain(t, s, "job", "S", 2)
}

// TestHeadsCurrentAfterOwnCommit: a commit leaves its heads known current
// at the writer connection's data version after it, so that the store's
// next commit, nobody else having written, trusts them without a probe
// (the data version moves with this store's own commits too).
func TestHeadsCurrentAfterOwnCommit(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "l.db"))
	ctx := context.Background()
	for step := 1; step <= 3; step++ {
		if err := s.Append(ctx, started(step)); err != nil {
			t.Fatal(err)
		}
		conn := writerConn(t, s)
		v, err := connDataVersion(conn)
		_ = conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := (writerState{conn: s.writerConns.Load(), dataVersion: v}); s.heads.at != want {
			t.Fatalf("after append %d the heads are known current at %+v, want %+v", step, s.heads.at, want)
		}
	}
	checkChain(t, s, "job", "S", 3)
}

// writerConn returns the store's writer connection, for the caller to close.
func writerConn(t *testing.T, s *Store) *sql.Conn {
	t.Helper()
	w, _, err := s.dbs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := w.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func openT(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
