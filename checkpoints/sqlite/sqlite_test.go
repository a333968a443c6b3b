package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/checkpointtest"
	"github.com/alineo-labs/alineo/checkpoints/sqlite"
)

func open(t *testing.T, path string, opts checkpoints.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	checkpointtest.Run(t, func(t *testing.T, opts checkpoints.Options) checkpoints.Store {
		return open(t, filepath.Join(t.TempDir(), "ckpt.db"), opts)
	})
}

// TestSharedFile runs the concurrency cases over two stores on one file, as two
// processes would.
func TestSharedFile(t *testing.T) {
	checkpointtest.RunShared(t, func(t *testing.T, opts checkpoints.Options) (checkpoints.Store, checkpoints.Store) {
		path := filepath.Join(t.TempDir(), "shared.db")
		return open(t, path, opts), open(t, path, opts)
	})
}

// TestReopen checks that checkpoints, heads, fences and references survive
// closing and reopening the file.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ckpt.db")
	clock := checkpointtest.NewClock()
	opts := checkpoints.Options{Now: clock.Now}
	s := open(t, path, opts)
	l, err := s.AcquireWriter(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	c := &checkpoints.Checkpoint{ID: "c1", ThreadID: "t1", Reason: checkpoints.ReasonNamed,
		Files: []checkpoints.Entry{{Path: "a", Kind: checkpoints.KindFile, BlobKey: "k1", Size: 3}}}
	if _, err := s.Append(ctx, checkpoints.AppendInput{Checkpoint: c, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := open(t, path, opts)
	if h, err := s2.Head(ctx, "t1"); err != nil || h != "c1" {
		t.Fatalf("Head after reopen = %q, %v; want c1", h, err)
	}
	got, err := s2.Get(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Files[0].BlobKey != "k1" || !got.CreatedAt.Equal(checkpoints.TruncateTime(clock.Now())) {
		t.Fatalf("Get after reopen = %+v", got)
	}
	l2, err := s2.AcquireWriter(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence <= l.Fence {
		t.Fatalf("fence after reopen = %d, want > %d", l2.Fence, l.Fence)
	}
	refs, err := s2.ListBlobReferences(ctx)
	if err != nil || len(refs) != 1 || refs[0] != (checkpoints.BlobRef{Key: "k1", References: 1}) {
		t.Fatalf("refs after reopen = %v, %v", refs, err)
	}
}
