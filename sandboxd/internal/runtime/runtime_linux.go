package runtime

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/internal/proctree"
)

// statusDrainTimeout bounds how long a sandbox's end waits, once its init
// exited, for the init's last status message.
const statusDrainTimeout = 2 * time.Second

// workOOMScoreAdj is the oom_score_adj of a sandbox's own work (its
// entrypoint and every command execd starts), while its init and execd keep
// the default 0: inside a sandbox at its memory limit the kernel kills the
// work that allocates, never what keeps the sandbox answering. Raising a
// score needs no privilege, where lowering one needs CAP_SYS_RESOURCE, which
// a server may lack (and runc, in a user namespace, always does).
const workOOMScoreAdj = 1000

// Process is a running sandbox as seen from the server: its init process, the
// control pipe that keeps it alive and its status messages.
type Process struct {
	id  string
	cmd *exec.Cmd // the runtime's foreground run (isolated), or the plain init
	ctl *os.File
	rt  *ociRuntime // nil without isolation
	dir string      // the sandbox directory, whose mounts kill undoes
	// netns is the path of the sandbox's own network namespace, if any.
	netns   string
	initPID int // the init's host pid
	port    int
	eg      *sidecar // the egress proxy of a sandbox with its own network namespace

	done chan struct{} // closed once cmd has been waited for

	mu sync.Mutex
	// last is the last status message that explains an exit.
	last   initMsg
	frozen bool
}

func (p *Process) pid() int { return p.initPID }

// PID is the host pid of the sandbox's init.
func (p *Process) PID() int { return p.pid() }

// Port is the host loopback port execd listens on.
func (p *Process) Port() int { return p.port }

// EgressAPIPort is the host loopback port of the sandbox's egress API, 0
// for a sandbox without one.
func (p *Process) EgressAPIPort() int { return p.eg.apiPort() }

// EgressHandler is the sandbox's egress API, nil for a sandbox without one.
func (p *Process) EgressHandler() http.Handler {
	if p.eg == nil {
		return nil
	}
	return p.eg.proxy.Handler()
}

// Done is closed once the sandbox's init has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Ended explains an init that exited on its own (Done is closed): its last
// status message with the end of the entrypoint log, and whether it says
// the entrypoint exited.
func (p *Process) Ended() (msg string, entrypointExit bool) {
	m := p.lastMsg()
	return describeMsg(m, logTail(p.dir)), m.Exit != nil
}

