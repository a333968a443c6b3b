//go:build linux

package oomscore

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Start starts cmd with its oom_score_adj at adj; with adj 0 it is
// cmd.Start. It returns an error only when cmd is not running: setting the
// score is best effort, as the score only ranks the command for the OOM
// killer. Where this process may not use ptrace (a seccomp filter that
// refuses it, Yama at 3), the score is written once the command started, as
// early as it can be from outside.
func Start(cmd *exec.Cmd, adj int) error {
	if adj == 0 {
		return cmd.Start()
	}
	if !ptraceUsable() {
		if err := cmd.Start(); err != nil {
			return err
		}
		_ = set(cmd.Process.Pid, adj)
		return nil
	}
	// The tracer is the thread that forks: it must also wait for the stop
	// and detach.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Ptrace = true
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	if stoppedAtExec(pid) {
		_ = set(pid, adj)
		// Detaching clears the stop, so no report of it is left for cmd.Wait.
		if err := syscall.PtraceDetach(pid); err != nil {
			// Left stopped, the command would never run: end it.
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("let %d go after its exec: %w", pid, err)
		}
	}
	return nil
}

// stoppedAtExec waits for the traced child pid to stop at its exec and
// reports whether it did. WNOWAIT leaves an exit (a kill before the stop)
// for cmd.Wait to report.
func stoppedAtExec(pid int) bool {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		return err == nil && (info.Code == cldTrapped || info.Code == cldStopped)
	}
}

// si_code of a stopped child (<asm-generic/siginfo.h>).
const (
	cldTrapped = 4
	cldStopped = 5
)

// set sets the oom_score_adj of process pid. Raising it needs no privilege;
// lowering it needs CAP_SYS_RESOURCE.
func set(pid, adj int) error {
	return os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(strconv.Itoa(adj)), 0)
}

// ptraceUsable reports whether this process may trace its children: Yama
// does not forbid it, and a ptrace call is answered by the kernel (ESRCH for
// an untraced pid), not refused by a seccomp filter (EPERM, ENOSYS).
var ptraceUsable = sync.OnceValue(func() bool {
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil && strings.TrimSpace(string(b)) == "3" {
		return false
	}
	_, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_PEEKUSR, uintptr(os.Getpid()), 0, 0, 0, 0)
	return errno == unix.ESRCH
})
