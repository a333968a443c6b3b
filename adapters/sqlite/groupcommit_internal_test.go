package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/internal/groupcommit"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

func startedEntry(id string) events.Entry {
	return events.New(1, "n", id, 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Kind: events.KindCommand, Cmd: "echo"})
}

// heldStore is a file store whose schema exists, whose commits are counted
// (entries per commit), and whose write lock another connection holds until
// release is called; queue makes n appends of sessions s-0.. s-(n-1) at once,
// which wait: one in its commit, the others queued behind it.
type heldStore struct {
	*Store
	path    string
	release func()
	mu      sync.Mutex
	commits []int
}

func newHeldStore(t *testing.T) *heldStore {
	t.Helper()
	path := filepath.Join(t.TempDir(), "l.db")
	s, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Append(t.Context(), startedEntry("first")); err != nil {
		t.Fatal(err)
	}
	h := &heldStore{Store: s, path: path}
	s.gc = groupcommit.New(func(ctx context.Context, appends [][]events.Entry) error {
		h.mu.Lock()
		h.commits = append(h.commits, len(appends))
		h.mu.Unlock()
		return s.commitAppends(ctx, appends)
	}, nil, groupcommit.Config{})
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	h.release = func() {
		if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
			t.Error(err)
		}
		conn.Close()
	}
	return h
}

func (h *heldStore) queue(t *testing.T, n int) []chan error {
	t.Helper()
	results := make([]chan error, n)
	for i := range n {
		results[i] = make(chan error, 1)
		go func() { results[i] <- h.Append(context.Background(), startedEntry(fmt.Sprint("s-", i))) }()
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if q := h.gc.Queued(); q != n-1 {
			return fmt.Errorf("%d appends queued, want %d", q, n-1)
		}
		return nil
	})
	return results
}

// checkRead checks that sessions s-0.. s-(n-1) each hold their entry in the
// file at path.
func checkRead(t *testing.T, path string, n int) {
	t.Helper()
	s, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range n {
		es, err := s.ReadAll(t.Context(), "n", fmt.Sprint("s-", i))
		if err != nil || len(es) != 1 {
			t.Fatalf("session s-%d: %d entries, %v; want 1", i, len(es), err)
		}
	}
}

// TestAppendsQueuedBehindACommitShareOne: appends of other sessions that
// arrive while a commit is in flight are committed together in the next one.
func TestAppendsQueuedBehindACommitShareOne(t *testing.T) {
	h := newHeldStore(t)
	results := h.queue(t, 5)
	h.release()
	for i, r := range results {
		if err := <-r; err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if got, want := h.commits, []int{1, 4}; !slices.Equal(got, want) {
		t.Fatalf("appends per commit = %v, want %v", got, want)
	}
	checkRead(t, h.path, 5)
}

// TestCloseCommitsQueuedAppends: Close, called while appends are queued
// behind a commit in flight, refuses new appends at once (ErrClosed), and
// returns once the queued ones are committed: none of them is lost.
func TestCloseCommitsQueuedAppends(t *testing.T) {
	h := newHeldStore(t)
	results := h.queue(t, 5)
	closed := make(chan error, 1)
	go func() { closed <- h.Close() }()
	testenv.Eventually(t, 5*time.Second, func() error {
		// Before Close starts, the append queues: its ctx drops it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		if err := h.Append(ctx, startedEntry("late")); !errors.Is(err, adapters.ErrClosed) {
			return fmt.Errorf("Append while closing = %v, want ErrClosed", err)
		}
		return nil
	})
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the queued appends were committed", err)
	default:
	}
	h.release()
	for i, r := range results {
		if err := <-r; err != nil {
			t.Fatalf("append %d: %v, want nil: accepted before Close", i, err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	checkRead(t, h.path, 5)
}
