package soak

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A soak directory with something still mounted below it is kept: removing
// it would descend into the mount.
func TestRemoveUnlessMountedKeepsAMountedDir(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "soak", "m")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(sub, syscall.MNT_DETACH) }) // before TempDir's removal
	if err := os.WriteFile(filepath.Join(sub, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dir: filepath.Join(dir, "soak"), Out: io.Discard}
	removeUnlessMounted(cfg)
	if _, err := os.Stat(filepath.Join(sub, "keep")); err != nil {
		t.Fatalf("a file inside the mount is gone: %v", err)
	}
	if err := syscall.Unmount(sub, 0); err != nil {
		t.Fatal(err)
	}
	removeUnlessMounted(cfg)
	if _, err := os.Stat(cfg.Dir); !os.IsNotExist(err) {
		t.Fatalf("unmounted dir not removed: %v", err)
	}
}
