package snapshots_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/sqlite"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
)

// A sandbox's workspace is checkpointed twice; the second checkpoint stores
// only the changed file, and the first one is restored elsewhere.
func ExampleManager() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "snapshots-example")
	defer os.RemoveAll(dir)

	store, err := sqlite.Open(ctx, filepath.Join(dir, "checkpoints.db"), checkpoints.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	blobs, err := snapshots.OpenBlobStore(filepath.Join(dir, "blobs"), snapshots.BlobConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	m := snapshots.NewManager(store, blobs, snapshots.ManagerConfig{})

	work := filepath.Join(dir, "workspace")
	_ = os.MkdirAll(filepath.Join(work, "node_modules"), 0o755)
	_ = os.WriteFile(filepath.Join(work, "node_modules", "dep.js"), []byte("module.exports = 1\n"), 0o644)
	_ = os.WriteFile(filepath.Join(work, "main.js"), []byte("v1\n"), 0o644)
	first, st1, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-1", Root: work, ID: "snap-1", Label: "installed"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = os.WriteFile(filepath.Join(work, "main.js"), []byte("v2, longer\n"), 0o644)
	second, st2, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-1", Root: work, ID: "snap-2"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(first.ID, first.Reason, st1.StoredBlobs, "blobs stored")
	fmt.Println(second.ID, "parent", second.ParentID, st2.StoredBlobs, "blob stored")

	dest := filepath.Join(dir, "restored")
	if err := m.Restore(ctx, "snap-1", dest, snapshots.RestoreOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	b, _ := os.ReadFile(filepath.Join(dest, "main.js"))
	fmt.Printf("restored main.js: %s", b)
	// Output:
	// snap-1 named 2 blobs stored
	// snap-2 parent snap-1 1 blob stored
	// restored main.js: v1
}
