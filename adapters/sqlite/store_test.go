package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/testenv"
)

func created(ts int64, name, id string) events.Entry {
	return events.New(ts, name, id, -1, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: id})
}

func TestOpenValidates(t *testing.T) {
	tests := []struct {
		name string
		path string
		cfg  sqlite.Config
	}{
		{"empty path", "", sqlite.Config{}},
		{"uri", "file:x.db?mode=ro", sqlite.Config{}},
		{"negative busy timeout", "x.db", sqlite.Config{BusyTimeout: -time.Second}},
		{"bad synchronous", "x.db", sqlite.Config{Synchronous: "OFF"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := sqlite.Open(tt.path, tt.cfg); !errors.Is(err, sqlite.ErrInvalidConfig) {
				t.Fatalf("Open = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestOpenIsLazy(t *testing.T) {
	path := testenv.SQLitePath(t)
	s := open(t, path)
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Fatalf("Open created %s (err %v); want nothing until first use", filepath.Dir(path), err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Fatalf("Close of an unused store created its folder")
	}
	if _, err := s.ReadAll(t.Context(), "a", "b"); !errors.Is(err, adapters.ErrClosed) {
		t.Fatalf("ReadAll after Close = %v, want ErrClosed", err)
	}
}

func TestFirstUseCreatesFoldersAndWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "c", "ledger.db")
	s := open(t, path)
	if err := s.Append(t.Context(), created(1, "n", "id")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Fatalf("no WAL file after first use: %v", err)
	}
}

func TestConcurrentFirstUse(t *testing.T) {
	s := open(t, testenv.SQLitePath(t))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Append(t.Context(), created(int64(i+1), "n", fmt.Sprint(i))); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all, err := s.ListAllSandboxDetails(t.Context(), adapters.ListOptions{})
	if err != nil || len(all) != 16 {
		t.Fatalf("ListAllSandboxDetails = %d sessions, %v; want 16", len(all), err)
	}
}

func TestFailedInitIsRetried(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "data")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil { // a file where the folder should be
		t.Fatal(err)
	}
	s := open(t, filepath.Join(blocker, "ledger.db"))
	err := s.Append(t.Context(), created(1, "n", "id"))
	if err == nil {
		t.Fatal("Append under a file succeeded, want an error")
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(t.Context(), created(1, "n", "id")); err != nil {
		t.Fatalf("Append after the obstacle is gone = %v, want nil", err)
	}
}

// TestTwoStoresSameFile opens two stores (as two processes would) on one new
// file at the same moment, in a folder neither has created yet.
func TestTwoStoresSameFile(t *testing.T) {
	for round := range 5 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			path := testenv.SQLitePath(t)
			stores := []*sqlite.Store{open(t, path), open(t, path)}
			var wg sync.WaitGroup
			errs := make(chan error, 2*50)
			start := make(chan struct{})
			for i, s := range stores {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for j := range 50 {
						id := fmt.Sprintf("sbx-%d", i)
						var err error
						if j == 0 {
							err = s.Append(t.Context(), created(1, "n", id))
						} else {
							err = s.Append(t.Context(), events.New(int64(1+j), "n", id, 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1}))
						}
						if err != nil {
							errs <- fmt.Errorf("store %d append %d: %w", i, j, err)
							return
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for _, s := range stores {
				all, err := s.ListAllSandboxDetails(t.Context(), adapters.ListOptions{})
				if err != nil || len(all) != 2 || all[0].ExecCount != 49 || all[1].ExecCount != 49 {
					t.Fatalf("ListAllSandboxDetails = %+v, %v; want 2 sessions with 49 execs", all, err)
				}
			}
		})
	}
}

func TestMemoryIsOneDatabase(t *testing.T) {
	s := open(t, sqlite.Memory)
	if err := s.Append(t.Context(), created(1, "n", "id")); err != nil {
		t.Fatal(err)
	}
	// Many concurrent readers and writers all see the same database.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Append(t.Context(), created(int64(i+2), "n", fmt.Sprint(i))); err != nil {
				t.Error(err)
			}
			if es, err := s.ReadAll(t.Context(), "n", "id"); err != nil || len(es) != 1 {
				t.Errorf("ReadAll = %d entries, %v; want 1", len(es), err)
			}
		}()
	}
	wg.Wait()
	all, err := s.ListAllSandboxDetails(t.Context(), adapters.ListOptions{})
	if err != nil || len(all) != 9 {
		t.Fatalf("ListAllSandboxDetails = %d, %v; want 9", len(all), err)
	}
	other := open(t, sqlite.Memory)
	if all, err := other.ListAllSandboxDetails(t.Context(), adapters.ListOptions{}); err != nil || len(all) != 0 {
		t.Fatalf("a second in-memory store sees %d sessions, %v; want its own empty database", len(all), err)
	}
}

