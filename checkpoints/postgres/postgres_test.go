package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/checkpointtest"
	"github.com/alineo-labs/alineo/checkpoints/postgres"
	"github.com/alineo-labs/alineo/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres()
	os.Exit(code)
}

func open(t testing.TB, dsn string, opts checkpoints.Options) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	checkpointtest.Run(t, func(t *testing.T, opts checkpoints.Options) checkpoints.Store {
		return open(t, testenv.Postgres(t), opts)
	})
}

// TestShared runs the concurrency cases over two stores on one database, as
// two hosts would.
func TestShared(t *testing.T) {
	checkpointtest.RunShared(t, func(t *testing.T, opts checkpoints.Options) (checkpoints.Store, checkpoints.Store) {
		dsn := testenv.Postgres(t)
		return open(t, dsn, opts), open(t, dsn, opts)
	})
}

// TestMigrateAtOnce opens several stores on one empty database at the same
// moment, as processes starting together would: every Open succeeds and the
// stores share one set of tables.
func TestMigrateAtOnce(t *testing.T) {
	dsn := testenv.Postgres(t)
	const n = 8
	stores := make([]*postgres.Store, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			stores[i], errs[i] = postgres.Open(t.Context(), dsn, checkpoints.Options{})
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		t.Cleanup(func() { _ = stores[i].Close() })
	}
	l, err := stores[0].AcquireWriter(t.Context(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	c := &checkpoints.Checkpoint{ID: "c1", ThreadID: "t1", Reason: checkpoints.ReasonAutomatic}
	if _, err := stores[1].Append(t.Context(), checkpoints.AppendInput{Checkpoint: c, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	if h, err := stores[n-1].Head(t.Context(), "t1"); err != nil || h != "c1" {
		t.Fatalf("Head from the last store = %q, %v; want c1", h, err)
	}
	// Opening again migrates nothing and keeps the data.
	if h, err := open(t, dsn, checkpoints.Options{}).Head(t.Context(), "t1"); err != nil || h != "c1" {
		t.Fatalf("Head after reopening = %q, %v; want c1", h, err)
	}
}

// TestDuplicateIDAcrossThreads: two writers of different threads insert the
// same checkpoint id at once; one wins and the other gets DUPLICATE_ID, never
// a driver error.
func TestDuplicateIDAcrossThreads(t *testing.T) {
	dsn := testenv.Postgres(t)
	a, b := open(t, dsn, checkpoints.Options{}), open(t, dsn, checkpoints.Options{})
	for round := range 20 {
		id := fmt.Sprintf("dup%d", round)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, s := range []*postgres.Store{a, b} {
			thread := fmt.Sprintf("t%d-%d", round, i)
			l, err := s.AcquireWriter(t.Context(), thread)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				c := &checkpoints.Checkpoint{ID: id, ThreadID: thread, Reason: checkpoints.ReasonAutomatic}
				_, errs[i] = s.Append(t.Context(), checkpoints.AppendInput{Checkpoint: c, Writer: l.Writer})
			}()
		}
		close(start)
		wg.Wait()
		ok, dup := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, checkpoints.ErrDuplicateID):
				dup++
			default:
				t.Fatalf("round %d: err = %v, want nil or DUPLICATE_ID", round, err)
			}
		}
		if ok != 1 || dup != 1 {
			t.Fatalf("round %d: %d appended, %d duplicates; want 1 and 1", round, ok, dup)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	_, err := postgres.Open(t.Context(), "postgres://u:secret@[::1", checkpoints.Options{})
	if !errors.Is(err, postgres.ErrInvalidConfig) {
		t.Fatalf("Open(malformed) = %v, want ErrInvalidConfig", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("error shows the password: %v", err)
	}
	// A port nothing listens on (connect refused at once).
	_, err = postgres.Open(t.Context(), "postgres://u:secret@127.0.0.1:1/db?connect_timeout=2", checkpoints.Options{})
	if err == nil {
		t.Fatal("Open(unreachable) succeeded")
	}
	if msg := err.Error(); strings.Contains(msg, "secret") || !strings.Contains(msg, "127.0.0.1:1") {
		t.Fatalf("Open(unreachable) = %v, want the address without the password", err)
	}
}

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://u:pw@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"postgres://h/db", "postgres://h/db"},
		{"host=h password=pw", "(dsn)"},
		{"", "(default dsn)"},
	}
	for _, tc := range tests {
		if got := postgres.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestLegacyRows reads and rewrites checkpoints that a store wrote before
// the contract's JSON, inserted here as their rows were.
func TestLegacyRows(t *testing.T) {
	checkpointtest.RunLegacy(t, func(t *testing.T, rows []checkpointtest.LegacyRow, opts checkpoints.Options) checkpoints.Store {
		dsn := testenv.Postgres(t)
		s := open(t, dsn, opts) // creates the tables
		conn, err := pgx.Connect(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		for _, r := range rows {
			if _, err := conn.Exec(t.Context(), `INSERT INTO alineo_checkpoints (id, thread_id, parent_id, created_at, body) VALUES ($1, $2, $3, $4, $5)`,
				r.ID, r.ThreadID, r.ParentID, r.CreatedAt, r.Body); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(t.Context(), `INSERT INTO alineo_checkpoint_heads (thread_id, head_id) VALUES ($1, $2)
				ON CONFLICT (thread_id) DO UPDATE SET head_id = excluded.head_id`, r.ThreadID, r.ID); err != nil {
				t.Fatal(err)
			}
			for k, n := range r.BlobRefs {
				if _, err := conn.Exec(t.Context(), `INSERT INTO alineo_checkpoint_blob_refs (checkpoint_id, blob_key, refs) VALUES ($1, $2, $3)`, r.ID, k, n); err != nil {
					t.Fatal(err)
				}
			}
		}
		return s
	})
}
