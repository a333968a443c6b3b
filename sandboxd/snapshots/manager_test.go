package snapshots_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/checkpointtest"
	"github.com/alineo-labs/alineo/checkpoints/memory"
	"github.com/alineo-labs/alineo/checkpoints/sqlite"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
)

func newManager(t testing.TB) *snapshots.Manager {
	t.Helper()
	return snapshots.NewManager(memory.New(checkpoints.Options{}), openBlobs(t), snapshots.ManagerConfig{})
}

func TestManagerSnapshotRestore(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	src := filepath.Join(t.TempDir(), "src")
	buildTree(t, src)
	backdate(t, src)
	before := describe(t, src, true)

	c1, st1, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-1", Root: src, Label: "base", SourceRunID: "run-7"})
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if c1.ParentID != "" || c1.Reason != checkpoints.ReasonNamed || c1.Label != "base" || c1.SourceRunID != "run-7" || !strings.HasPrefix(c1.ID, "snap-") {
		t.Fatalf("first snapshot = %+v", c1)
	}
	if st1.StoredBlobs == 0 {
		t.Fatalf("first snapshot stored nothing: %+v", st1)
	}

	write(t, src, "README.md", "changed\n", 0o644)
	c2, st2, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-1", Root: src, ID: "snap-two"})
	if err != nil {
		t.Fatal(err)
	}
	if c2.ID != "snap-two" || c2.ParentID != c1.ID || c2.Reason != checkpoints.ReasonAutomatic {
		t.Fatalf("second snapshot = id %s parent %s reason %s; want snap-two, %s, automatic", c2.ID, c2.ParentID, c2.Reason, c1.ID)
	}
	// README.md and hardlink.md are two names of one inode: both changed.
	if st2.StoredBlobs != 1 || st2.HashedFiles != 2 {
		t.Fatalf("second snapshot stats = %+v, want 2 files hashed and 1 blob stored", st2)
	}
	after := describe(t, src, true)

	for _, tc := range []struct{ id, want string }{{c1.ID, before}, {c2.ID, after}} {
		dest := filepath.Join(t.TempDir(), "dest")
		if err := m.Restore(ctx, tc.id, dest, snapshots.RestoreOptions{}); err != nil {
			t.Fatalf("Restore(%s): %v", tc.id, err)
		}
		diff(t, "restore of "+tc.id, describe(t, dest, true), tc.want)
	}
	err = m.Restore(ctx, "nope", t.TempDir(), snapshots.RestoreOptions{})
	if !errors.Is(err, checkpoints.ErrCheckpointNotFound) {
		t.Fatalf("Restore(unknown) err = %v, want ErrCheckpointNotFound", err)
	}
	_, _, err = m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-1", Root: src, ID: c1.ID})
	if !errors.Is(err, checkpoints.ErrDuplicateID) {
		t.Fatalf("Snapshot with a used id: err = %v, want ErrDuplicateID", err)
	}
	_, _, err = m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "bad/thread", Root: src})
	if !errors.Is(err, checkpoints.ErrInvalidID) {
		t.Fatalf("Snapshot with a bad thread: err = %v, want ErrInvalidID", err)
	}
	// A failed snapshot released its lease: the next one works.
	if _, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-1", Root: src}); err != nil {
		t.Fatalf("Snapshot after failures: %v", err)
	}
}

// TestConcurrentSnapshots runs concurrent Snapshot calls on one thread, in one
// Manager and in two Managers over one SQLite file and blob directory (two
// processes): every call succeeds and the thread is one chain.
func TestConcurrentSnapshots(t *testing.T) {
	ctx := context.Background()
	shared := func(t *testing.T) []*snapshots.Manager {
		dir := t.TempDir()
		var ms []*snapshots.Manager
		for i := 0; i < 2; i++ {
			s, err := sqlite.Open(ctx, filepath.Join(dir, "ckpt.db"), checkpoints.Options{})
			must(t, err)
			t.Cleanup(func() { _ = s.Close() })
			b, err := snapshots.OpenBlobStore(filepath.Join(dir, "blobs"), snapshots.BlobConfig{NoSync: true})
			must(t, err)
			ms = append(ms, snapshots.NewManager(s, b, snapshots.ManagerConfig{}))
		}
		return ms
	}
	for _, tc := range []struct {
		name     string
		managers func(t *testing.T) []*snapshots.Manager
	}{
		{"OneManager", func(t *testing.T) []*snapshots.Manager { return []*snapshots.Manager{newManager(t)} }},
		{"TwoManagersOneFile", shared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := tc.managers(t)
			src := t.TempDir()
			write(t, src, "a.txt", "a", 0o644)
			const n = 8
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					_, _, err := ms[i%len(ms)].Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src, ID: fmt.Sprintf("s%d", i)})
					errs <- err
				}(i)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("Snapshot: %v", err)
				}
			}
			list, err := ms[0].Store().List(ctx, "t")
			must(t, err)
			if len(list) != n {
				t.Fatalf("thread has %d checkpoints, want %d", len(list), n)
			}
			for i, c := range list {
				want := ""
				if i > 0 {
					want = list[i-1].ID
				}
				if c.ParentID != want {
					t.Fatalf("checkpoint %d (%s) parent = %q, want %q", i, c.ID, c.ParentID, want)
				}
			}
			head, _ := ms[len(ms)-1].Store().Head(ctx, "t")
			if head != list[n-1].ID {
				t.Fatalf("head = %s, want %s", head, list[n-1].ID)
			}
		})
	}
}

