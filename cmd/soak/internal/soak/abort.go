package soak

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/alineo-labs/alineo/internal/mountinfo"
)

// sandboxdRunRoot is sandboxd's default Config.RunDir, which the soak's
// sandboxd uses.
const sandboxdRunRoot = "/run/alineo-sandboxd"

// abortGrace bounds sandboxd's and Postgres's own shutdown in abort.
var abortGrace = 20 * time.Second

// abort stops every process at once (the soak got a signal): nothing is
// started again (a fault healing), the executors, the API and the projector
// are killed with their process groups, sandboxd is given abortGrace after
// SIGTERM to remove its sandboxes, Postgres a fast shutdown (SIGINT), the
// NATS nodes are killed; every one is reaped. Then whatever is still
// mounted below the soak's directory or sandboxd's run directory is
// unmounted.
func (f *Fleet) abort() {
	all := f.All()
	for _, p := range all {
		if p != nil {
			p.Close()
		}
	}
	var wg sync.WaitGroup
	for _, p := range append(append([]*Proc{f.API}, f.Projectors...), f.Executors...) {
		if p != nil {
			wg.Go(p.KillGroup)
		}
	}
	wg.Wait() // no executor creates a sandbox while sandboxd removes them
	graceful := func(p *Proc, sig syscall.Signal) {
		if p != nil {
			if err := p.StopGroup(sig, abortGrace); err != nil {
				f.cfg.logf("%v", err)
			}
		}
	}
	for _, s := range f.sandboxds() {
		wg.Go(func() { graceful(s, syscall.SIGTERM) })
	}
	wg.Go(func() { graceful(f.Postgres, syscall.SIGINT) })
	for _, n := range append(f.NATS, f.S3) {
		if n != nil {
			wg.Go(n.KillGroup)
		}
	}
	wg.Wait()
	dirs := append([]string{f.cfg.Dir}, f.runDirs()...)
	if left, err := unmountBelow(dirs...); err != nil {
		f.cfg.logf("unmount what sandboxd left: %v", err)
	} else if left > 0 {
		f.cfg.logf("unmounted %d mounts sandboxd left", left)
	}
}

// runDirs are the run directories of the fleet's sandboxds.
func (f *Fleet) runDirs() []string {
	if f.Hosts == nil {
		return []string{runDirOf(filepath.Join(f.cfg.Dir, "sandboxd"))}
	}
	var out []string
	for _, h := range f.Hosts {
		out = append(out, runDirOf(h.Data))
	}
	return out
}

// runDirOf is the run directory sandboxd keeps for the data directory
// dataDir: its run root, then the first 6 bytes of the SHA-256 of dataDir's
// absolute path in hex (sandboxd's runDirFor).
func runDirOf(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(sandboxdRunRoot, hex.EncodeToString(sum[:6]))
}

// unmountBelow detaches every mount at or below dirs, deepest first, and
// returns how many it unmounted; it goes on past one it cannot unmount.
func unmountBelow(dirs ...string) (int, error) {
	ms, err := mountinfo.Below(dirs...)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, m := range ms {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, &os.PathError{Op: "unmount", Path: m, Err: err})
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
