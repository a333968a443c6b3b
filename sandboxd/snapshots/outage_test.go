package snapshots_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/memory"
	"github.com/alineo-labs/alineo/checkpoints/postgres"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
	"github.com/alineo-labs/alineo/testenv"
)

// TestCheckpointStoreOutage: the shared Postgres checkpoint store goes down
// in the middle of a snapshot, after the head was read and before the
// append (as in the multi-host soak's "stop Postgres"), and comes back a
// second later. The snapshot is taken again and succeeds, with the right
// parent, renewing the lease the failed attempt could not release rather
// than waiting an hour for it to expire; without retries it fails with
// ErrUnavailable and appends nothing.
func TestCheckpointStoreOutage(t *testing.T) {
	ctx := t.Context()
	pg := testenv.PostgresServer(t)
	store, err := postgres.Open(ctx, pg.DSN(), checkpoints.Options{LeaseDuration: time.Hour})
	must(t, err)
	t.Cleanup(func() { _ = store.Close() })
	src := filepath.Join(t.TempDir(), "src")
	buildTree(t, src)
	want := describe(t, src, true)

	// stopOnce stops Postgres during the first freeze and starts it again a
	// second later, in the background; wait waits for the restart.
	stopOnce := func(t *testing.T) (freeze func(context.Context) (func(), error), wait func()) {
		var (
			once    sync.Once
			started = make(chan error, 1)
		)
		freeze = func(context.Context) (func(), error) {
			once.Do(func() {
				must(t, pg.Stop())
				go func() {
					// The outage lasts a second: the attempts in it fail.
					<-time.After(time.Second)
					started <- pg.Start()
				}()
			})
			return func() {}, nil
		}
		return freeze, func() { must(t, <-started) }
	}

	m := snapshots.NewManager(store, openBlobs(t), snapshots.ManagerConfig{})
	first, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-outage", Root: src})
	must(t, err)

	t.Run("Retried", func(t *testing.T) {
		freeze, wait := stopOnce(t)
		ctx, cancel := context.WithTimeout(ctx, time.Minute) // not the lease's hour
		defer cancel()
		c, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-outage", Root: src, ID: "snap-retried", Freeze: freeze})
		wait()
		if err != nil {
			t.Fatalf("snapshot across a store outage: %v", err)
		}
		if c.ID != "snap-retried" || c.ParentID != first.ID {
			t.Fatalf("got checkpoint %s with parent %q, want snap-retried with parent %s", c.ID, c.ParentID, first.ID)
		}
		dest := filepath.Join(t.TempDir(), "dest")
		must(t, m.Restore(ctx, c.ID, dest, snapshots.RestoreOptions{}))
		diff(t, "restore", describe(t, dest, true), want)
	})

	t.Run("NoRetry", func(t *testing.T) {
		once := snapshots.NewManager(store, openBlobs(t), snapshots.ManagerConfig{StoreOutage: -1})
		freeze, wait := stopOnce(t)
		_, _, err := once.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-once", Root: src, ID: "snap-once", Freeze: freeze})
		wait()
		if !errors.Is(err, checkpoints.ErrUnavailable) {
			t.Fatalf("snapshot without retries during an outage: got %v, want an error wrapping ErrUnavailable", err)
		}
		if _, err := store.Get(ctx, "snap-once"); !errors.Is(err, checkpoints.ErrCheckpointNotFound) {
			t.Fatalf("the failed snapshot's checkpoint: got %v, want not found", err)
		}
	})
}

// lostAnswer is a checkpoint store whose first Append commits and then
// reports the store unavailable, as when the connection drops between the
// commit and its answer.
type lostAnswer struct {
	checkpoints.Store
	mu   sync.Mutex
	lost bool
}

func (s *lostAnswer) Append(ctx context.Context, in checkpoints.AppendInput) (string, error) {
	id, err := s.Store.Append(ctx, in)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || s.lost {
		return id, err
	}
	s.lost = true
	return "", fmt.Errorf("%w: commit: connection reset by peer", checkpoints.ErrUnavailable)
}

// TestSnapshotAnswerLost: an append that committed but whose answer was lost
// is found by its id when the snapshot is taken again: one checkpoint, not
// two, and not a duplicate-id failure.
func TestSnapshotAnswerLost(t *testing.T) {
	ctx := t.Context()
	store := &lostAnswer{Store: memory.New(checkpoints.Options{})}
	m := snapshots.NewManager(store, openBlobs(t), snapshots.ManagerConfig{})
	src := filepath.Join(t.TempDir(), "src")
	buildTree(t, src)
	c, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-lost", Root: src, ID: "snap-lost"})
	if err != nil {
		t.Fatalf("snapshot whose append's answer was lost: %v", err)
	}
	list, err := store.List(ctx, "sbx-lost")
	must(t, err)
	if len(list) != 1 || list[0].ID != "snap-lost" || c.ID != "snap-lost" {
		t.Fatalf("got %d checkpoints (%v), want snap-lost once", len(list), list)
	}
}