func TestCloseDuringUse(t *testing.T) {
	s := open(t, testenv.SQLitePath(t))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ctx.Err() == nil; j++ {
				err := s.Append(ctx, created(int64(j+1), "n", fmt.Sprint(i, "-", j)))
				if errors.Is(err, adapters.ErrClosed) {
					return
				}
				if err != nil && ctx.Err() == nil {
					t.Errorf("Append = %v, want nil or ErrClosed", err)
					return
				}
			}
		}()
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		all, err := s.ListAllSandboxDetails(ctx, adapters.ListOptions{Limit: 10})
		if err == nil && len(all) < 10 {
			err = fmt.Errorf("%d sessions so far", len(all))
		}
		return err
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// TestApplyBatchAtomic makes the offset write fail after the rows went in: the
// rows must roll back with it.
func TestApplyBatchAtomic(t *testing.T) {
	path := testenv.SQLitePath(t)
	s := open(t, path)
	c := t.Context()
	if _, err := s.Offset(c, "x"); err != nil { // first use: migrate
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`CREATE TRIGGER poison BEFORE INSERT ON alineo_projection_offsets
		WHEN NEW.consumer = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned'); END`); err != nil {
		t.Fatal(err)
	}
	e := created(1, "n", "id")
	e.Seq = 7
	if err := s.ApplyBatch(c, "poison", []events.Entry{e}, 7); err == nil {
		t.Fatal("ApplyBatch with a failing offset write succeeded")
	}
	if es, err := s.ReadAll(c, "n", "id"); err != nil || len(es) != 0 {
		t.Fatalf("ReadAll = %d entries, %v; want none after the failed batch", len(es), err)
	}
	if d, err := s.GetSandboxDetails(c, "n", "id"); err != nil || d != nil {
		t.Fatalf("GetSandboxDetails = %+v, %v; want nil after the failed batch", d, err)
	}
	if err := s.ApplyBatch(c, "good", []events.Entry{e}, 7); err != nil {
		t.Fatalf("the same entry under another consumer = %v, want it stored", err)
	}
	if es, err := s.ReadAll(c, "n", "id"); err != nil || len(es) != 1 || es[0].Seq != 7 {
		t.Fatalf("ReadAll = %+v, %v; want the entry with Seq 7", es, err)
	}
}

// TestCloseCommitsWhatItAccepted closes the store while sessions append at
// once: every append ends with nil or ErrClosed, and every one that ended
// with nil is in the file, read back by a new store.
func TestCloseCommitsWhatItAccepted(t *testing.T) {
	path := testenv.SQLitePath(t)
	s := open(t, path)
	const sessions = 16
	var wg sync.WaitGroup
	accepted := make([]int, sessions) // appends of each session that returned nil
	begun := make(chan struct{}, sessions)
	for n := range sessions {
		wg.Go(func() {
			for i := 1; ; i++ {
				err := s.Append(context.Background(), events.New(int64(i), "n", fmt.Sprint("s-", n), i, events.ExecStarted,
					events.ExecStartedPayload{Seq: i, Kind: events.KindCommand, Cmd: "echo"}))
				if i == 1 {
					begun <- struct{}{}
				}
				if err != nil {
					if !errors.Is(err, adapters.ErrClosed) {
						t.Errorf("session %d append %d = %v, want nil or ErrClosed", n, i, err)
					}
					return
				}
				accepted[n] = i
			}
		})
	}
	for range sessions {
		<-begun
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	again := open(t, path)
	for n := range sessions {
		es, err := again.ReadAll(t.Context(), "n", fmt.Sprint("s-", n))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(es), accepted[n]; got != want {
			t.Errorf("session %d: %d entries in the file, want the %d appends that returned nil", n, got, want)
		}
	}
}

// TestAppendErrorIsItsOwn: a trigger refuses every row of one session while
// others append at once, in shared transactions; only that session's
// appends fail.
func TestAppendErrorIsItsOwn(t *testing.T) {
	path := testenv.SQLitePath(t)
	s := open(t, path)
	if err := s.Append(t.Context(), created(1, "n", "first")); err != nil { // creates the schema
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), `CREATE TRIGGER refuse BEFORE INSERT ON alineo_events
		WHEN NEW.sandbox_id = 'refused' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`); err != nil {
		t.Fatal(err)
	}
	adaptertest.AppendErrorIsItsOwn(t, s, "refused")
}

// TestAppendStartsNoGoroutinePerStatement: an append whose ctx can end
// starts no more goroutines than one whose ctx cannot. The driver watches a
// statement's ctx with a goroutine of its own (three a commit: an SDK's
// every write has a deadline), and a commit does not run its statements
// under the caller's ctx.
func TestAppendStartsNoGoroutinePerStatement(t *testing.T) {
	s := open(t, testenv.SQLitePath(t))
	const n = 100
	perAppend := func(ctx func() (context.Context, context.CancelFunc), from int) float64 {
		g0 := testutil.GoroutinesCreated()
		for i := from; i < from+n; i++ {
			c, cancel := ctx()
			e := events.New(int64(i), "n", "s", i, events.ExecStarted, events.ExecStartedPayload{Seq: i, Cmd: "true"})
			err := s.AppendBatch(c, []events.Entry{e})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		}
		return float64(testutil.GoroutinesCreated()-g0) / n
	}
	background := func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }
	deadline := func() (context.Context, context.CancelFunc) { return context.WithTimeout(t.Context(), time.Minute) }
	perAppend(background, 1) // warm-up: the statements prepared
	without := perAppend(background, 1+n)
	with := perAppend(deadline, 1+2*n)
	if with > without+0.5 {
		t.Fatalf("an append with a deadline starts %.2f goroutines, one without %.2f", with, without)
	}
	if got, err := s.ReadAll(t.Context(), "n", "s"); err != nil || len(got) != 3*n {
		t.Fatalf("ReadAll = %d entries, %v; want %d", len(got), err, 3*n)
	}
}
