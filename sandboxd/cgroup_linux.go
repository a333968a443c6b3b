package sandboxd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroups is one sandbox's set of cgroup v1 groups (freezer, memory, cpu,
// pids).
// Controllers that are missing or refuse are left out and reported.
type cgroups struct {
	dirs    map[string]string // controller → group dir
	missing []string          // "controller: why"
}

func newCgroups(root, parent, id string, lim limits, maxPids int) *cgroups {
	c := &cgroups{dirs: map[string]string{}}
	for _, ctrl := range []string{"freezer", "memory", "cpu", "pids"} {
		base := filepath.Join(root, ctrl)
		if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
			c.missing = append(c.missing, ctrl+": controller not mounted")
			continue
		}
		dir := filepath.Join(base, parent, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			c.missing = append(c.missing, fmt.Sprintf("%s: %v", ctrl, err))
			continue
		}
		c.dirs[ctrl] = dir
	}
	if d, ok := c.dirs["memory"]; ok && lim.MemoryBytes > 0 {
		if err := writeFile(filepath.Join(d, "memory.limit_in_bytes"), strconv.FormatInt(lim.MemoryBytes, 10)); err != nil {
			c.missing = append(c.missing, "memory limit: "+err.Error())
		}
		// With swap accounting, the limit covers swap too (else a sandbox
		// would swap past it).
		if f := filepath.Join(d, "memory.memsw.limit_in_bytes"); fileExists(f) {
			if err := writeFile(f, strconv.FormatInt(lim.MemoryBytes, 10)); err != nil {
				c.missing = append(c.missing, "memory+swap limit: "+err.Error())
			}
		}
	} else if lim.MemoryBytes > 0 {
		c.missing = append(c.missing, "memory limit not enforced")
	}
	if d, ok := c.dirs["cpu"]; ok && lim.MilliCPU > 0 {
		err := writeFile(filepath.Join(d, "cpu.cfs_period_us"), "100000")
		if err == nil {
			err = writeFile(filepath.Join(d, "cpu.cfs_quota_us"), strconv.FormatInt(lim.MilliCPU*100, 10))
		}
		if err != nil {
			c.missing = append(c.missing, "cpu limit: "+err.Error())
		}
	} else if lim.MilliCPU > 0 {
		c.missing = append(c.missing, "cpu limit not enforced")
	}
	if d, ok := c.dirs["pids"]; ok && maxPids > 0 {
		if err := writeFile(filepath.Join(d, "pids.max"), strconv.Itoa(maxPids)); err != nil {
			c.missing = append(c.missing, "pids limit: "+err.Error())
		}
	}
	return c
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func writeFile(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// add moves pid (all its threads) into every group.
func (c *cgroups) add(pid int) error {
	var errs []error
	for ctrl, d := range c.dirs {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			errs = append(errs, fmt.Errorf("cgroup %s: %w", ctrl, err))
		}
	}
	return errors.Join(errs...)
}

func (c *cgroups) hasFreezer() bool { _, ok := c.dirs["freezer"]; return ok }

// setFreezer writes state (FROZEN or THAWED) and waits until the group reports it.
func (c *cgroups) setFreezer(ctx context.Context, state string) error {
	d := c.dirs["freezer"]
	f := filepath.Join(d, "freezer.state")
	wait := 100 * time.Microsecond
	for {
		if err := writeFile(f, state); err != nil {
			return fmt.Errorf("freezer %s: %w", state, err)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("freezer %s: %w", state, err)
		}
		if strings.TrimSpace(string(b)) == state {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("freezer %s: %w", state, ctx.Err())
		case <-time.After(wait):
		}
		if wait < 10*time.Millisecond {
			wait *= 2
		}
	}
}

// pids lists the processes of the group (freezer first, else any).
func (c *cgroups) pids() []int {
	for _, ctrl := range []string{"freezer", "memory", "cpu", "pids"} {
		d, ok := c.dirs[ctrl]
		if !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		var out []int
		for _, f := range bytes.Fields(b) {
			if n, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	return nil
}

// remove deletes the groups; a group still holding exiting tasks is retried
// briefly.
func (c *cgroups) remove() error {
	var errs []error
	for ctrl, d := range c.dirs {
		var err error
		for i := 0; i < 50; i++ {
			if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", ctrl, err))
		}
	}
	return errors.Join(errs...)
}

// killAll thaws the group and kills every process in it, then removes it. It
// cleans up after a server that died without stopping its sandboxes.
func (c *cgroups) killAll() error {
	if c.hasFreezer() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = c.setFreezer(ctx, "THAWED")
		cancel()
	}
	for i := 0; i < 100; i++ {
		pids := c.pids()
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return c.remove()
}