// lastMsg returns the last status message received.
func (p *Process) lastMsg() initMsg {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// baseEnv is the environment of every sandbox process: the defaults, then
// the image's Env, then extra, then the request's env, each overriding what
// came before it, key by key.
func baseEnv(id string, image, extra []string, env map[string]string) []string {
	var out []string
	at := map[string]int{}
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := at[k]; ok {
			out[i] = kv
			return
		}
		at[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root",
		"HOSTNAME=" + shortID(id),
		"LANG=C.UTF-8",
	} {
		set(kv)
	}
	for _, kv := range image {
		if strings.Contains(kv, "=") {
			set(kv)
		}
	}
	for _, kv := range extra {
		set(kv)
	}
	keys := slices.Sorted(maps.Keys(env))
	for _, k := range keys {
		set(k + "=" + env[k])
	}
	return out
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// launcher holds what one sandbox start opens, so that every exit path
// closes it.
type launcher struct {
	r   *Runtime
	sb  *Sandbox
	fs  Rootfs
	dir string
	p   *Process // nil until the init runs

	logf      *os.File
	ctlR, stW *os.File // the init's ends of its pipes
	ctlW, stR *os.File // the server's ends
	execdLn   *os.File // a host loopback listener for execd (own netns only)
	netns     string
	proxyLn   net.Listener
	msgs      chan initMsg
	drained   chan struct{} // closed once the log's drain ended
}

// Launch starts a sandbox's init and waits until execd listens and the
// entrypoint survived the startup grace. On error nothing of the sandbox is
// left running or mounted; an entrypoint that exited is an *ExitError.
func (r *Runtime) Launch(ctx context.Context, sb *Sandbox) (*Process, error) {
	l := &launcher{r: r, sb: sb, fs: sb.Root, dir: r.sandboxDir(sb.ID)}
	p, err := l.run(ctx)
	l.closeFiles()
	if err != nil {
		if l.p != nil {
			r.Kill(l.p)
		} else {
			l.undo()
		}
		var sf *startFailure
		if errors.As(err, &sf) {
			err = sf.explain(l.logTail())
		}
		return nil, err
	}
	return p, nil
}

// startFailure is a start that ended with the init's (or the runtime's)
// exit, explained but for the end of the entrypoint log: what the
// sandbox's processes wrote last may still be in the log's pipe when their
// exit is seen, so Launch reads the log once they are gone (logTail).
type startFailure struct {
	msg  string
	m    initMsg // the init's last status message, if it sent one (ok)
	ok   bool
	exit bool // the entrypoint exited
}

func (e *startFailure) Error() string { return e.explain("").Error() }

// explain is the failure's error with tail, the end of the log: an
// *ExitError when the entrypoint exited.
func (e *startFailure) explain(tail string) error {
	if !e.ok {
		return fmt.Errorf("%s; %s", e.msg, tail)
	}
	err := errors.New(describeMsg(e.m, tail))
	if e.exit {
		return &ExitError{err}
	}
	return err
}

// logTail returns the end of the entrypoint log once its drain ended, which
// it does once every process of the sandbox is gone, or after
// statusDrainTimeout (one that escaped the sandbox's end may hold the pipe).
func (l *launcher) logTail() string {
	if l.drained != nil {
		select {
		case <-l.drained:
		case <-time.After(statusDrainTimeout):
		}
	}
	return logTail(l.dir)
}

func (l *launcher) run(ctx context.Context) (*Process, error) {
	t0 := time.Now()
	if err := l.open(); err != nil {
		return nil, err
	}
	cmd, err := l.command()
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	if err := l.start(cmd); err != nil {
		return nil, err
	}
	defer func() {
		l.r.log.Debug("sandboxd: launch", "id", l.sb.ID, "prepare", t1.Sub(t0), "run", time.Since(t1))
	}()
	if l.sb.Egress != nil {
		eg, err := l.r.newSidecar(l.sb)
		if err != nil {
			return nil, err
		}
		l.p.eg = eg
		eg.serveProxy(l.proxyLn)
		l.proxyLn = nil
	}
	if err := l.configure(); err != nil {
		if errors.Is(err, syscall.EPIPE) {
			// The init, or the runtime before it started one, is gone (a
			// runtime that refused the bundle, say): its exit says why.
			return nil, l.ended(ctx, err)
		}
		return nil, err
	}
	if err := l.awaitPort(ctx); err != nil {
		return nil, err
	}
	if err := l.limitCPU(); err != nil {
		return nil, err
	}
	return l.p, nil
}

// open opens the entrypoint log, the init's pipes and, for a sandbox with
// its own network namespace, the namespace and its listeners.
func (l *launcher) open() error {
	var err error
	if l.r.cfg.NoIsolation {
		if err := os.MkdirAll(filepath.Join(l.dir, plainRoot), 0o755); err != nil {
			return err
		}
	}
	if err := l.openLog(); err != nil {
		return err
	}
	if l.ctlR, l.ctlW, err = os.Pipe(); err != nil {
		return err
	}
	if l.stR, l.stW, err = os.Pipe(); err != nil {
		return err
	}
	if l.sb.Egress == nil {
		return nil
	}
	// A socket stays in the namespace it was made in: execd's listener is
	// made here, on a host loopback port, so the server reaches it although
	// the sandbox cannot reach the host.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("execd listener: %w", err)
	}
	l.execdLn, err = ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		return fmt.Errorf("execd listener: %w", err)
	}
	if err := l.r.makeRunDir(l.sb.ID, l.sb.IDBase); err != nil {
		return err
	}
	l.netns = l.r.netnsPath(l.sb.ID)
	if l.proxyLn, err = newNetns(l.netns); err != nil {
		l.netns = ""
		return fmt.Errorf("network namespace: %w", err)
	}
	return nil
}

