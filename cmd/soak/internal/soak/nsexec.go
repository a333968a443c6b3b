package soak

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// NetnsExecCommand is the argument that makes the soak binary run a
// program in a network namespace: it enters the namespace bound at -netns
// (setns, its network namespace only: the mounts stay the soak's, so what
// sandboxd mounts is where the soak and a restarted sandboxd find it),
// drops to -uid and -gid when given, and execs the program, which keeps
// the pid, the process group and the parent-death signal the soak gave it.
//
//	soak in-netns -netns PATH [-uid N -gid N] -- PROGRAM ARGS...
const NetnsExecCommand = "in-netns"

// RunInNetns is NetnsExecCommand. It returns only on an error: on success
// the program replaces this process.
func RunInNetns(args []string) error {
	fs := flag.NewFlagSet(NetnsExecCommand, flag.ContinueOnError)
	netns := fs.String("netns", "", "file the network namespace is bound at")
	uid := fs.Int("uid", -1, "user to run the program as (after entering the namespace, which needs root)")
	gid := fs.Int("gid", -1, "group to run the program as")
	if err := fs.Parse(args); err != nil {
		return err
	}
	prog := fs.Args()
	if *netns == "" || len(prog) == 0 {
		return fmt.Errorf("usage: %s -netns PATH [-uid N -gid N] -- PROGRAM ARGS", NetnsExecCommand)
	}
	bin, err := exec.LookPath(prog[0])
	if err != nil {
		return fmt.Errorf("%s: %w", NetnsExecCommand, err)
	}
	// The thread that enters the namespace is the one that execs: the
	// program has this thread's namespaces.
	runtime.LockOSThread()
	f, err := os.Open(*netns)
	if err != nil {
		return fmt.Errorf("%s: %w", NetnsExecCommand, err)
	}
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("%s: setns %s: %w", NetnsExecCommand, *netns, err)
	}
	f.Close()
	if *gid >= 0 || *uid >= 0 {
		if err := dropTo(*uid, *gid); err != nil {
			return fmt.Errorf("%s: %w", NetnsExecCommand, err)
		}
	}
	return fmt.Errorf("%s: exec %s: %w", NetnsExecCommand, bin, syscall.Exec(bin, prog, os.Environ()))
}

// dropTo makes the process run as uid and gid with no supplementary
// groups, and sets its parent-death signal again: a change of credentials
// clears it.
func dropTo(uid, gid int) error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if gid >= 0 {
		if err := syscall.Setresgid(gid, gid, gid); err != nil {
			return fmt.Errorf("setresgid %d: %w", gid, err)
		}
	}
	if uid >= 0 {
		if err := syscall.Setresuid(uid, uid, uid); err != nil {
			return fmt.Errorf("setresuid %d: %w", uid, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	if os.Getppid() == 1 {
		return errors.New("the soak died while this process started")
	}
	return nil
}

// NetJanitorCommand is the argument that makes the soak binary run a
// network's janitor: it waits until its stdin ends (the soak closed it, or
// died however it died), then tears the network down (teardownNetwork) and
// exits, 1 if it could not remove everything.
//
//	soak net-janitor -dir DIR -link LINK [-unmount DIR]...
const NetJanitorCommand = "net-janitor"

// RunNetJanitor is NetJanitorCommand.
func RunNetJanitor(args []string, stdin io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet(NetJanitorCommand, flag.ContinueOnError)
	dir := fs.String("dir", "", "directory of the network's namespace files")
	link := fs.String("link", "", "the network's link in the root namespace")
	var unmount listFlag
	fs.Var(&unmount, "unmount", "directory below which every mount is detached (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("%s: -dir is required", NetJanitorCommand)
	}
	_, _ = io.Copy(io.Discard, stdin)
	found, err := teardownNetwork(*dir, *link, unmount)
	if found != "" {
		fmt.Fprintf(out, "soak net-janitor: removed %s\n", found)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", NetJanitorCommand, err)
	}
	return nil
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return fmt.Sprint([]string(*l)) }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
