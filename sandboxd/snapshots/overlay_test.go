package snapshots_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
)

func mountOverlay(t *testing.T, lower, upper, work, merged string) func() {
	t.Helper()
	for _, d := range []string{upper, work, merged} {
		must(t, os.MkdirAll(d, 0o755))
	}
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Skipf("cannot mount overlayfs here (needs root): %v", err)
	}
	unmounted := false
	unmount := func() {
		if !unmounted {
			unmounted = true
			must(t, unix.Unmount(merged, 0))
		}
	}
	t.Cleanup(unmount)
	return unmount
}

// TestOverlayUpperDir captures a sandbox's overlay upper dir after deletions,
// changes and an opaque directory, then reproduces the merged tree two ways:
// applying the snapshot onto a copy of the lower layer, and restoring it as a
// new upper dir (whiteouts kept) under a fresh overlay mount.
func TestOverlayUpperDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("overlayfs whiteouts need root")
	}
	ctx := context.Background()
	base := t.TempDir()
	lower := filepath.Join(base, "lower")
	write(t, lower, "a", "deleted in the upper layer", 0o644)
	write(t, lower, "b", "changed in the upper layer", 0o644)
	write(t, lower, "d/x", "hidden by an opaque dir", 0o644)
	write(t, lower, "d/y", "hidden by an opaque dir", 0o644)
	write(t, lower, "e/z", "deleted", 0o644)
	write(t, lower, "e/keep", "kept", 0o644)
	backdate(t, lower)

	upper, merged := filepath.Join(base, "upper"), filepath.Join(base, "merged")
	unmount := mountOverlay(t, lower, upper, filepath.Join(base, "work"), merged)
	must(t, os.Remove(filepath.Join(merged, "a")))
	write(t, merged, "b", "new b", 0o600)
	must(t, os.RemoveAll(filepath.Join(merged, "d")))
	write(t, merged, "d/new", "new in opaque d", 0o644)
	must(t, os.Remove(filepath.Join(merged, "e/z")))
	write(t, merged, "c", "added", 0o644)
	must(t, os.Symlink("c", filepath.Join(merged, "c-link")))
	want := describe(t, merged, true)
	unmount()

	blobs := openBlobs(t)
	entries, st, err := snapshots.Capture(ctx, upper, nil, blobs, snapshots.CaptureOptions{})
	if err != nil {
		t.Fatalf("Capture(upper): %v", err)
	}
	if st.Whiteouts != 2 {
		t.Fatalf("whiteouts = %d, want 2 (a and e/z)", st.Whiteouts)
	}
	byPath := map[string]checkpoints.Entry{}
	for _, e := range entries {
		byPath[e.Path] = e
	}
	if e := byPath["a"]; e.Kind != checkpoints.KindWhiteout {
		t.Fatalf("a = %+v, want a whiteout", e)
	}
	if e := byPath["d"]; e.Kind != checkpoints.KindDir || !e.Opaque {
		t.Fatalf("d = %+v, want an opaque dir", e)
	}

	// 1. Applied onto a copy of the lower layer.
	lowerEntries, _, err := snapshots.Capture(ctx, lower, nil, blobs, snapshots.CaptureOptions{})
	must(t, err)
	flat := filepath.Join(base, "flat")
	must(t, snapshots.Restore(ctx, lowerEntries, blobs, flat, snapshots.RestoreOptions{}))
	must(t, snapshots.Restore(ctx, entries, blobs, flat, snapshots.RestoreOptions{Whiteouts: snapshots.ApplyWhiteouts}))
	diff(t, "lower + applied upper", describe(t, flat, true), want)

	// 2. Restored as a new upper dir over the same lower layer.
	upper2, merged2 := filepath.Join(base, "upper2"), filepath.Join(base, "merged2")
	must(t, snapshots.Restore(ctx, entries, blobs, upper2, snapshots.RestoreOptions{Whiteouts: snapshots.KeepWhiteouts}))
	mountOverlay(t, lower, upper2, filepath.Join(base, "work2"), merged2)
	diff(t, "overlay with restored upper", describe(t, merged2, true), want)
}

// TestRefusesDependentOverlayEntries: an upper dir written with metacopy or
// redirect_dir cannot be snapshotted on its own; Capture says so.
func TestRefusesDependentOverlayEntries(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("trusted.* xattrs need root")
	}
	for _, name := range []string{"trusted.overlay.metacopy", "trusted.overlay.redirect"} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, "d/f", "x", 0o644)
			target := filepath.Join(root, "d/f")
			if name == "trusted.overlay.redirect" {
				target = filepath.Join(root, "d")
			}
			if err := unix.Lsetxattr(target, name, []byte("y"), 0); err != nil {
				t.Skipf("cannot set %s here: %v", name, err)
			}
			_, _, err := snapshots.Capture(context.Background(), root, nil, openBlobs(t), snapshots.CaptureOptions{})
			if !errors.Is(err, snapshots.ErrUnsupportedOverlay) {
				t.Fatalf("Capture err = %v, want ErrUnsupportedOverlay", err)
			}
		})
	}
}
