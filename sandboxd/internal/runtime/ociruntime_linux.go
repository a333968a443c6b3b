package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ociRuntime drives an OCI runtime's command line (runc's, which crun and
// gVisor's runsc share): run, pause, resume, kill, delete and state.
type ociRuntime struct {
	path string // the runtime binary
	root string // its state directory (--root)
	// cgroupParent is, for a runtime whose containers' cgroups are the
	// host's own groups (runc, crun), the parent group of those cgroups:
	// such a runtime is paused and resumed by writing the freezer directly
	// (see freezer), and a sandbox's CPU bandwidth is written once it runs
	// (see setCPULimit). Empty for any other (gVisor's runsc pauses its own
	// kernel).
	cgroupParent string
}

// writesCgroups reports whether sandboxd writes the cgroups of r's
// containers itself (cgroupParent).
func (r *ociRuntime) writesCgroups() bool { return r.cgroupParent != "" }

// freezer returns container id's cgroup freezer when r pauses through it.
func (r *ociRuntime) freezer(id string) (freezer, bool) {
	if !r.writesCgroups() {
		return freezer{}, false
	}
	return findFreezer(r.cgroupParent, id)
}

// lookRuntime resolves the runtime binary name (a path, or a name looked up
// in PATH) and checks that it answers --version and, for runc, that it has
// the fixes of November 2025 (checkRuncVersion) unless allowOld. The error
// wraps ErrIsolationUnavailable and names what to install.
func lookRuntime(ctx context.Context, name, root, cgroupParent string, allowOld bool) (*ociRuntime, error) {
	if name == "" {
		name = "runc"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%w: OCI runtime %q not found (%w); install it (Debian: apt-get install runc) or name another with --runtime PATH; --no-isolation runs without one, for development only", ErrIsolationUnavailable, name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%w: OCI runtime %s --version: %w: %s", ErrIsolationUnavailable, p, err, strings.TrimSpace(string(out)))
	}
	if err := checkRuncVersion(string(out), allowOld); err != nil {
		return nil, fmt.Errorf("%w: OCI runtime %s: %w", ErrIsolationUnavailable, p, err)
	}
	rt := &ociRuntime{path: p, root: root}
	if b := filepath.Base(p); b == "runc" || b == "crun" {
		rt.cgroupParent = cgroupParent
	}
	return rt, nil
}

// runCmd returns the command that creates and starts container id from
// bundle and stays in the foreground until its init exits (then the runtime
// removes the container). The first extra descriptors of the command (from 3)
// are passed on to the init: preserve says how many.
func (r *ociRuntime) runCmd(id, bundle, pidFile string, preserve int) *exec.Cmd {
	cmd := exec.Command(r.path, "--root", r.root, "run", "--bundle", bundle, "--pid-file", pidFile,
		"--preserve-fds", fmt.Sprint(preserve), id)
	cmd.Dir = bundle
	return cmd
}

// do runs one runtime subcommand on container id and returns its error with
// the runtime's own message.
func (r *ociRuntime) do(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, r.path, append([]string{"--root", r.root}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		return fmt.Errorf("%s %s: %w: %s", r.path, strings.Join(args, " "), err, msg)
	}
	return nil
}

// pause freezes every process of container id; resume thaws them.
func (r *ociRuntime) pause(ctx context.Context, id string) error {
	if f, ok := r.freezer(id); ok {
		return f.set(ctx, true)
	}
	return r.do(ctx, "pause", id)
}

func (r *ociRuntime) resume(ctx context.Context, id string) error {
	if f, ok := r.freezer(id); ok {
		return f.set(ctx, false)
	}
	return r.do(ctx, "resume", id)
}

// kill sends SIGKILL to every process of container id.
func (r *ociRuntime) kill(ctx context.Context, id string) error {
	return r.do(ctx, "kill", "--all", id, "KILL")
}

// delete removes container id whatever its state; a container that does not
// exist is not an error.
func (r *ociRuntime) delete(ctx context.Context, id string) error {
	err := r.do(ctx, "delete", "--force", id)
	if err != nil && r.gone(ctx, id) {
		return nil
	}
	return err
}

// gone reports whether the runtime knows no container id (its state
// command fails).
func (r *ociRuntime) gone(ctx context.Context, id string) bool {
	return r.do(ctx, "state", id) != nil
}

// killCgroup kills every process left in the cgroups of container id below
// parent and removes them: what a runtime that died mid-create (before it
// saved its state) leaves behind, which its delete then cannot see.
func killCgroup(parent, id string) {
	if parent == "" || id == "" || strings.ContainsAny(parent+id, ".") {
		return // never a group above a sandbox's own
	}
	dirs := []string{filepath.Join(cgroupRoot, parent, id)} // cgroup v2
	if ents, err := os.ReadDir(cgroupRoot); err == nil {
		for _, e := range ents {
			dirs = append(dirs, filepath.Join(cgroupRoot, e.Name(), parent, id)) // v1 controllers
		}
	}
	for _, d := range dirs {
		// A group goes once its last task is gone; a task just killed (or
		// still exiting) makes rmdir fail with EBUSY for a moment.
		for range 500 {
			b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err != nil {
				break // no such group (any more)
			}
			for _, p := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(p); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(4 * time.Millisecond)
		}
	}
}

// runcFixed are the first runc releases of each line with the fixes of the
// November 2025 advisories (CVE-2025-31133, CVE-2025-52565, CVE-2025-52881:
// races on masked paths, /dev/console and procfs writes that let a
// container write host files): 1.2.8, 1.3.3, and every release from 1.4.0.
var runcFixed = map[[2]int]int{{1, 2}: 8, {1, 3}: 3}

// checkRuncVersion checks the output of a runtime's --version: a runc
// ("runc version X.Y.Z") must be a release with the fixes, unless allowOld.
// Another runtime (crun, runsc, kata) is not checked.
func checkRuncVersion(out string, allowOld bool) error {
	var maj, min, patch int
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(line, "runc version ") {
		return nil
	}
	v := strings.TrimPrefix(line, "runc version ")
	if _, err := fmt.Sscanf(v, "%d.%d.%d", &maj, &min, &patch); err != nil {
		if allowOld {
			return nil
		}
		return fmt.Errorf("cannot read the runc version %q (--allow-old-runtime accepts it)", v)
	}
	ok := maj > 1 || (maj == 1 && min >= 4)
	if fixed, line := runcFixed[[2]int{maj, min}]; line {
		ok = patch >= fixed
	}
	if ok || allowOld {
		return nil
	}
	return fmt.Errorf("%w: found %s; install a current one (make deps builds runc v1.5.3 from the Go module proxy) or start with --allow-old-runtime", errOldRuntime, v)
}
