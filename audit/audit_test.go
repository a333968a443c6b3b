package audit_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for tampering

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/postgres"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/audit"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// store is a ledger under test with a raw handle to tamper with it.
type store interface {
	adapters.Store
	audit.Scanner
}

type ledgerUnderTest struct {
	s  store
	db *sql.DB
	// ph turns ? into the driver's placeholders.
	ph func(string) string
	// reopen opens another Store on the same database (another process).
	reopen func(t *testing.T) store
}

func newSQLite(t *testing.T) ledgerUnderTest {
	path := filepath.Join(t.TempDir(), "l.db")
	s, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return ledgerUnderTest{s: s, db: db, ph: func(q string) string { return q }, reopen: func(t *testing.T) store {
		s, err := sqlite.Open(path, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}}
}

func newPostgres(t *testing.T) ledgerUnderTest {
	dsn := testenv.Postgres(t)
	s, err := postgres.Open(dsn, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return ledgerUnderTest{s: s, db: db, ph: func(q string) string {
		for i := 1; strings.Contains(q, "?"); i++ {
			q = strings.Replace(q, "?", fmt.Sprintf("$%d", i), 1)
		}
		return q
	}, reopen: func(t *testing.T) store {
		s, err := postgres.Open(dsn, postgres.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}}
}

// session appends a small session of n execs, in batches and alone, and
// returns the row ids of its entries in append order.
func session(t *testing.T, l ledgerUnderTest, name, id string, ts int64, n int) []int64 {
	t.Helper()
	ctx := t.Context()
	if err := l.s.Append(ctx, events.New(ts, name, id, events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{RunID: "r"})); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if err := l.s.Append(ctx, events.New(ts+int64(i), name, id, i, events.ExecStarted,
			events.ExecStartedPayload{Seq: i, Kind: events.KindCommand, Cmd: fmt.Sprintf("echo %d", i)})); err != nil {
			t.Fatal(err)
		}
		if err := l.s.AppendBatch(ctx, []events.Entry{
			events.New(ts+int64(i), name, id, i, events.ExecOutput, events.NewOutput(i, events.Stdout, []byte(fmt.Sprintf("out <%d>\n", i)))),
			events.New(ts+int64(i), name, id, i, events.ExecCompleted, events.ExecCompletedPayload{Seq: i}),
		}); err != nil {
			t.Fatal(err)
		}
	}
	return ids(t, l, id)
}

func ids(t *testing.T, l ledgerUnderTest, sandboxID string) []int64 {
	t.Helper()
	rows, err := l.db.Query(l.ph(`SELECT id FROM alineo_events WHERE sandbox_id = ? ORDER BY id`), sandboxID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

func run(t *testing.T, l ledgerUnderTest, q string, a ...any) {
	t.Helper()
	if _, err := l.db.Exec(l.ph(q), a...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// tampers edit the ledger behind the store's back; each breaks sandbox
// "bad" at the entry with row id at[want].
var tampers = []struct {
	name string
	do   func(t *testing.T, l ledgerUnderTest, at []int64)
	want int // index in at of the first entry that must be reported
}{
	{"edit payload", func(t *testing.T, l ledgerUnderTest, at []int64) {
		run(t, l, `UPDATE alineo_events SET payload = ? WHERE id = ?`, `{"seq":1,"type":"stdout","text":"forged\n"}`, at[2])
	}, 2},
	{"edit ts", func(t *testing.T, l ledgerUnderTest, at []int64) {
		run(t, l, `UPDATE alineo_events SET ts = ts + 1 WHERE id = ?`, at[4])
	}, 4},
	{"delete", func(t *testing.T, l ledgerUnderTest, at []int64) {
		run(t, l, `DELETE FROM alineo_events WHERE id = ?`, at[3])
	}, 4},
	{"insert unhashed", func(t *testing.T, l ledgerUnderTest, at []int64) {
		// Moved past the insert: every row from at[3] on gets an id above the others.
		run(t, l, `INSERT INTO alineo_events (sandbox_id, name, step_idx, event, payload, ts)
			SELECT sandbox_id, name, step_idx, event, payload, ts FROM alineo_events WHERE id = ?`, at[2])
	}, -1},
	{"insert copy", func(t *testing.T, l ledgerUnderTest, at []int64) {
		run(t, l, `INSERT INTO alineo_events (sandbox_id, name, step_idx, event, payload, ts, prev_hash, hash)
			SELECT sandbox_id, name, step_idx, event, payload, ts, prev_hash, hash FROM alineo_events WHERE id = ?`, at[2])
	}, -1},
	{"reorder", func(t *testing.T, l ledgerUnderTest, at []int64) {
		// Swap rows 3 and 4 (their ids, hence their order).
		run(t, l, `UPDATE alineo_events SET id = -1 WHERE id = ?`, at[3])
		run(t, l, `UPDATE alineo_events SET id = ? WHERE id = ?`, at[3], at[4])
		run(t, l, `UPDATE alineo_events SET id = ? WHERE id = -1`, at[4])
	}, 3},
}

func TestVerifySQLite(t *testing.T)   { testVerify(t, newSQLite) }
func TestVerifyPostgres(t *testing.T) { testVerify(t, newPostgres) }

func testVerify(t *testing.T, open func(*testing.T) ledgerUnderTest) {
	for _, tt := range tampers {
		t.Run(tt.name, func(t *testing.T) {
			l := open(t)
			ctx := t.Context()
			session(t, l, "good", "ok-1", 1000, 3)
			at := session(t, l, "bad", "bad-1", 2000, 3)
			session(t, l, "good", "ok-2", 3000, 2)
			res, err := audit.Verify(ctx, l.s, audit.Filter{}, audit.Options{})
			if err != nil || res.Broken != 0 || len(res.Sessions) != 3 {
				t.Fatalf("before tampering: %+v, %v; want 3 chained sessions", res, err)
			}
			for _, s := range res.Sessions {
				if s.State != audit.Chained {
					t.Fatalf("before tampering: %s", s)
				}
			}
			tt.do(t, l, at)
			res, err = audit.Verify(ctx, l.s, audit.Filter{}, audit.Options{})
			if !errors.Is(err, audit.ErrBroken) || res.Broken != 1 {
				t.Fatalf("after %s: %+v, %v; want one broken session", tt.name, res, err)
			}
			for _, s := range res.Sessions {
				if (s.SandboxID == "bad-1") != (s.State == audit.Broken) {
					t.Errorf("after %s: %s", tt.name, s)
				}
				if s.SandboxID != "bad-1" {
					continue
				}
				if tt.want >= 0 && s.BrokenAt != uint64(at[tt.want]) {
					t.Errorf("after %s: broken at seq %d, want %d (%s)", tt.name, s.BrokenAt, at[tt.want], s)
				}
				if tt.want < 0 && s.BrokenAt <= uint64(at[len(at)-1]) {
					t.Errorf("after %s: broken at seq %d, want the inserted row, past %d", tt.name, s.BrokenAt, at[len(at)-1])
				}
			}
			// One session alone.
			res, err = audit.Verify(ctx, l.s, audit.Filter{SandboxID: "ok-1"}, audit.Options{})
			if err != nil || len(res.Sessions) != 1 || res.Sessions[0].State != audit.Chained {
				t.Fatalf("--sandbox ok-1: %+v, %v", res, err)
			}
		})
	}
}

// TestResumeContinuesChain: another Store on the same database (a resumed
// writer, another process) continues the session's chain from its head,
// and the first Store, whose remembered head is stale now, continues after
// it too.
func TestResumeContinuesChain(t *testing.T) {
	for name, open := range map[string]func(*testing.T) ledgerUnderTest{"sqlite": newSQLite, "postgres": newPostgres} {
		t.Run(name, func(t *testing.T) {
			l := open(t)
			ctx := t.Context()
			session(t, l, "n", "S", 1000, 2)
			other := l.reopen(t)
			if err := other.Append(ctx, events.New(5000, "n", "S", events.SandboxLevel, events.SandboxPaused, nil)); err != nil {
				t.Fatal(err)
			}
			if err := l.s.Append(ctx, events.New(6000, "n", "S", events.SandboxLevel, events.SandboxResumed, nil)); err != nil {
				t.Fatal(err)
			}
			if err := other.AppendBatch(ctx, []events.Entry{
				events.New(7000, "n", "S", events.SandboxLevel, events.SandboxPaused, nil),
				events.New(7001, "n", "S", events.SandboxLevel, events.SandboxClosed, nil),
			}); err != nil {
				t.Fatal(err)
			}
			res, err := audit.Verify(ctx, l.s, audit.Filter{}, audit.Options{})
			if err != nil || res.Sessions[0].State != audit.Chained || res.Sessions[0].Entries != 11 {
				t.Fatalf("after resumes: %+v, %v; want 11 chained entries", res, err)
			}
		})
	}
}

// TestTypeScriptLedgerIsUnchained: the TypeScript SDK's fixtures have no
// chain: unchained, never broken; appending to one of their sessions
// chains it from the first entry on.
func TestTypeScriptLedgerIsUnchained(t *testing.T) {
	path := testenv.Fixture(t, adaptertest.TypeScriptSession.File)
	s, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	res, err := audit.Verify(ctx, s, audit.Filter{}, audit.Options{})
	if err != nil || len(res.Sessions) == 0 {
		t.Fatalf("Verify(fixture) = %+v, %v", res, err)
	}
	for _, ss := range res.Sessions {
		if ss.State != audit.Unchained {
			t.Fatalf("fixture session %s, want unchained", ss)
		}
	}
	first := res.Sessions[0]
	if err := s.Append(ctx, events.New(1796300000000, first.Name, first.SandboxID, events.SandboxLevel, events.SandboxResumed, nil)); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, events.New(1796300000001, first.Name, first.SandboxID, events.SandboxLevel, events.SandboxClosed, nil)); err != nil {
		t.Fatal(err)
	}
	res, err = audit.Verify(ctx, s, audit.Filter{SandboxID: first.SandboxID}, audit.Options{})
	if err != nil || res.Sessions[0].State != audit.Chained || res.Sessions[0].Unchained != first.Entries {
		t.Fatalf("mixed session: %+v, %v; want chained after %d unchained entries", res, err, first.Entries)
	}
}

// TestAnchorsCatchARewrite: rewriting a whole chain consistently passes
// the chain check; the anchors taken before catch it.
func TestAnchorsCatchARewrite(t *testing.T) {
	l := newSQLite(t)
	ctx := context.Background()
	session(t, l, "n", "S", 1000, 2)
	session(t, l, "n", "T", 2000, 1)
	anchors, err := audit.Anchors(ctx, l.s, audit.Filter{}, 1)
	if err != nil || len(anchors) != 2 {
		t.Fatalf("Anchors = %+v, %v", anchors, err)
	}
	var buf strings.Builder
	if err := audit.WriteAnchors(&buf, anchors); err != nil {
		t.Fatal(err)
	}
	read, err := audit.ReadAnchors(strings.NewReader(buf.String()))
	if err != nil || len(read) != 2 || read[0] != anchors[0] {
		t.Fatalf("ReadAnchors = %+v, %v; want %+v", read, err, anchors)
	}
	// Rewrite S: delete it and write a forged history with a valid chain.
	if err := l.s.DeleteSandbox(ctx, "n", "S"); err != nil {
		t.Fatal(err)
	}
	if err := l.s.Append(ctx, events.New(1000, "n", "S", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{RunID: "forged"})); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.Verify(ctx, l.s, audit.Filter{}, audit.Options{}); err != nil {
		t.Fatalf("without anchors the rewrite holds: %v", err)
	}
	res, err := audit.Verify(ctx, l.s, audit.Filter{}, audit.Options{Anchors: read})
	if !errors.Is(err, audit.ErrBroken) || res.Broken != 1 {
		t.Fatalf("with anchors: %+v, %v; want S broken", res, err)
	}
	// Deleting a whole session is caught too.
	if err := l.s.DeleteSandbox(ctx, "n", "T"); err != nil {
		t.Fatal(err)
	}
	if res, err = audit.Verify(ctx, l.s, audit.Filter{}, audit.Options{Anchors: read}); res.Broken != 2 {
		t.Fatalf("with T deleted: %+v, %v; want 2 broken", res, err)
	}
	// A chain that grew since it was anchored still holds.
	l2 := newSQLite(t)
	session(t, l2, "n", "U", 1000, 1)
	as, _ := audit.Anchors(ctx, l2.s, audit.Filter{}, 1)
	session(t, l2, "n", "U", 5000, 1)
	if _, err := audit.Verify(ctx, l2.s, audit.Filter{}, audit.Options{Anchors: as}); err != nil {
		t.Fatalf("grown chain: %v", err)
	}
}
