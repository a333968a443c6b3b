package snapshots_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
)

// FuzzRestoreStaysInside restores manifests with arbitrary paths, kinds and
// symlink targets, and checks nothing is ever written outside dest, however
// the manifest is rejected or accepted. Absolute symlink targets are moved
// into a canary directory that must stay empty.
func FuzzRestoreStaysInside(f *testing.F) {
	f.Add("a", "symlink", "..", "a/b", "file")
	f.Add("../x", "file", "", "y", "dir")
	f.Add("l", "symlink", "/", "l/etc", "dir")
	f.Add("d", "dir", "", "d/../../x", "file")
	f.Add("w", "whiteout", "", "w", "file")
	blobs := openBlobs(f)
	key, _, err := blobs.Put(context.Background(), strings.NewReader("data"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p1, k1, target, p2, k2 string) {
		base := t.TempDir()
		dest := filepath.Join(base, "dest")
		canary := filepath.Join(base, "canary")
		if err := os.Mkdir(canary, 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(target, "/") {
			target = canary + target // absolute targets point into the canary
		}
		mk := func(p, k string) checkpoints.Entry {
			e := checkpoints.Entry{Path: p, Kind: checkpoints.Kind(k), Mode: 0o755}
			switch e.Kind {
			case checkpoints.KindFile:
				e.BlobKey, e.Size, e.Mode = key, 4, 0o644
			case checkpoints.KindSymlink:
				e.Target, e.Mode = target, 0
			case checkpoints.KindWhiteout:
				e.Mode = 0
			}
			return e
		}
		_ = snapshots.Restore(context.Background(), []checkpoints.Entry{mk(p1, k1), mk(p2, k2)}, blobs, dest, snapshots.RestoreOptions{})
		ents, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Name() != "dest" && e.Name() != "canary" {
				t.Fatalf("restore of %q (%s), %q (%s) wrote %q outside dest", p1, k1, p2, k2, e.Name())
			}
		}
		if ents, _ := os.ReadDir(canary); len(ents) != 0 {
			t.Fatalf("restore of %q (%s), %q (%s) wrote through a symlink to %q", p1, k1, p2, k2, target)
		}
	})
}
