package sandboxd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/alineo-labs/alineo/sandboxd/internal/proctree"
)

// proc is a running sandbox as seen from the server: its init process, the
// control pipe that keeps it alive, its cgroups and its status messages.
type proc struct {
	cmd  *exec.Cmd
	ctl  *os.File
	cg   *cgroups
	port int
	eg   *sidecar // the egress proxy of a sandbox with its own network namespace

	done chan struct{} // closed once the init has been waited for

	mu sync.Mutex
	// last is the last status message that explains an exit.
	last    initMsg
	stopped bool // paused with SIGSTOP (no freezer)
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// lastMsg returns the last status message received.
func (p *proc) lastMsg() initMsg {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// baseEnv is the environment of every sandbox process: the defaults, then
// extra, then the request's env.
func baseEnv(id string, extra []string, env map[string]string) []string {
	out := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root",
		"HOSTNAME=" + shortID(id),
		"LANG=C.UTF-8",
	}
	out = append(out, extra...)
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// probeIsolation starts a process in the namespaces a sandbox uses and checks
// that it can mount; it returns an error wrapping ErrIsolationUnavailable when
// the kernel refuses.
func probeIsolation(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Args = []string{"sandboxd-probe"}
	cmd.Env = []string{initEnv + "=probe"}
	cmd.SysProcAttr = isolatedAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: the kernel refused a user, mount, PID, UTS and IPC namespace with a mount in it (%v %s); start with --no-isolation (Config.NoIsolation) for development only", ErrIsolationUnavailable, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// breakIsolation makes isolatedAttr ask for an invalid user mapping, so tests
// can see what a kernel that refuses namespaces does.
var breakIsolation bool

func isolatedAttr() *syscall.SysProcAttr {
	return isolatedAttrNet(false)
}

// isolatedAttrNet is isolatedAttr, with a new network namespace if netns.
func isolatedAttrNet(netns bool) *syscall.SysProcAttr {
	// As root: identity mapping of every id, so root in the sandbox is root
	// for file ownership, but its capabilities only hold in the sandbox's
	// namespaces. As another user: that user becomes root in the sandbox, the
	// only mapping an unprivileged user namespace allows.
	uid, gid, size := 0, 0, 1<<32-1
	setgroups := true
	if euid := os.Geteuid(); euid != 0 {
		uid, gid, size = euid, os.Getegid(), 1
		setgroups = false
	}
	if breakIsolation {
		size = 0
	}
	flags := uintptr(syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC)
	if netns {
		flags |= syscall.CLONE_NEWNET
	}
	return &syscall.SysProcAttr{
		Cloneflags:                 flags,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: size}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: size}},
		GidMappingsEnableSetgroups: setgroups,
		Setsid:                     true,
	}
}

