package soak

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one supervised child process. It can be started again after it
// exited; an exit the soak did not cause (Signal with expect, Stop) is
// recorded as a crash.
type Proc struct {
	Name string
	Path string
	Args []string
	Env  []string // added to the soak's environment
	Dir  string
	Log  string              // file the process's stdout and stderr are appended to
	Cred *syscall.Credential // run as this user (Postgres refuses root)
	// Netns, when set, is the file of the network namespace the process
	// runs in: Self (the soak binary) enters it (NetnsExecCommand), drops
	// to Cred, and execs Path.
	Netns string
	Self  string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	expected bool // the current run's end was asked for
	closed   bool // the soak is stopping: Start refuses
	crashes  []string
	starts   int
}

// Start runs the process. It is started from a goroutine locked to its OS
// thread for the process's life: Pdeathsig (the child is killed when the soak
// dies) fires when the starting thread ends, not the process.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is running", p.Name)
	}
	if p.closed {
		return fmt.Errorf("start %s: %w", p.Name, errStopping)
	}
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	path, args, cred := p.Path, p.Args, p.Cred
	if p.Netns != "" {
		path, args, cred = p.Self, p.inNetns(), nil
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = p.Dir
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Credential: cred}
	fmt.Fprintf(logf, "=== soak: start %s %q at %s\n", p.Path, p.Args, time.Now().UTC().Format(time.RFC3339Nano))
	started, done := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the child
		err := cmd.Start()
		started <- err
		if err != nil {
			runtime.UnlockOSThread()
			logf.Close()
			return
		}
		werr := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		if !p.expected {
			p.crashes = append(p.crashes, fmt.Sprintf("%s (pid %d) exited by itself: %v", p.Name, cmd.Process.Pid, werr))
		}
		p.cmd, p.done, p.expected = nil, nil, false
		p.mu.Unlock()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.cmd, p.done, p.expected = cmd, done, false
	p.starts++
	return nil
}

// inNetns is the soak's arguments that run Path in Netns as Cred.
func (p *Proc) inNetns() []string {
	args := []string{NetnsExecCommand, "-netns", p.Netns}
	if p.Cred != nil {
		args = append(args, "-uid", strconv.Itoa(int(p.Cred.Uid)), "-gid", strconv.Itoa(int(p.Cred.Gid)))
	}
	return append(append(args, "--", p.Path), p.Args...)
}

// Running reports whether the process is running (stopped with SIGSTOP counts).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Pid returns the running process's pid, 0 when none.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig to the process; expectExit marks the exit it causes as
// intended (not a crash).
func (p *Proc) Signal(sig syscall.Signal, expectExit bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s is not running", p.Name)
	}
	if expectExit {
		p.expected = true
	}
	return p.cmd.Process.Signal(sig)
}

// expectExit marks the current run's end, whoever causes it, as intended.
func (p *Proc) expectExit() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		p.expected = true
	}
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Proc) Kill() error {
	done := p.doneChan()
	if done == nil {
		return nil
	}
	if err := p.Signal(syscall.SIGKILL, true); err != nil {
		return err
	}
	<-done
	return nil
}

// Stop sends sig (SIGCONT first, in case it is stopped), waits up to timeout
// for the exit, then kills.
func (p *Proc) Stop(sig syscall.Signal, timeout time.Duration) error {
	done := p.doneChan()
	if done == nil {
		return nil
	}
	_ = p.Signal(syscall.SIGCONT, false)
	if err := p.Signal(sig, true); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
	}
	_ = p.Signal(syscall.SIGKILL, true)
	<-done
	return fmt.Errorf("%s did not stop within %s of %v; killed", p.Name, timeout, sig)
}

// Close makes every later Start fail (a fault healing after a signal must
// not start the process again).
func (p *Proc) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
}

// KillGroup sends SIGKILL to the process's whole process group (its own:
// Start sets Setpgid, so runc or Postgres backends under it go too) and
// waits until the process is reaped and the rest of its group has died.
// Nothing running is fine.
func (p *Proc) KillGroup() {
	p.mu.Lock()
	done := p.done
	pgid := 0
	if p.cmd != nil {
		p.expected = true
		pgid = p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	p.mu.Unlock()
	if done != nil {
		<-done
	}
	if pgid > 0 {
		awaitGroupDead(pgid, groupDeathTimeout)
	}
}

// groupDeathTimeout bounds the wait for a killed group's members to die.
const groupDeathTimeout = 10 * time.Second

// awaitGroupDead waits up to timeout until no process of group pgid is
// alive. A SIGKILL is delivered when its target next runs: on a busy machine
// a member other than the reaped leader can still be running after the
// leader's exit (found by make test-race-stress: sandboxd's child outlived
// an abort). A zombie counts as dead; no one may ever reap one whose parent
// died.
func awaitGroupDead(pgid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for d := time.Millisecond; groupAlive(pgid) && time.Now().Before(deadline); d = min(2*d, 50*time.Millisecond) {
		time.Sleep(d)
	}
}

// groupAlive reports whether a process of group pgid is alive (neither a
// zombie nor dead), from /proc.
func groupAlive(pgid int) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			return true
		}
	}
	return false
}

func (p *Proc) doneChan() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Crashes returns the exits the soak did not cause.
func (p *Proc) Crashes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.crashes...)
}

// poll calls ok every interval until it returns true, timeout passes or ctx
// is done (the soak interrupted); the error then names what and ok's last
// error.
func poll(ctx context.Context, what string, timeout, interval time.Duration, ok func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		done, err := ok()
		if done {
			return nil
		}
		if err != nil {
			last = err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, context.Cause(ctx))
		}
		if time.Now().After(deadline) {
			if last == nil {
				return fmt.Errorf("%s: %w after %s", what, errNotReady, timeout)
			}
			return fmt.Errorf("%s: %w after %s: %w", what, errNotReady, timeout, last)
		}
		sleep(ctx, interval)
	}
}

// StopGroup sends sig (SIGCONT first, in case it is stopped) and waits up
// to timeout for the exit; past it, or if the process leaves members of its
// group behind, the group is killed (KillGroup).
func (p *Proc) StopGroup(sig syscall.Signal, timeout time.Duration) error {
	done := p.doneChan()
	if done == nil {
		return nil
	}
	pgid := p.Pid()
	_ = p.Signal(syscall.SIGCONT, false)
	_ = p.Signal(sig, true)
	var err error
	select {
	case <-done:
	case <-time.After(timeout):
		err = fmt.Errorf("%s did not stop within %s of %v; killed", p.Name, timeout, sig)
		p.KillGroup()
	}
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // what it left in its group; ESRCH when none
		awaitGroupDead(pgid, groupDeathTimeout)
	}
	return err
}
