package sqlite_test

import (
	"context"
	"database/sql"
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

// TestLegacyRows reads and rewrites checkpoints that a store wrote before
// the contract's JSON, inserted here as their rows were.
func TestLegacyRows(t *testing.T) {
	checkpointtest.RunLegacy(t, func(t *testing.T, rows []checkpointtest.LegacyRow, opts checkpoints.Options) checkpoints.Store {
		path := filepath.Join(t.TempDir(), "legacy.db")
		s := open(t, path, opts) // creates the tables
		db, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, r := range rows {
			if _, err := db.Exec(`INSERT INTO alineo_checkpoints (id, thread_id, parent_id, created_at, body) VALUES (?, ?, ?, ?, ?)`,
				r.ID, r.ThreadID, r.ParentID, r.CreatedAt, r.Body); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`INSERT INTO alineo_checkpoint_heads (thread_id, head_id) VALUES (?, ?)
				ON CONFLICT (thread_id) DO UPDATE SET head_id = excluded.head_id`, r.ThreadID, r.ID); err != nil {
				t.Fatal(err)
			}
			for k, n := range r.BlobRefs {
				if _, err := db.Exec(`INSERT INTO alineo_checkpoint_blob_refs (checkpoint_id, blob_key, refs) VALUES (?, ?, ?)`, r.ID, k, n); err != nil {
					t.Fatal(err)
				}
			}
		}
		return s
	})
}