// openLog opens the pipe the sandbox's processes write their output to
// (l.logf, their end) and starts draining it into the entrypoint log, bounded
// (entryLog). The drain ends once every process holding the pipe exited.
func (l *launcher) openLog() error {
	log, err := openEntryLog(filepath.Join(l.dir, "entrypoint.log"), l.r.cfg.EntrypointLogLimit)
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		log.f.Close()
		return err
	}
	l.logf = w
	l.drained = make(chan struct{})
	l.r.logs.Add(1)
	go func() {
		defer l.r.logs.Done()
		defer close(l.drained)
		log.drain(r)
	}()
	return nil
}

// command returns the process that runs the sandbox's init: the OCI
// runtime's foreground run of the sandbox's bundle or, without isolation,
// this binary re-executed as a plain host process.
func (l *launcher) command() (*exec.Cmd, error) {
	files := []*os.File{l.ctlR, l.stW, l.logf}
	if l.execdLn != nil {
		files = append(files, l.execdLn)
	}
	var cmd *exec.Cmd
	if l.r.cfg.NoIsolation {
		cmd = exec.Command("/proc/self/exe")
		cmd.Args = []string{"sandboxd-init", l.sb.ID}
		cmd.Env = []string{initEnv + "=init"}
		cmd.Dir = "/"
	} else {
		bundle, err := l.bundle()
		if err != nil {
			return nil, err
		}
		cmd = l.r.oci.runCmd(l.sb.ID, bundle, filepath.Join(bundle, "init.pid"), len(files))
	}
	cmd.ExtraFiles = files
	cmd.Stdout, cmd.Stderr = l.logf, l.logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd, nil
}

// bundle mounts the sandbox's root and its volumes and writes its OCI
// bundle.
func (l *launcher) bundle() (string, error) {
	base := l.sb.IDBase
	if err := l.r.makeRunDir(l.sb.ID, l.sb.IDBase); err != nil {
		return "", err
	}
	merged, err := l.r.mountRoot(l.dir, l.r.RootDir(l.sb.ID), base, l.fs)
	if err != nil {
		return "", fmt.Errorf("mount the root: %w", err)
	}
	if err := l.r.checkInit(merged, l.sb.Image); err != nil {
		return "", err
	}
	vols := make([]boundVolume, len(l.sb.Volumes))
	for i, v := range l.sb.Volumes {
		target := filepath.Join(l.r.runDir, l.sb.ID, "volumes", v.Name)
		if err := l.r.bindVolume(v, base, target); err != nil {
			return "", err
		}
		vols[i] = boundVolume{Destination: v.Destination, Mount: target, ReadOnly: v.ReadOnly}
	}
	sp, err := buildSpec(specInput{
		ID: l.sb.ID, Root: merged, InitBin: l.r.initBin(), Hostname: shortID(l.sb.ID), Netns: l.netns,
		Limits: l.sb.Limits, Pids: int64(l.r.cfg.MaxProcesses), ShmBytes: l.r.cfg.ShmSize,
		Cgroup: "/" + l.r.cfg.CgroupParent + "/" + l.sb.ID, Volumes: vols, IDBase: base,
		CPULater: l.r.oci.writesCgroups(),
	})
	if err != nil {
		return "", err
	}
	dir := filepath.Join(l.dir, "bundle")
	if err := writeBundle(dir, sp); err != nil {
		return "", fmt.Errorf("write the bundle: %w", err)
	}
	return dir, nil
}

// start starts cmd and the goroutines that read the init's status lines and
// wait for cmd.
func (l *launcher) start(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		if l.r.oci != nil {
			return fmt.Errorf("%w: start %s: %w", ErrIsolationUnavailable, cmd.Path, err)
		}
		return fmt.Errorf("start sandbox init: %w", err)
	}
	l.p = &Process{id: l.sb.ID, cmd: cmd, ctl: l.ctlW, rt: l.r.oci, dir: l.dir, netns: l.netns, done: make(chan struct{})}
	l.ctlW = nil
	if l.r.cfg.NoIsolation {
		l.p.initPID = cmd.Process.Pid
	}
	// The init holds the only write end of its status pipe: EOF means it
	// (or the runtime, before it started the init) exited. Likewise for its
	// log: the drain ends once the runtime and every process it started are
	// gone, and logTail then reads all they wrote.
	l.ctlR.Close()
	l.stW.Close()
	l.logf.Close()
	l.logf = nil
	l.ctlR, l.stW = nil, nil
	p, stR, execDone := l.p, l.stR, l.r.cfg.ExecDone
	l.stR = nil
	l.msgs = make(chan initMsg, 4)
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(l.msgs)
		defer stR.Close()
		sc := bufio.NewScanner(stR)
		for sc.Scan() {
			var m initMsg
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			if m.Exec != nil {
				if execDone != nil {
					execDone(time.Duration(*m.Exec * float64(time.Second)))
				}
				continue
			}
			if m.Port == 0 {
				p.mu.Lock()
				p.last = m
				p.mu.Unlock()
			}
			select {
			case l.msgs <- m:
			default: // nobody waits any more; the exit is recorded in last
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		// The init's last message (why it ended) may still be in the pipe
		// when its exit is seen: done waits for it, so that watch reads it
		// (found by make test-race-stress: an entrypoint's exit reported as
		// "sandbox init exited"). Bounded, in case a process that escaped the
		// sandbox's end still holds the write end.
		select {
		case <-read:
		case <-time.After(statusDrainTimeout):
		}
		close(p.done)
	}()
	return nil
}