// launch starts a sandbox's init and waits until execd listens and the
// entrypoint survived the startup grace.
func (s *Server) launch(ctx context.Context, rec *record, fs rootfs) (*proc, error) {
	dir := s.sandboxDir(rec.ID)
	if s.cfg.NoIsolation {
		if err := os.MkdirAll(filepath.Join(dir, plainRoot), 0o755); err != nil {
			return nil, err
		}
	}
	logf, err := os.OpenFile(filepath.Join(dir, "entrypoint.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	// A sandbox with its own network namespace gets two more descriptors: a
	// listener on a host loopback port for execd (a socket stays in the
	// namespace it was made in, so the host reaches execd there although the
	// sandbox cannot reach the host), and a unix socket on which the init
	// sends back the listener of its egress proxy port.
	var execdLn, egSock, egPeer *os.File
	closeNet := func() {
		for _, f := range []*os.File{execdLn, egSock, egPeer} {
			if f != nil {
				f.Close()
			}
		}
	}
	if rec.Egress {
		if execdLn, egSock, egPeer, err = netnsFiles(); err != nil {
			ctlR.Close()
			ctlW.Close()
			stR.Close()
			stW.Close()
			return nil, err
		}
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"sandboxd-init", rec.ID}
	cmd.Env = []string{initEnv + "=init"}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{ctlR, stW, logf}
	if rec.Egress {
		cmd.ExtraFiles = append(cmd.ExtraFiles, execdLn, egPeer)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if s.cfg.NoIsolation {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = isolatedAttrNet(rec.Egress)
	}
	err = cmd.Start()
	ctlR.Close()
	stW.Close()
	if execdLn != nil {
		execdLn.Close()
		egPeer.Close()
		execdLn, egPeer = nil, nil
	}
	defer closeNet()
	if err != nil {
		ctlW.Close()
		stR.Close()
		if !s.cfg.NoIsolation {
			return nil, fmt.Errorf("%w: start sandbox init: %w", ErrIsolationUnavailable, err)
		}
		return nil, fmt.Errorf("start sandbox init: %w", err)
	}
	p := &proc{cmd: cmd, ctl: ctlW, done: make(chan struct{})}
	p.cg = newCgroups(s.cfg.CgroupRoot, s.cfg.CgroupParent, rec.ID, rec.Limits, s.cfg.MaxProcesses)
	if len(p.cg.missing) > 0 {
		missing := strings.Join(p.cg.missing, "; ")
		pause := "cgroup freezer"
		if !p.cg.hasFreezer() {
			pause = "SIGSTOP/SIGCONT"
		}
		s.cgWarnOnce.Do(func() {
			s.log.Warn("sandboxd: some cgroup features are unavailable and not enforced", "missing", missing, "pause", pause)
		})
		s.log.Debug("sandboxd: cgroup features unavailable for sandbox", "id", rec.ID, "missing", missing)
	}
	if err := p.cg.add(cmd.Process.Pid); err != nil {
		s.log.Warn("sandboxd: cgroup placement failed", "id", rec.ID, "err", err)
	}
	msgs := make(chan initMsg, 4)
	go func() {
		defer close(msgs)
		sc := bufio.NewScanner(stR)
		for sc.Scan() {
			var m initMsg
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.mu.Lock()
				if m.Port == 0 {
					p.last = m
				}
				p.mu.Unlock()
				select {
				case msgs <- m:
				default: // nobody waits any more; the exit is recorded in last
				}
			}
		}
		stR.Close()
	}()
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()

	var extraEnv []string
	if rec.Egress {
		if p.eg, err = s.newSidecar(rec); err != nil {
			s.kill(p)
			return nil, err
		}
		extraEnv = proxyEnv()
	}
	cfg := initConfig{
		ID:         rec.ID,
		Isolated:   !s.cfg.NoIsolation,
		Lower:      fs.Lower,
		HostDirs:   fs.HostDirs,
		HostMask:   fs.HostMask,
		SandboxDir: dir,
		Entrypoint: rec.Entrypoint,
		Env:        baseEnv(rec.ID, extraEnv, rec.Env),
		Token:      rec.ExecdToken,
		Netns:      rec.Egress,
	}
	if p.eg != nil {
		cfg.CACert = string(p.eg.proxy.CACertPEM())
	}
	line, _ := json.Marshal(cfg)
	if _, err := ctlW.Write(append(line, '\n')); err != nil {
		s.kill(p)
		return nil, fmt.Errorf("configure sandbox init: %w", err)
	}

	failure := func(m initMsg, ok bool) error {
		if !ok {
			<-p.done
			return fmt.Errorf("sandbox init exited during start-up: %s; %s", cmd.ProcessState, s.logTail(rec.ID))
		}
		err := errors.New(describeMsg(m, s.logTail(rec.ID)))
		if m.Exit != nil {
			return &exitError{err}
		}
		return err
	}
	select {
	case m, ok := <-msgs:
		if !ok || m.Port == 0 {
			s.kill(p)
			return nil, failure(m, ok)
		}
		p.port = m.Port
		if p.eg != nil {
			// The init sent its proxy listener before it reported the port.
			l, err := recvListener(egSock)
			if err != nil {
				s.kill(p)
				return nil, fmt.Errorf("egress proxy listener from the sandbox: %w", err)
			}
			p.eg.serveProxy(l)
		}
	case <-ctx.Done():
		s.kill(p)
		return nil, fmt.Errorf("sandbox start: %w", ctx.Err())
	}
	if g := s.cfg.StartupGrace; g > 0 {
		t := time.NewTimer(g)
		defer t.Stop()
		select {
		case m, ok := <-msgs:
			s.kill(p)
			return nil, failure(m, ok)
		case <-t.C:
		case <-ctx.Done():
			s.kill(p)
			return nil, fmt.Errorf("sandbox start: %w", ctx.Err())
		}
	}
	return p, nil
}

// exitError is a start-up failure because the entrypoint exited.
type exitError struct{ error }

func (e *exitError) Unwrap() error { return e.error }

// describeMsg explains an init status message that ends a sandbox.
func describeMsg(m initMsg, tail string) string {
	var b strings.Builder
	switch {
	case m.Error != "":
		b.WriteString(m.Error)
	case m.Exit != nil && m.Signal != "":
		b.WriteString("entrypoint killed by " + m.Signal)
	case m.Exit != nil:
		b.WriteString("entrypoint exited with code " + strconv.Itoa(*m.Exit))
	case m.Execd != "":
		b.WriteString("execd exited: " + m.Execd)
	default:
		b.WriteString("sandbox init exited")
	}
	if tail != "" {
		b.WriteString("; ")
		b.WriteString(tail)
	}
	return b.String()
}

// logTail returns the end of a sandbox's entrypoint log, for failure messages.
func (s *Server) logTail(id string) string {
	f, err := os.Open(filepath.Join(s.sandboxDir(id), "entrypoint.log"))
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return ""
	}
	const max = 512
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	buf := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(buf, off)
	return "log: " + strings.TrimSpace(string(buf[:n]))
}

// kill stops every process of the sandbox and waits for the init, then removes
// the cgroups. Safe to call more than once.
func (s *Server) kill(p *proc) {
	if p.cg.hasFreezer() {
		// Frozen tasks do not die until thawed.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = p.cg.setFreezer(ctx, "THAWED")
		cancel()
	}
	var tree []int
	if s.cfg.NoIsolation {
		tree = proctree.Descendants(p.pid())
	}
	_ = p.ctl.Close()
	_ = p.cmd.Process.Kill()
	for _, pid := range tree {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range p.cg.pids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		s.log.Error("sandboxd: sandbox init did not exit after SIGKILL", "pid", p.pid())
	}
	for i := 0; i < 100 && len(p.cg.pids()) > 0; i++ {
		for _, pid := range p.cg.pids() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := p.cg.remove(); err != nil {
		s.log.Warn("sandboxd: cgroup cleanup", "err", err)
	}
	p.eg.close()
}

// freeze pauses every process of the sandbox.
func (s *Server) freeze(ctx context.Context, p *proc) error {
	if p.cg.hasFreezer() {
		return p.cg.setFreezer(ctx, "FROZEN")
	}
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	// A second pass stops children forked while the first one ran.
	if err := signalTree(p.pid(), syscall.SIGSTOP); err != nil {
		return err
	}
	return signalTree(p.pid(), syscall.SIGSTOP)
}

// thaw resumes a paused sandbox.
func (s *Server) thaw(ctx context.Context, p *proc) error {
	if p.cg.hasFreezer() {
		return p.cg.setFreezer(ctx, "THAWED")
	}
	p.mu.Lock()
	p.stopped = false
	p.mu.Unlock()
	return signalTree(p.pid(), syscall.SIGCONT)
}

// signalTree sends sig to root and every descendant.
func signalTree(root int, sig syscall.Signal) error {
	pids := append([]int{root}, proctree.Descendants(root)...)
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("signal %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// netnsFiles returns what a sandbox with its own network namespace needs from
// the host: a listener on a host loopback port for its execd, and both ends of
// the unix socket its init sends its proxy listener back on.
func netnsFiles() (execdLn, sock, peer *os.File, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, fmt.Errorf("execd listener: %w", err)
	}
	execdLn, err = ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("execd listener: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		execdLn.Close()
		return nil, nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return execdLn, os.NewFile(uintptr(fds[0]), "egress-sock"), os.NewFile(uintptr(fds[1]), "egress-peer"), nil
}
