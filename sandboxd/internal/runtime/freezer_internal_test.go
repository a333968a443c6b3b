package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestFreezerFiles runs freezer.set on files standing in for a group's (a
// real v1 freezer is TestPauseFreezes's): what it writes, the state it waits
// for in either version, and a freeze that never settles, which is undone.
func TestFreezerFiles(t *testing.T) {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()

	// v1: freezer.state reads back what was written, as a settled group's does.
	v1 := freezer{v1: true, ctl: filepath.Join(t.TempDir(), "freezer.state")}
	v1.stat = v1.ctl
	write(v1.ctl, "THAWED\n")
	if err := v1.set(ctx, true); err != nil || read(v1.ctl) != "FROZEN" {
		t.Fatalf("v1 freeze: %v, state %q", err, read(v1.ctl))
	}
	if err := v1.set(ctx, false); err != nil || read(v1.ctl) != "THAWED" {
		t.Fatalf("v1 thaw: %v, state %q", err, read(v1.ctl))
	}

	// v2: cgroup.freeze is written, cgroup.events read.
	dir := t.TempDir()
	v2 := freezer{ctl: filepath.Join(dir, "cgroup.freeze"), stat: filepath.Join(dir, "cgroup.events")}
	write(v2.stat, "populated 1\nfrozen 1\n")
	if err := v2.set(ctx, true); err != nil || read(v2.ctl) != "1" {
		t.Fatalf("v2 freeze: %v, cgroup.freeze %q", err, read(v2.ctl))
	}
	// Never frozen: the wait ends, and the freeze is taken back.
	write(v2.stat, "populated 1\nfrozen 0\n")
	if err := v2.set(ctx, true); !errors.Is(err, errFreezeTimeout) || read(v2.ctl) != "0" {
		t.Fatalf("v2 freeze that does not settle: %v, cgroup.freeze %q; want errFreezeTimeout and 0", err, read(v2.ctl))
	}
	if err := v2.set(ctx, false); err != nil {
		t.Fatalf("v2 thaw: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	write(v2.stat, "frozen 0\n")
	if err := v2.set(cctx, true); !errors.Is(err, context.Canceled) {
		t.Fatalf("v2 freeze, cancelled: %v", err)
	}
	// A group that is gone is an error, not a wait.
	gone := freezer{v1: true, ctl: filepath.Join(dir, "none", "freezer.state")}
	gone.stat = gone.ctl
	if err := gone.set(ctx, true); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("freeze of a missing group: %v", err)
	}
}