// configure sends the init its configuration.
func (l *launcher) configure() error {
	var extraEnv []string
	if l.p.eg != nil {
		extraEnv = proxyEnv()
	}
	img := l.fs.Config()
	cfg := initConfig{
		ID:         l.sb.ID,
		Isolated:   l.p.rt != nil,
		Entrypoint: l.sb.Entrypoint,
		Env:        baseEnv(l.sb.ID, img.Env, extraEnv, l.sb.Env),
		WorkingDir: img.WorkingDir,
		User:       img.User,
		Token:      l.sb.ExecdToken,
		Netns:      l.sb.Egress != nil,
	}
	if l.r.cfg.NoIsolation {
		cfg.Root = filepath.Join(l.dir, plainRoot)
	}
	if l.p.eg != nil {
		cfg.CACert = string(l.p.eg.proxy.CACertPEM())
	}
	line, _ := json.Marshal(cfg)
	if _, err := l.p.ctl.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("configure sandbox init: %w", err)
	}
	return nil
}

// ended explains a start whose init could not be told its configuration
// (cause) because it was gone: its last status message or its exit.
func (l *launcher) ended(ctx context.Context, cause error) error {
	m, err := l.next(ctx)
	switch {
	case err != nil:
		return err
	case m.Port != 0: // not gone after all: the write failed for another reason
		return cause
	}
	return l.failure(m, true)
}

// next returns the init's next status message. The runtime exiting first
// (it died, or refused the bundle, while something it started still holds
// the status pipe) ends the start too.
func (l *launcher) next(ctx context.Context) (initMsg, error) {
	select {
	case m, ok := <-l.msgs:
		if !ok {
			return m, l.failure(m, false)
		}
		return m, nil
	case <-l.p.done:
		// The init's last word (its entrypoint's exit, say) may still be on
		// its way: the pipe closes once every writer is gone, or not at all
		// when an orphan of a dead runtime holds it.
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case m, ok := <-l.msgs:
			if ok {
				return m, nil
			}
			return m, l.failure(m, false)
		case <-t.C:
			return initMsg{}, l.failure(initMsg{}, false)
		}
	case <-ctx.Done():
		return initMsg{}, fmt.Errorf("sandbox start: %w", ctx.Err())
	}
}

// awaitPort waits for execd's port, then for the startup grace.
func (l *launcher) awaitPort(ctx context.Context) error {
	m, err := l.next(ctx)
	if err != nil {
		return err
	}
	if m.Port == 0 {
		return l.failure(m, true)
	}
	l.p.port = m.Port
	if l.p.rt != nil {
		// The runtime writes its pid file once the init runs: by now, or
		// about now.
		pid, err := awaitPIDFile(ctx, filepath.Join(l.dir, "bundle", "init.pid"), l.p.done)
		if errors.Is(err, errNoPIDFile) {
			return l.failure(initMsg{}, false) // the runtime died before it wrote one
		}
		if err != nil {
			return err
		}
		l.p.initPID = pid
	}
	if g := l.r.cfg.StartupGrace; g > 0 {
		t := time.NewTimer(g)
		defer t.Stop()
		select {
		case m, ok := <-l.msgs:
			return l.failure(m, ok)
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("sandbox start: %w", ctx.Err())
		}
	}
	return nil
}

