package sandboxd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
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

// proc is a running sandbox as seen from the server: its init process, the
// control pipe that keeps it alive and its status messages.
type proc struct {
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

func (p *proc) pid() int { return p.initPID }

// lastMsg returns the last status message received.
func (p *proc) lastMsg() initMsg {
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
	s   *Server
	rec *record
	fs  rootfs
	dir string
	p   *proc // nil until the init runs

	logf      *os.File
	ctlR, stW *os.File // the init's ends of its pipes
	ctlW, stR *os.File // the server's ends
	execdLn   *os.File // a host loopback listener for execd (own netns only)
	netns     string
	proxyLn   net.Listener
	msgs      chan initMsg
}

// launch starts a sandbox's init and waits until execd listens and the
// entrypoint survived the startup grace. On error nothing of the sandbox is
// left running or mounted.
func (s *Server) launch(ctx context.Context, rec *record, fs rootfs) (*proc, error) {
	l := &launcher{s: s, rec: rec, fs: fs, dir: s.sandboxDir(rec.ID)}
	p, err := l.run(ctx)
	l.closeFiles()
	if err != nil {
		if l.p != nil {
			s.kill(l.p)
		} else {
			l.undo()
		}
		return nil, err
	}
	return p, nil
}

func (l *launcher) run(ctx context.Context) (*proc, error) {
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
		l.s.log.Debug("sandboxd: launch", "id", l.rec.ID, "prepare", t1.Sub(t0), "run", time.Since(t1))
	}()
	if l.rec.Egress {
		eg, err := l.s.newSidecar(l.rec)
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
	return l.p, nil
}

// open opens the entrypoint log, the init's pipes and, for a sandbox with
// its own network namespace, the namespace and its listeners.
func (l *launcher) open() error {
	var err error
	if l.s.cfg.NoIsolation {
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
	if !l.rec.Egress {
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
	if err := l.s.makeRunDir(l.rec); err != nil {
		return err
	}
	l.netns = l.s.netnsPath(l.rec.ID)
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
	log, err := openEntryLog(filepath.Join(l.dir, "entrypoint.log"), l.s.cfg.EntrypointLogLimit)
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		log.f.Close()
		return err
	}
	l.logf = w
	done := make(chan struct{})
	l.s.logMu.Lock()
	l.s.logDone[l.rec.ID] = done
	l.s.logMu.Unlock()
	l.s.logs.Add(1)
	go func() {
		defer l.s.logs.Done()
		defer close(done)
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
	if l.s.cfg.NoIsolation {
		cmd = exec.Command("/proc/self/exe")
		cmd.Args = []string{"sandboxd-init", l.rec.ID}
		cmd.Env = []string{initEnv + "=init"}
		cmd.Dir = "/"
	} else {
		bundle, err := l.bundle()
		if err != nil {
			return nil, err
		}
		cmd = l.s.rt.runCmd(l.rec.ID, bundle, filepath.Join(bundle, "init.pid"), len(files))
	}
	cmd.ExtraFiles = files
	cmd.Stdout, cmd.Stderr = l.logf, l.logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd, nil
}

// bundle mounts the sandbox's root and its volumes and writes its OCI
// bundle.
func (l *launcher) bundle() (string, error) {
	base := l.rec.idBase()
	if err := l.s.makeRunDir(l.rec); err != nil {
		return "", err
	}
	merged, err := l.s.mountRoot(l.dir, l.s.rootDir(l.rec.ID), base, l.fs)
	if err != nil {
		return "", fmt.Errorf("mount the root: %w", err)
	}
	if err := l.s.checkInit(merged, l.rec.imageURI()); err != nil {
		return "", err
	}
	vols := make([]boundVolume, len(l.rec.Volumes))
	for i, v := range l.rec.Volumes {
		target := filepath.Join(l.s.runDir, l.rec.ID, "volumes", v.Name)
		if err := l.s.bindVolume(v, base, target); err != nil {
			return "", err
		}
		vols[i] = boundVolume{Destination: v.Destination, Mount: target, ReadOnly: v.ReadOnly}
	}
	sp, err := buildSpec(specInput{
		ID: l.rec.ID, Root: merged, InitBin: l.s.initBin(), Hostname: shortID(l.rec.ID), Netns: l.netns,
		Limits: l.rec.Limits, Pids: int64(l.s.cfg.MaxProcesses), ShmBytes: l.s.cfg.ShmSize,
		Cgroup: "/" + l.s.cfg.CgroupParent + "/" + l.rec.ID, Volumes: vols, IDBase: base,
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
		if l.s.rt != nil {
			return fmt.Errorf("%w: start %s: %w", ErrIsolationUnavailable, cmd.Path, err)
		}
		return fmt.Errorf("start sandbox init: %w", err)
	}
	l.p = &proc{id: l.rec.ID, cmd: cmd, ctl: l.ctlW, rt: l.s.rt, dir: l.dir, netns: l.netns, done: make(chan struct{})}
	l.ctlW = nil
	if l.s.cfg.NoIsolation {
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
	p, stR := l.p, l.stR
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
	img := l.fs.config()
	cfg := initConfig{
		ID:         l.rec.ID,
		Isolated:   l.p.rt != nil,
		SandboxDir: l.dir,
		Entrypoint: l.rec.Entrypoint,
		Env:        baseEnv(l.rec.ID, img.Env, extraEnv, l.rec.Env),
		WorkingDir: img.WorkingDir,
		User:       img.User,
		Token:      l.rec.ExecdToken,
		Netns:      l.rec.Egress,
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
	if g := l.s.cfg.StartupGrace; g > 0 {
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

// failure explains a start that ended with status message m (ok) or with the
// status pipe closed (!ok).
func (l *launcher) failure(m initMsg, ok bool) error {
	if !ok {
		<-l.p.done
		return fmt.Errorf("sandbox init exited during start-up: %s; %s", l.p.cmd.ProcessState, l.s.logTail(l.rec.ID))
	}
	err := errors.New(describeMsg(m, l.s.logTail(l.rec.ID)))
	if m.Exit != nil {
		return &exitError{err}
	}
	return err
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
	if !l.s.cfg.NoIsolation {
		l.s.removeRunDir(l.rec.ID)
	}
}

// errNoPIDFile: the runtime exited without writing its pid file.
var errNoPIDFile = errors.New("the runtime exited before it wrote its pid file")

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

// logTail returns the end of a sandbox's entrypoint log, for failure
// messages: once its processes are gone, all they wrote (it waits up to 2 s
// for the log's drain to reach the end of its pipe).
func (s *Server) logTail(id string) string {
	s.logMu.Lock()
	done := s.logDone[id]
	s.logMu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
	}
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

// kill stops every process of the sandbox, waits for its init, removes the
// container and undoes the sandbox's mounts and network namespace. Safe to
// call more than once.
func (s *Server) kill(p *proc) {
	_ = p.ctl.Close() // the init kills its children and exits
	if p.rt == nil {
		s.killPlain(p)
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
			s.log.Error("sandboxd: the runtime did not exit after SIGKILL of the sandbox", "id", p.id)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	if err := p.rt.delete(ctx, p.id); err != nil {
		s.log.Warn("sandboxd: delete the container", "id", p.id, "err", err)
	}
	killCgroup(s.cfg.CgroupParent, p.id)
	p.eg.close()
	s.removeRunDir(p.id)
	if err := unmountSandbox(p.dir); err != nil {
		s.log.Warn("sandboxd: unmount the sandbox", "id", p.id, "err", err)
	}
}

// killPlain kills a sandbox without isolation: its init and every descendant.
func (s *Server) killPlain(p *proc) {
	tree := proctree.Descendants(p.pid())
	_ = p.cmd.Process.Kill()
	for _, pid := range tree {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		s.log.Error("sandboxd: sandbox init did not exit after SIGKILL", "pid", p.pid())
	}
}

// freeze pauses every process of the sandbox: the runtime's pause (the
// cgroup freezer, written directly for runc and crun) or, without isolation,
// SIGSTOP of the process tree.
func (s *Server) freeze(ctx context.Context, p *proc) error {
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

// thaw resumes a paused sandbox.
func (s *Server) thaw(ctx context.Context, p *proc) error {
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
func (s *Server) runtimeRoot() string { return filepath.Join(s.dataDir, "run", "runtime") }

// cleanLeftovers removes what a sandbox of an earlier run of the server left
// behind: its container (thawed and killed), its network namespace and its
// mounts.
func (s *Server) cleanLeftovers(id string) {
	dir := s.sandboxDir(id)
	if !s.cfg.NoIsolation {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if rt, err := lookRuntime(ctx, s.cfg.Runtime, s.runtimeRoot(), s.cfg.CgroupParent, s.cfg.AllowOldRuntime); err == nil && !rt.gone(ctx, id) {
			_ = rt.resume(ctx, id)
			if err := rt.delete(ctx, id); err != nil {
				s.log.Warn("sandboxd: remove a container of an earlier run", "id", id, "err", err)
			}
		}
		killCgroup(s.cfg.CgroupParent, id)
	}
	s.removeRunDir(id)
	if err := unmountSandbox(dir); err != nil {
		s.log.Warn("sandboxd: unmount a sandbox of an earlier run", "id", id, "err", err)
	}
}

// prepareDisk gives an isolated sandbox its disk (Config.DiskQuota) with
// the directories of its layers, before a snapshot is restored into them.
func (s *Server) prepareDisk(ctx context.Context, id string) error {
	if s.cfg.NoIsolation {
		return nil
	}
	dir := s.sandboxDir(id)
	mnt := filepath.Join(dir, diskDir)
	if s.cfg.DiskQuota > 0 {
		img := filepath.Join(dir, diskImage)
		if !s.disks.take(img) {
			if err := formatDisk(ctx, img, s.cfg.DiskQuota); err != nil {
				return fmt.Errorf("sandbox disk: %w", err)
			}
		}
		s.refillDisks()
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
func (s *Server) prepareRuntime() error {
	if s.cfg.DiskQuota > 0 {
		// Spare disks of an earlier run may be of another size: start afresh.
		dir := filepath.Join(s.dataDir, "run", "disks")
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		s.disks = &diskPool{dir: dir, size: s.cfg.DiskQuota, want: 2}
	}
	for _, d := range []string{filepath.Dir(s.runDir), s.runDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	exe := s.cfg.InitBinary
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("find the sandbox init: %w", err)
		}
	}
	var err error
	if s.initInterp, s.initLibs, err = elfDeps(exe); err != nil {
		return err
	}
	if s.initInterp != "" {
		s.log.Warn("sandboxd: the sandbox init is dynamically linked: it runs only in images that have its libraries (the host image does); build sandboxd with CGO_ENABLED=0 or set --init-binary",
			"init", exe, "interpreter", s.initInterp, "libraries", s.initLibs)
	}
	dst := s.initBin()
	tmp := dst + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Link(exe, tmp); err != nil {
		if err := copyFile(exe, tmp, 0o755); err != nil {
			return fmt.Errorf("place the sandbox init: %w", err)
		}
	}
	return os.Rename(tmp, dst)
}

// makeRunDir makes the sandbox's directory in the run directory, where its
// root, its volumes' mounts and its network namespace are: mode 0700, owned
// by the sandbox's root, which alone must traverse it (the runtime mounts
// from inside the sandbox's user namespace). No other host user, and no
// other sandbox, reaches its root through it.
func (s *Server) makeRunDir(rec *record) error {
	d := filepath.Join(s.runDir, rec.ID)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(d, 0o700); err != nil {
		return err
	}
	base := int(rec.idBase())
	return os.Lchown(d, base, base)
}

// initBin is the host path of the init binary every sandbox runs.
func (s *Server) initBin() string { return filepath.Join(s.runDir, "init") }

// rootDir is where sandbox id's root is mounted (the bundle's rootfs).
func (s *Server) rootDir(id string) string { return filepath.Join(s.runDir, id, "rootfs") }

// netnsPath is where sandbox id's network namespace is bound.
func (s *Server) netnsPath(id string) string { return filepath.Join(s.runDir, id, "netns") }

// removeRunDirs removes the server's run directory at Close: the init
// binary and every sandbox directory with nothing mounted in it (never
// through a mount).
func (s *Server) removeRunDirs() error {
	if err := os.Remove(s.initBin()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ents, _ := os.ReadDir(s.runDir)
	for _, e := range ents {
		s.removeRunDir(e.Name())
	}
	if err := os.Remove(s.runDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the run directory: %w", err)
	}
	return nil
}

// removeRunDir undoes what the run directory holds for sandbox id.
func (s *Server) removeRunDir(id string) {
	removeNetns(s.netnsPath(id))
	d := filepath.Join(s.runDir, id)
	if err := unmountSandbox(d); err != nil {
		s.log.Warn("sandboxd: unmount a sandbox root", "id", id, "err", err)
	}
	if waitUnmounted(d, 5*time.Second) {
		_ = os.RemoveAll(d)
	} else {
		s.log.Warn("sandboxd: a sandbox root stays mounted", "id", id, "dir", d)
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

// refillDisks formats disk images for the pool in the background.
func (s *Server) refillDisks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.disks == nil {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := s.untilStop(time.Minute)
		defer cancel()
		if err := s.disks.fill(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("sandboxd: format a spare sandbox disk", "err", err)
		}
	}()
}
