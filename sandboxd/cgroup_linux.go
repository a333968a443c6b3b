package sandboxd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroups is one sandbox's set of cgroups: in cgroup v1 one group per
// controller (freezer, memory, cpu, pids), in cgroup v2 (a root holding
// cgroup.controllers) one group with the memory, cpu and pids controllers and
// cgroup.freeze. Controllers that are missing or refuse are left out and
// reported in missing.
type cgroups struct {
	v2      bool
	dirs    map[string]string // v1: controller → group dir; v2: "" → the group dir
	missing []string
}

func newCgroups(root, parent, id string, lim limits, maxPids int) *cgroups {
	if fileExists(filepath.Join(root, "cgroup.controllers")) {
		return newCgroupsV2(root, parent, id, lim, maxPids)
	}
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

// newCgroupsV2 makes root/parent/id in a cgroup v2 hierarchy, delegating the
// memory, cpu and pids controllers down to it where root offers them.
func newCgroupsV2(root, parent, id string, lim limits, maxPids int) *cgroups {
	c := &cgroups{v2: true, dirs: map[string]string{}}
	base := filepath.Join(root, parent)
	dir := filepath.Join(base, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.missing = append(c.missing, "cgroup v2: "+err.Error())
		return c
	}
	c.dirs[""] = dir
	b, _ := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	avail := strings.Fields(string(b))
	var enable []string
	for _, ctrl := range []string{"memory", "cpu", "pids"} {
		if slices.Contains(avail, ctrl) {
			enable = append(enable, "+"+ctrl)
		} else {
			c.missing = append(c.missing, ctrl+": controller not available in cgroup v2")
		}
	}
	if len(enable) > 0 {
		for _, d := range []string{root, base} {
			if err := writeFile(filepath.Join(d, "cgroup.subtree_control"), strings.Join(enable, " ")); err != nil {
				c.missing = append(c.missing, "enable controllers in "+d+": "+err.Error())
			}
		}
	}
	set := func(file, v, what string) {
		f := filepath.Join(dir, file)
		if !fileExists(f) {
			c.missing = append(c.missing, what+" not enforced")
			return
		}
		if err := writeFile(f, v); err != nil {
			c.missing = append(c.missing, what+": "+err.Error())
		}
	}
	if lim.MemoryBytes > 0 {
		set("memory.max", strconv.FormatInt(lim.MemoryBytes, 10), "memory limit")
		if fileExists(filepath.Join(dir, "memory.swap.max")) {
			set("memory.swap.max", "0", "swap limit")
		}
	}
	if lim.MilliCPU > 0 {
		set("cpu.max", strconv.FormatInt(lim.MilliCPU*100, 10)+" 100000", "cpu limit")
	}
	if maxPids > 0 && fileExists(filepath.Join(dir, "pids.max")) {
		set("pids.max", strconv.Itoa(maxPids), "pids limit")
	}
	if !fileExists(filepath.Join(dir, "cgroup.freeze")) {
		c.missing = append(c.missing, "freezer: no cgroup.freeze")
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

func (c *cgroups) hasFreezer() bool {
	if c.v2 {
		d, ok := c.dirs[""]
		return ok && fileExists(filepath.Join(d, "cgroup.freeze"))
	}
	_, ok := c.dirs["freezer"]
	return ok
}

// setFreezer writes state (FROZEN or THAWED) and waits until the group reports it.
func (c *cgroups) setFreezer(ctx context.Context, state string) error {
	// v1: write the state to freezer.state until it reads back; v2: write 1 or
	// 0 to cgroup.freeze and wait for "frozen 1" or "frozen 0" in cgroup.events.
	f, write, check, want := filepath.Join(c.dirs["freezer"], "freezer.state"), state, "", state
	if c.v2 {
		d := c.dirs[""]
		f, check = filepath.Join(d, "cgroup.freeze"), filepath.Join(d, "cgroup.events")
		write, want = "0", "frozen 0"
		if state == "FROZEN" {
			write, want = "1", "frozen 1"
		}
	}
	wait := 100 * time.Microsecond
	for {
		if err := writeFile(f, write); err != nil {
			return fmt.Errorf("freezer %s: %w", state, err)
		}
		if check == "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return fmt.Errorf("freezer %s: %w", state, err)
			}
			if strings.TrimSpace(string(b)) == want {
				return nil
			}
		} else {
			b, err := os.ReadFile(check)
			if err != nil {
				return fmt.Errorf("freezer %s: %w", state, err)
			}
			if slices.Contains(strings.Split(string(b), "\n"), want) {
				return nil
			}
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
	for _, ctrl := range []string{"", "freezer", "memory", "cpu", "pids"} {
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