// limitCPU writes the sandbox's CPU quota, which its spec left unlimited
// (specInput.CPULater), now that it runs: its start (the runtime's init
// compiling the seccomp profile, the sandbox init and execd starting) takes
// about 60 ms of CPU in its own cgroup, which under the quota took a sandbox
// of 100m six periods, 0.6 s, to start, and threw one of 500m's first
// commands past the end of a period. Its entrypoint runs unlimited for the
// startup grace at most. A quota that cannot be written fails the start: a
// sandbox never runs unlimited.
func (l *launcher) limitCPU() error {
	oci := l.r.oci
	if oci == nil || !oci.writesCgroups() || l.sb.Limits.MilliCPU <= 0 {
		return nil
	}
	quota, period := cpuBandwidth(l.sb.Limits.MilliCPU)
	if err := setCPULimit(oci.cgroupParent, l.sb.ID, quota, period); err != nil {
		return fmt.Errorf("sandbox CPU limit: %w", err)
	}
	return nil
}

// failure explains a start that ended with status message m (ok) or with the
// status pipe closed (!ok): a *startFailure, which Launch completes with the
// end of the log.
func (l *launcher) failure(m initMsg, ok bool) error {
	if !ok {
		<-l.p.done
		return &startFailure{msg: fmt.Sprintf("sandbox init exited during start-up: %s", l.p.cmd.ProcessState)}
	}
	return &startFailure{m: m, ok: true, exit: m.Exit != nil}
}

// closeFiles closes what the server no longer needs after a start.
func (l *launcher) closeFiles() {
	for _, f := range []*os.File{l.logf, l.ctlR, l.stW, l.ctlW, l.stR, l.execdLn} {
		if f != nil {
			f.Close()
		}
	}
	if l.proxyLn != nil {
		l.proxyLn.Close()
	}
}

// undo removes what a start that never ran an init set up.
func (l *launcher) undo() {
	if !l.r.cfg.NoIsolation {
		l.r.removeRunDir(l.sb.ID)
	}
}

// awaitPIDFile reads the pid the runtime writes for a sandbox's init, until
// ctx is done or the runtime has exited (exited closed) without writing it
// (errNoPIDFile): a runtime killed mid-create never will.
func awaitPIDFile(ctx context.Context, path string, exited <-chan struct{}) (int, error) {
	var b []byte
	var err error
	gone := false
	for d := 100 * time.Microsecond; ; d = min(2*d, 10*time.Millisecond) {
		if b, err = os.ReadFile(path); err == nil && len(b) > 0 {
			break
		}
		if gone {
			// Read once more after the exit: the runtime writes the file
			// before it waits for its init, so it never will now.
			return 0, errNoPIDFile
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the runtime's pid file: %w (%w)", ctx.Err(), err)
		case <-exited:
			gone = true
		case <-time.After(d):
		}
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("the runtime's pid file holds %q", b)
	}
	return pid, nil
}

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

