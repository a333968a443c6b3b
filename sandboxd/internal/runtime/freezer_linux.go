package runtime

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// cgroupRoot is where the cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// freezer is the cgroup freezer of one container. runc and crun pause and
// resume a container through it, and report a container whose freezer is
// frozen as paused: writing it directly is their pause and resume, without
// starting the runtime's binary twice (5-10 ms each) per pause, resume and
// snapshot.
type freezer struct {
	v1   bool   // cgroup v1: freezer.state; else v2: cgroup.freeze
	ctl  string // the file written
	stat string // the file read back: freezer.state (v1) or cgroup.events (v2)
}

// findFreezer returns the freezer of the container whose cgroupsPath is
// /parent/id: the v1 freezer hierarchy's group if there is one (hybrid
// systems freeze there), else the unified hierarchy's.
func findFreezer(parent, id string) (freezer, bool) {
	v1 := filepath.Join(cgroupRoot, "freezer", parent, id, "freezer.state")
	if _, err := os.Stat(v1); err == nil {
		return freezer{v1: true, ctl: v1, stat: v1}, true
	}
	dir := filepath.Join(cgroupRoot, parent, id)
	if _, err := os.Stat(filepath.Join(dir, "cgroup.freeze")); err == nil {
		return freezer{ctl: filepath.Join(dir, "cgroup.freeze"), stat: filepath.Join(dir, "cgroup.events")}, true
	}
	return freezer{}, false
}

// freezeSettle bounds the wait for one freeze or thaw to settle.
const freezeSettle = 500 * time.Millisecond

// set freezes (frozen) or thaws the group and waits until the kernel reports
// it so. A freeze that does not settle is undone before the error returns,
// as runc does, so trying again is safe.
func (f freezer) set(ctx context.Context, frozen bool) error {
	write, want := f.states(frozen)
	deadline := time.Now().Add(freezeSettle)
	wait := 50 * time.Microsecond
	for i := 0; ; i++ {
		// v1: writing again takes in tasks forked while the group froze.
		if i == 0 || f.v1 && i%8 == 0 {
			if err := os.WriteFile(f.ctl, []byte(write), 0); err != nil {
				return fmt.Errorf("cgroup freezer: %w", err)
			}
		}
		ok, err := f.is(want)
		if err != nil {
			return fmt.Errorf("cgroup freezer: %w", err)
		}
		if ok {
			return nil
		}
		err = ctx.Err()
		if err == nil && time.Now().After(deadline) {
			err = errFreezeTimeout
		}
		if err != nil {
			if frozen {
				_ = f.set(context.WithoutCancel(ctx), false)
			}
			return fmt.Errorf("cgroup freezer %s: want %s: %w", f.ctl, want, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, 5*time.Millisecond)
	}
}

// states returns what set writes to freeze (frozen) or thaw the group, and
// the state it then waits for: v1 reads back what it was written.
func (f freezer) states(frozen bool) (write, want string) {
	switch {
	case f.v1 && frozen:
		return "FROZEN", "FROZEN"
	case f.v1:
		return "THAWED", "THAWED"
	case frozen:
		return "1", "frozen 1"
	}
	return "0", "frozen 0"
}

// is reports whether the group's state reads want: freezer.state's whole
// content (v1), or one line of cgroup.events (v2).
func (f freezer) is(want string) (bool, error) {
	b, err := os.ReadFile(f.stat)
	if err != nil {
		return false, err
	}
	if f.v1 {
		return string(bytes.TrimSpace(b)) == want, nil
	}
	for line := range bytes.Lines(b) {
		if string(bytes.TrimSpace(line)) == want {
			return true, nil
		}
	}
	return false, nil
}
