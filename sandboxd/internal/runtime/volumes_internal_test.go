package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestVolumeDiskWaitsForItsImage: a volume's disk image still backing a
// loop device (its file system detached lazily, alive while a sandbox's
// mount of it is) is not mounted a second time, whose view would be stale
// and whose writes would corrupt the image: VolumeDisk waits for it, and
// mounts it once it is free.
func TestVolumeDiskWaitsForItsImage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop devices and mounts need root")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("no loop devices:", err)
	}
	dir := t.TempDir()
	img, first, second := filepath.Join(dir, "v.img"), filepath.Join(dir, "first"), filepath.Join(dir, "second")
	t.Cleanup(func() {
		_ = UnmountVolume(first)
		_ = UnmountVolume(second)
	})
	ctx := context.Background()
	if err := VolumeDisk(ctx, img, first, 16<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(first, "kept"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A descriptor on the file system keeps it alive past a lazy detach,
	// as a sandbox's mount does.
	held, err := os.Open(first)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := UnmountVolume(first); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = VolumeDisk(short, img, second, 0)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "still in use by /dev/loop") {
		t.Fatalf("mounting an image whose file system lives on: %v, want it still in use", err)
	}
	if ms := mountsUnder(second); len(ms) != 0 {
		t.Fatalf("mounted anyway: %v", ms)
	}
	held.Close()
	if err := VolumeDisk(ctx, img, second, 0); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(second, "kept")); err != nil || string(b) != "kept" {
		t.Fatalf("the volume mounted again holds %q (%v), want kept", b, err)
	}
}