// logTail returns the end of the entrypoint log of the sandbox whose
// directory is dir, for failure messages.
func logTail(dir string) string {
	f, err := os.Open(filepath.Join(dir, "entrypoint.log"))
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

// Kill stops every process of the sandbox, waits for its init, removes the
// container and undoes the sandbox's mounts and network namespace. Safe to
// call more than once.
func (r *Runtime) Kill(p *Process) {
	_ = p.ctl.Close() // the init kills its children and exits
	if p.rt == nil {
		r.killPlain(p)
		p.eg.close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.mu.Lock()
	frozen := p.frozen
	p.frozen = false
	p.mu.Unlock()
	if frozen {
		_ = p.rt.resume(ctx, p.id) // frozen tasks do not die until thawed
	}
	select {
	case <-p.done:
	case <-time.After(time.Second):
		_ = p.rt.kill(ctx, p.id)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			r.log.Error("sandboxd: the runtime did not exit after SIGKILL of the sandbox", "id", p.id)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	if err := p.rt.delete(ctx, p.id); err != nil {
		r.log.Warn("sandboxd: delete the container", "id", p.id, "err", err)
	}
	killCgroup(r.cfg.CgroupParent, p.id)
	p.eg.close()
	r.removeRunDir(p.id)
	if err := unmountSandbox(p.dir); err != nil {
		r.log.Warn("sandboxd: unmount the sandbox", "id", p.id, "err", err)
	}
}

// killPlain kills a sandbox without isolation: its init and every descendant.
func (r *Runtime) killPlain(p *Process) {
	tree := proctree.Descendants(p.pid())
	_ = p.cmd.Process.Kill()
	for _, pid := range tree {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		r.log.Error("sandboxd: sandbox init did not exit after SIGKILL", "pid", p.pid())
	}
}

// Freeze pauses every process of the sandbox: the runtime's pause (the
// cgroup freezer, written directly for runc and crun) or, without isolation,
// SIGSTOP of the process tree.
func (r *Runtime) Freeze(ctx context.Context, p *Process) error {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
	if p.rt != nil {
		// A freeze gives up (runc's "unable to freeze", or errFreezeTimeout)
		// when the cgroup freezer does not settle in time, which a loaded
		// machine makes happen; it thaws back then, so trying again is safe.
		var err error
		for wait := 20 * time.Millisecond; ; wait *= 2 {
			if err = p.rt.pause(ctx, p.id); err == nil {
				return nil
			}
			if wait > time.Second {
				return err
			}
			select {
			case <-ctx.Done():
				return err
			case <-time.After(wait):
			}
		}
	}
	// A second pass stops children forked while the first one ran.
	if err := signalTree(p.pid(), syscall.SIGSTOP); err != nil {
		return err
	}
	return signalTree(p.pid(), syscall.SIGSTOP)
}

// Thaw resumes a paused sandbox.
func (r *Runtime) Thaw(ctx context.Context, p *Process) error {
	p.mu.Lock()
	p.frozen = false
	p.mu.Unlock()
	if p.rt != nil {
		return p.rt.resume(ctx, p.id)
	}
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

// runtimeRoot is the OCI runtime's state directory (--root).
func (r *Runtime) runtimeRoot() string { return filepath.Join(r.cfg.DataDir, "run", "runtime") }

// CleanLeftovers removes what a sandbox of an earlier run of the server left
// behind: its container (thawed and killed), its network namespace and its
// mounts.
func (r *Runtime) CleanLeftovers(id string) {
	dir := r.sandboxDir(id)
	if !r.cfg.NoIsolation {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if rt, err := lookRuntime(ctx, r.cfg.Runtime, r.runtimeRoot(), r.cfg.CgroupParent, r.cfg.AllowOldRuntime); err == nil && !rt.gone(ctx, id) {
			_ = rt.resume(ctx, id)
			if err := rt.delete(ctx, id); err != nil {
				r.log.Warn("sandboxd: remove a container of an earlier run", "id", id, "err", err)
			}
		}
		killCgroup(r.cfg.CgroupParent, id)
	}
	r.removeRunDir(id)
	if err := unmountSandbox(dir); err != nil {
		r.log.Warn("sandboxd: unmount a sandbox of an earlier run", "id", id, "err", err)
	}
}

// PrepareDisk gives an isolated sandbox its disk (Config.DiskQuota) with
// the directories of its layers, before a snapshot is restored into them.
func (r *Runtime) PrepareDisk(ctx context.Context, id string) error {
	if r.cfg.NoIsolation {
		return nil
	}
	dir := r.sandboxDir(id)
	mnt := filepath.Join(dir, diskDir)
	if r.cfg.DiskQuota > 0 {
		img := filepath.Join(dir, diskImage)
		if !r.disks.take(img) {
			if err := formatDisk(ctx, img, r.cfg.DiskQuota); err != nil {
				return fmt.Errorf("sandbox disk: %w", err)
			}
		}
		r.RefillDisks()
		if err := mountDisk(img, mnt); err != nil {
			return fmt.Errorf("sandbox disk: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(mnt, layersDir, "upper"), 0o755); err != nil {
		return err
	}
	return nil
}

// prepareRuntime makes the server's run directory and places the init
// binary (this executable) there, where the runtime can bind-mount it into
// every sandbox. The runtime mounts from inside the sandbox's user namespace,
// whose root must traverse the way to the init and to each sandbox's root:
// the run directory and its parents are world-traversable (0711), while the
// data directory may be private.
func (r *Runtime) prepareRuntime(ctx context.Context) error {
	if r.cfg.DiskQuota > 0 {
		// Spare disks of an earlier run may be of another size: start afresh.
		dir := filepath.Join(r.cfg.DataDir, "run", "disks")
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		r.disks = &diskPool{dir: dir, size: r.cfg.DiskQuota, want: 2}
	}
	for _, d := range []string{filepath.Dir(r.runDir), r.runDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	exe, err := r.initBinary(ctx)
	if err != nil {
		return err
	}
	r.log.Info("sandboxd: the sandbox init", "init", exe)
	if r.initInterp, r.initLibs, err = elfDeps(exe); err != nil {
		return err
	}
	if r.initInterp != "" {
		r.log.Warn("sandboxd: the sandbox init is dynamically linked: it runs only in images that have its libraries (the host image does); build sandboxd with CGO_ENABLED=0 or set --init-binary",
			"init", exe, "interpreter", r.initInterp, "libraries", r.initLibs)
	}
	dst := r.initBin()
	tmp := dst + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Link(exe, tmp); err != nil {
		if err := copyFile(exe, tmp, 0o755); err != nil {
			return fmt.Errorf("place the sandbox init: %w", err)
		}
	}
	return os.Rename(tmp, dst)
}

// RemoveRuntimeDirs removes a stopped sandbox's filesystem layers, keeping its
// record and entrypoint log.
func (r *Runtime) RemoveRuntimeDirs(id string) {
	dir := r.sandboxDir(id)
	if err := unmountSandbox(dir); err != nil {
		r.log.Warn("sandboxd: unmount sandbox", "id", id, "err", err)
	}
	if !waitUnmounted(dir, 5*time.Second) {
		r.log.Warn("sandboxd: sandbox still has mounts; its layers stay", "id", id)
		return
	}
	for _, d := range []string{diskDir, diskImage, "bundle", plainRoot} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			r.log.Warn("sandboxd: remove sandbox layer", "id", id, "dir", d, "err", err)
		}
	}
}

// makeRunDir makes the sandbox's directory in the run directory, where its
// root, its volumes' mounts and its network namespace are: mode 0700, owned
// by the sandbox's root, which alone must traverse it (the runtime mounts
// from inside the sandbox's user namespace). No other host user, and no
// other sandbox, reaches its root through it.
func (r *Runtime) makeRunDir(id string, base uint32) error {
	d := filepath.Join(r.runDir, id)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(d, 0o700); err != nil {
		return err
	}
	return os.Lchown(d, int(base), int(base))
}

// initBin is the host path of the init binary every sandbox runs.
func (r *Runtime) initBin() string { return filepath.Join(r.runDir, "init") }

// RootDir is where sandbox id's root is mounted (the bundle's rootfs).
func (r *Runtime) RootDir(id string) string { return filepath.Join(r.runDir, id, "rootfs") }

// netnsPath is where sandbox id's network namespace is bound.
func (r *Runtime) netnsPath(id string) string { return filepath.Join(r.runDir, id, "netns") }

// removeRunDirs removes the server's run directory at Close: the init
// binary and every sandbox directory with nothing mounted in it (never
// through a mount).
func (r *Runtime) removeRunDirs() error {
	if err := os.Remove(r.initBin()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ents, _ := os.ReadDir(r.runDir)
	for _, e := range ents {
		r.removeRunDir(e.Name())
	}
	if err := os.Remove(r.runDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the run directory: %w", err)
	}
	return nil
}

// removeRunDir undoes what the run directory holds for sandbox id.
func (r *Runtime) removeRunDir(id string) {
	removeNetns(r.netnsPath(id))
	d := filepath.Join(r.runDir, id)
	if err := unmountSandbox(d); err != nil {
		r.log.Warn("sandboxd: unmount a sandbox root", "id", id, "err", err)
	}
	if waitUnmounted(d, 5*time.Second) {
		_ = os.RemoveAll(d)
	} else {
		r.log.Warn("sandboxd: a sandbox root stays mounted", "id", id, "dir", d)
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// RefillDisks formats disk images for the pool in the background.
func (r *Runtime) RefillDisks() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.disks == nil {
		return
	}
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		ctx, cancel := r.untilStop(time.Minute)
		defer cancel()
		if err := r.disks.fill(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("sandboxd: format a spare sandbox disk", "err", err)
		}
	}()
}