func blobKeys(t *testing.T, b *snapshots.BlobStore) []string {
	t.Helper()
	infos, err := b.List(context.Background())
	must(t, err)
	var keys []string
	for _, i := range infos {
		keys = append(keys, i.Key)
	}
	return keys
}

func fileKeys(c *checkpoints.Checkpoint) map[string]bool {
	m := map[string]bool{}
	for _, k := range c.BlobKeys() {
		m[k] = true
	}
	return m
}

func TestDeleteAndGC(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	src := t.TempDir()
	write(t, src, "keep", "kept in both", 0o644)
	write(t, src, "change", "version 1", 0o644)
	backdate(t, src)
	c1, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src})
	must(t, err)
	write(t, src, "change", "version 2", 0o644)
	write(t, src, "new", "only in the second", 0o644)
	c2, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src})
	must(t, err)
	// A stray blob nobody references.
	stray, _, err := m.Blobs().Put(ctx, strings.NewReader("stray"))
	must(t, err)

	st, err := m.GC(ctx)
	must(t, err)
	if st.Deleted != 1 {
		t.Fatalf("GC deleted %d, want 1 (the stray blob)", st.Deleted)
	}
	if has, _ := m.Blobs().Has(ctx, stray); has {
		t.Fatal("stray blob survived GC")
	}

	if err := m.Delete(ctx, "nope"); !errors.Is(err, checkpoints.ErrCheckpointNotFound) {
		t.Fatalf("Delete(unknown) err = %v, want ErrCheckpointNotFound", err)
	}
	must(t, m.Delete(ctx, c2.ID))
	st, err = m.GC(ctx)
	must(t, err)
	k1, k2 := fileKeys(c1), fileKeys(c2)
	var want []string
	for k := range k1 {
		want = append(want, k)
	}
	sort.Strings(want)
	wantDeleted := 0
	for k := range k2 {
		if !k1[k] {
			wantDeleted++
		}
	}
	if got := blobKeys(t, m.Blobs()); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("blobs after GC = %v, want exactly the first snapshot's %v", got, want)
	}
	if st.Deleted != wantDeleted || wantDeleted != 2 {
		t.Fatalf("GC deleted %d, want %d (2)", st.Deleted, wantDeleted)
	}
	// The first snapshot still restores.
	dest := t.TempDir()
	must(t, m.Restore(ctx, c1.ID, dest, snapshots.RestoreOptions{}))
	if b, _ := os.ReadFile(filepath.Join(dest, "change")); string(b) != "version 1" {
		t.Fatalf("restored change = %q, want version 1", b)
	}
	must(t, m.Delete(ctx, c1.ID))
	_, err = m.GC(ctx)
	must(t, err)
	if got := blobKeys(t, m.Blobs()); len(got) != 0 {
		t.Fatalf("blobs after deleting everything = %v, want none", got)
	}
}

func TestFork(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	src := t.TempDir()
	write(t, src, "f", "base", 0o644)
	c1, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "parent", Root: src, Label: "base"})
	must(t, err)
	f, err := m.Fork(ctx, c1.ID, "child", "")
	must(t, err)
	if f.ThreadID != "child" || f.Reason != checkpoints.ReasonForkRoot || f.ForkedFrom != c1.ID || f.ParentID != "" {
		t.Fatalf("fork-root = %+v", f)
	}
	dest := t.TempDir()
	must(t, m.Restore(ctx, f.ID, dest, snapshots.RestoreOptions{}))
	if b, _ := os.ReadFile(filepath.Join(dest, "f")); string(b) != "base" {
		t.Fatalf("forked file = %q", b)
	}
	// The child continues from its fork-root.
	write(t, dest, "f", "child", 0o644)
	c2, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "child", Root: dest})
	must(t, err)
	if c2.ParentID != f.ID {
		t.Fatalf("child snapshot parent = %s, want %s", c2.ParentID, f.ID)
	}
	if _, err := m.Fork(ctx, c1.ID, "child", ""); !errors.Is(err, checkpoints.ErrForkDestinationNotEmpty) {
		t.Fatalf("second fork into child: err = %v, want ErrForkDestinationNotEmpty", err)
	}
}

// TestDeleteMiddle deletes a snapshot that is not the head: the later one
// keeps its content and its blobs survive GC.
func TestDeleteMiddle(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	src := t.TempDir()
	write(t, src, "f", "one", 0o644)
	c1, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src})
	must(t, err)
	write(t, src, "f", "two", 0o644)
	c2, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src})
	must(t, err)
	write(t, src, "g", "three", 0o644)
	c3, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src})
	must(t, err)
	must(t, m.Delete(ctx, c2.ID))
	got, err := m.Store().Get(ctx, c3.ID)
	must(t, err)
	if got.ParentID != c1.ID {
		t.Fatalf("c3 parent = %s, want %s", got.ParentID, c1.ID)
	}
	_, err = m.GC(ctx)
	must(t, err)
	dest := t.TempDir()
	must(t, m.Restore(ctx, c3.ID, dest, snapshots.RestoreOptions{}))
	if b, _ := os.ReadFile(filepath.Join(dest, "f")); string(b) != "two" {
		t.Fatalf("f = %q, want two", b)
	}
}

// TestFreezeWrapsCapture checks the freeze hook runs around the capture only.
func TestFreezeWrapsCapture(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	src := t.TempDir()
	write(t, src, "f", "x", 0o644)
	var events []string
	c, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src, Freeze: func(context.Context) (func(), error) {
		events = append(events, "freeze")
		// Written inside the hook: the capture runs after it and sees it.
		write(t, src, "while-frozen", "y", 0o644)
		return func() { events = append(events, "thaw") }, nil
	}})
	must(t, err)
	if got := strings.Join(events, ","); got != "freeze,thaw" {
		t.Fatalf("hook calls = %s, want freeze,thaw", got)
	}
	if len(c.Files) != 2 || c.Files[1].Path != "while-frozen" {
		t.Fatalf("files = %+v, want f and while-frozen", c.Files)
	}
	boom := errors.New("cgroup gone")
	_, _, err = m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src, Freeze: func(context.Context) (func(), error) { return nil, boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("Snapshot with failing freeze: err = %v, want %v", err, boom)
	}
	list, _ := m.Store().List(ctx, "t")
	if len(list) != 1 {
		t.Fatalf("thread has %d snapshots, want 1", len(list))
	}
}

// TestSupersededWriterFails: when another writer takes over the thread while
// a snapshot captures (its lease expired), the snapshot fails with
// ErrWriterLost and appends nothing.
func TestSupersededWriterFails(t *testing.T) {
	ctx := context.Background()
	clock := checkpointtest.NewClock()
	store := memory.New(checkpoints.Options{Now: clock.Now, LeaseDuration: time.Minute})
	m := snapshots.NewManager(store, openBlobs(t), snapshots.ManagerConfig{})
	src := t.TempDir()
	write(t, src, "f", "x", 0o644)
	_, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src, Freeze: func(ctx context.Context) (func(), error) {
		clock.Advance(2 * time.Minute)
		if _, err := store.AcquireWriter(ctx, "t"); err != nil {
			return nil, err
		}
		return func() {}, nil
	}})
	if !errors.Is(err, checkpoints.ErrWriterLost) {
		t.Fatalf("Snapshot by a superseded writer: err = %v, want ErrWriterLost", err)
	}
	if h, _ := store.Head(ctx, "t"); h != "" {
		t.Fatalf("head = %q, want none", h)
	}
}

// TestWaitingSnapshotHonoursCtx: a snapshot waiting for another one of the
// same thread gives up when its ctx ends.
func TestWaitingSnapshotHonoursCtx(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	src := t.TempDir()
	write(t, src, "f", "x", 0o644)
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src, Freeze: func(context.Context) (func(), error) {
			close(started)
			<-release
			return func() {}, nil
		}})
		done <- err
	}()
	<-started
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := m.Snapshot(cctx, snapshots.SnapshotInput{ThreadID: "t", Root: src}); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting Snapshot with a cancelled ctx: err = %v, want context.Canceled", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("first Snapshot: %v", err)
	}
	if _, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src}); err != nil {
		t.Fatalf("Snapshot after both: %v", err)
	}
}

// TestSurvivesRestart: snapshots in a SQLite store and a blob directory are
// there after the Manager (sandboxd) restarts, and the next snapshot still
// re-uses the blobs of the last one.
func TestSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() (*snapshots.Manager, func()) {
		s, err := sqlite.Open(ctx, filepath.Join(dir, "ckpt.db"), checkpoints.Options{})
		must(t, err)
		b, err := snapshots.OpenBlobStore(filepath.Join(dir, "blobs"), snapshots.BlobConfig{})
		must(t, err)
		return snapshots.NewManager(s, b, snapshots.ManagerConfig{}), func() { must(t, s.Close()) }
	}
	src := filepath.Join(t.TempDir(), "src")
	buildTree(t, src)
	backdate(t, src)
	want := describe(t, src, true)
	m, closeStore := open()
	c1, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx", Root: src})
	must(t, err)
	closeStore()

	m, closeStore = open()
	defer closeStore()
	dest := filepath.Join(t.TempDir(), "dest")
	must(t, m.Restore(ctx, c1.ID, dest, snapshots.RestoreOptions{}))
	diff(t, "restore after restart", describe(t, dest, true), want)
	c2, st, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx", Root: src})
	must(t, err)
	if c2.ParentID != c1.ID || st.HashedFiles != 0 || st.ReusedFiles != st.Files {
		t.Fatalf("snapshot after restart: parent %s, stats %+v; want parent %s and every file re-used", c2.ParentID, st, c1.ID)
	}
}
