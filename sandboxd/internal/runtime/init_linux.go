package runtime

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/egress"
	"github.com/alineo-labs/alineo/sandboxd/internal/oomscore"
	"github.com/alineo-labs/alineo/sandboxd/internal/proctree"
	"golang.org/x/sys/unix"
)

// initEnv selects the role of a re-executed sandboxd binary: "init" (a
// sandbox's PID 1), "execd" (its execd server), "userns" (the holder of the
// user namespace idmapped mounts are made with), "idle" (an entrypoint that
// waits) or "identify" (its answer to sandboxd, which checks an init binary
// before it binds it into sandboxes).
const initEnv = "ALINEO_SANDBOXD_INIT"

// File descriptors handed to a re-executed init (ExtraFiles start at 3).
const (
	fdCtl    = 3 // server → init: the config line, then held open; EOF = server gone
	fdStatus = 4 // init → server: JSON status lines
	fdLog    = 5 // the entrypoint log (append)
	// With a network namespace of its own (initConfig.Netns):
	fdExecdHost = 6 // a listener on a host loopback port, for execd
)

// execdTmp is the $TMPDIR of the execd of an isolated sandbox: a tmpfs, kept
// out of the overlay that snapshots capture.
const execdTmp = "/dev/shm"

// File descriptors handed to the execd child.
const (
	fdExecdListener = 3
	fdexecdConfig   = 4
	fdExecdStats    = 5 // execd → init: the seconds of each command, a line each
)

// initConfig is what the server sends the init.
type initConfig struct {
	ID string `json:"id"`
	// Isolated: the init runs under the OCI runtime, in its container.
	Isolated bool `json:"isolated"`
	// Root is, without isolation, the sandbox's root directory on the host
	// (its plain root, under the sandbox's directory).
	Root       string   `json:"root,omitempty"`
	Entrypoint []string `json:"entrypoint"`
	Env        []string `json:"env"`
	// WorkingDir is the image's: the entrypoint's cwd and the default cwd of
	// execd's commands (created if missing, as Docker does).
	WorkingDir string `json:"workingDir,omitempty"`
	// User is the image's ("uid", "uid:gid", "name", "name:group"): the
	// entrypoint and execd's commands run as that user by default.
	User  string `json:"user,omitempty"`
	Token string `json:"token"`
	// Netns: the sandbox has its own network namespace (the server made it,
	// and serves the egress proxy on 127.0.0.1:ProxyPort there); execd serves
	// on fdExecdHost.
	Netns bool `json:"netns,omitempty"`
	// CACert is the egress CA (PEM) to add to the sandbox's trust store.
	CACert string `json:"caCert,omitempty"`
}

// initMsg is one status line from the init.
type initMsg struct {
	Port int `json:"port,omitempty"`
	// Exec is the seconds a command took in execd (from its request to the
	// end of its answer); such a message says nothing of the init's state.
	Exec   *float64 `json:"exec,omitempty"`
	Exit   *int     `json:"exit,omitempty"`
	Signal string   `json:"signal,omitempty"`
	Execd  string   `json:"execd,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// ExecdConfig is what the sandbox init passes to the ExecdFactory of its
// Roles.
type ExecdConfig struct {
	Token  string
	Root   string
	Env    []string
	Logger *slog.Logger
	// OOMScoreAdj, when not 0, is the oom_score_adj of every command.
	OOMScoreAdj int
	// Cwd, UID and GID are the defaults of commands (the image's WorkingDir
	// and User).
	Cwd      string
	UID, GID *uint32
	// CommandDone is told how long each command request took (execd's
	// Config.CommandDone); the init forwards it to the server.
	CommandDone func(time.Duration)
}

// ExecdFactory builds the execd handler a sandbox serves, inside the
// sandbox, and the func that closes it.
type ExecdFactory func(ExecdConfig) (http.Handler, func() error, error)

// Roles is what a re-executed sandboxd binary takes from the program it is
// linked into (package sandboxd) to play its roles.
type Roles struct {
	// Execd builds the execd handler of the execd role.
	Execd ExecdFactory
	// IdleEntrypoint is the entrypoint a sandbox created from a snapshot
	// gets by default (the protocol's tail -f /dev/null): in an image
	// without its command, the init runs this binary's idle role instead.
	IdleEntrypoint []string
}

// RunRole plays the role the environment variable ALINEO_SANDBOXD_INIT
// names, then exits the process; without the variable it returns at once.
// Package sandboxd calls it from a package-level init function, before main
// (or a test's main) runs, so that every binary that imports sandboxd can
// act as a sandbox init.
func RunRole(roles Roles) {
	switch os.Getenv(initEnv) {
	case "":
		return
	case "init":
		os.Exit(runInit(roles.IdleEntrypoint))
	case "execd":
		os.Exit(runExecdChild(roles.Execd))
	case "userns":
		os.Exit(runUserns())
	case "idle":
		os.Exit(runIdle())
	case "identify":
		os.Exit(runIdentify())
	default:
		fmt.Fprintf(os.Stderr, "sandboxd: unknown %s role %q\n", initEnv, os.Getenv(initEnv))
		os.Exit(2)
	}
}

// spareThreads is how many idle OS threads the init and execd keep: a
// sandbox at its pids limit (a fork bomb) cannot create threads, and a Go
// program that needs one then and cannot make it aborts. With spares, the
// init and execd keep answering while the sandbox's own work is refused.
const spareThreads = 16

// reserveThreads makes the Go runtime start n OS threads now and keep them
// idle for later: each of n goroutines holds a thread of its own until all
// have one, then lets it go back to the runtime's pool.
func reserveThreads(n int) {
	var ready sync.WaitGroup
	release := make(chan struct{})
	ready.Add(n)
	for range n {
		go func() {
			goruntime.LockOSThread()
			ready.Done()
			<-release
			goruntime.UnlockOSThread()
		}()
	}
	ready.Wait()
	close(release)
}

func runInit(idleEntrypoint []string) int {
	reserveThreads(spareThreads)
	// Nothing the init starts inherits its descriptors but those passed on
	// purpose: a sandbox process must not forge status lines.
	for _, fd := range []int{fdCtl, fdStatus, fdLog, fdExecdHost} {
		unix.CloseOnExec(fd)
	}
	ctl := os.NewFile(fdCtl, "ctl")
	status := os.NewFile(fdStatus, "status")
	logf := os.NewFile(fdLog, "log")
	enc := json.NewEncoder(status)
	var reportMu sync.Mutex // the stats forwarder reports too
	report := func(m initMsg) {
		reportMu.Lock()
		defer reportMu.Unlock()
		_ = enc.Encode(m)
	}
	fail := func(format string, args ...any) int {
		msg := fmt.Sprintf(format, args...)
		report(initMsg{Error: msg})
		fmt.Fprintln(logf, "sandboxd init:", msg)
		return 1
	}

	br := bufio.NewReader(ctl)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return fail("read config: %v", err)
	}
	var cfg initConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		return fail("decode config: %v", err)
	}
	root, err := setupEnv(&cfg)
	if err != nil {
		return fail("%v", err)
	}

	workDir := root
	if cfg.WorkingDir != "" {
		workDir = filepath.Join(root, cfg.WorkingDir)
		if err := os.MkdirAll(workDir, 0o755); err != nil {
			return fail("working directory %s: %v", cfg.WorkingDir, err)
		}
	}
	var cred *syscall.Credential
	var execdUID, execdGID *uint32
	if cfg.User != "" {
		uid, gid, err := imageUser(root, cfg.User)
		if err != nil {
			return fail("the image's user: %v", err)
		}
		cred = &syscall.Credential{Uid: uid, Gid: gid, NoSetGroups: true}
		execdUID, execdGID = &uid, &gid
	}

	execd, port, stats, err := startExecd(&cfg, root, logf, execdUID, execdGID)
	if err != nil {
		return fail("%v", err)
	}
	go forwardStats(stats, report)

	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return fail("open %s: %v", os.DevNull, err)
	}
	entry := exec.Command(cfg.Entrypoint[0], cfg.Entrypoint[1:]...)
	entry.Env = cfg.Env
	if slices.Equal(cfg.Entrypoint, idleEntrypoint) && entry.Err != nil {
		// The default entrypoint of a restore, in an image without tail:
		// this binary does what it does (nothing, until killed).
		entry = exec.Command("/proc/self/exe")
		entry.Args = []string{"sandboxd-idle"}
		entry.Env = append([]string{initEnv + "=idle"}, cfg.Env...)
	}
	entry.Dir = workDir
	entry.Stdin, entry.Stdout, entry.Stderr = devnull, logf, logf
	entry.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: cred}
	if !cfg.Isolated {
		entry.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	// The entrypoint is the sandbox's own work: the OOM killer takes it
	// before the init or execd.
	if err := oomscore.Start(entry, workAdj(cfg.Isolated)); err != nil {
		_ = execd.Process.Kill()
		return fail("start entrypoint %q: %v", cfg.Entrypoint[0], err)
	}
	report(initMsg{Port: port})

	// The server holds the control pipe open; EOF means it is gone.
	killAll := func() {
		if !cfg.Isolated {
			// Not PID 1: nothing kills the tree for us when we exit, so take
			// every descendant (orphans were re-parented to us, the subreaper).
			for _, pid := range proctree.Descendants(os.Getpid()) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = syscall.Kill(-execd.Process.Pid, syscall.SIGKILL)
		_ = syscall.Kill(-entry.Process.Pid, syscall.SIGKILL)
		_ = execd.Process.Kill()
		_ = entry.Process.Kill()
	}
	go func() {
		_, _ = io.Copy(io.Discard, br)
		killAll()
		os.Exit(0)
	}()

	return reap(entry.Process.Pid, execd.Process.Pid, report, killAll)
}

// setupEnv sets the init's environment from cfg, installs the egress CA
// (adding its variables to cfg.Env) and returns the sandbox's root as the
// init sees it.
func setupEnv(cfg *initConfig) (string, error) {
	os.Clearenv()
	for _, kv := range cfg.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			os.Setenv(k, v)
		}
	}
	root := "/"
	if cfg.Isolated {
		if cfg.CACert != "" {
			bundle, err := installCA([]byte(cfg.CACert))
			if err != nil {
				return "", fmt.Errorf("install the egress CA: %w", err)
			}
			for _, kv := range caEnv(bundle) {
				k, v, _ := strings.Cut(kv, "=")
				os.Setenv(k, v)
				cfg.Env = append(cfg.Env, kv)
			}
		}
	} else {
		root = cfg.Root
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}

	return root, nil
}

// startExecd starts execd as a child on its listener (the host's, passed in,
// for a sandbox with its own network namespace) and sends it its
// configuration. It returns the process and execd's port.
func startExecd(cfg *initConfig, root string, logf *os.File, uid, gid *uint32) (*exec.Cmd, int, *os.File, error) {
	var ln net.Listener
	var err error
	if cfg.Netns {
		f := os.NewFile(fdExecdHost, "execd-listener")
		ln, err = net.FileListener(f)
		f.Close()
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return nil, 0, nil, fmt.Errorf("listen: %w", err)
	}
	lnf, err := ln.(*net.TCPListener).File()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("listener file: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port

	cr, cw, err := os.Pipe()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("pipe: %w", err)
	}
	sr, sw, err := os.Pipe()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("pipe: %w", err)
	}
	execd := exec.Command("/proc/self/exe")
	execd.Args = []string{"sandboxd-execd"}
	execd.Env = append([]string{initEnv + "=execd"}, cfg.Env...)
	if cfg.Isolated {
		// execd keeps background command logs and session state in a
		// directory under $TMPDIR. /tmp is part of the snapshotted root, so
		// that state goes to the tmpfs /dev/shm instead: it is the running
		// execd's own, and a snapshot must neither copy a command's output to
		// disk nor restore a dead execd's files into a new sandbox. Only
		// execd's own environment changes; commands get cfg.Env.
		execd.Env = append(execd.Env, "TMPDIR="+execdTmp)
	}
	execd.Dir = root
	execd.ExtraFiles = []*os.File{lnf, cr, sw}
	execd.Stdout, execd.Stderr = logf, logf
	execd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !cfg.Isolated {
		execd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	err = execd.Start()
	sw.Close()
	if err != nil {
		sr.Close()
		return nil, 0, nil, fmt.Errorf("start execd: %w", err)
	}
	cr.Close()
	lnf.Close()
	ln.Close()
	if err := json.NewEncoder(cw).Encode(execdChildConfig{Token: cfg.Token, Root: root, Env: cfg.Env, OOMScoreAdj: workAdj(cfg.Isolated),
		Cwd: cfg.WorkingDir, UID: uid, GID: gid}); err != nil {
		_ = execd.Process.Kill()
		sr.Close()
		return nil, 0, nil, fmt.Errorf("configure execd: %w", err)
	}
	cw.Close()
	return execd, port, sr, nil
}

// forwardStats reports each line execd writes to stats, a command's
// seconds, as an initMsg; other lines are dropped. It returns when execd
// closes its end.
func forwardStats(stats *os.File, report func(initMsg)) {
	defer stats.Close()
	sc := bufio.NewScanner(stats)
	for sc.Scan() {
		secs, err := strconv.ParseFloat(string(sc.Bytes()), 64)
		if err != nil || secs < 0 || math.IsInf(secs, 0) || math.IsNaN(secs) {
			continue
		}
		report(initMsg{Exec: &secs})
	}
}

// reap is PID 1's loop: it reaps every child and returns when the
// entrypoint or execd exits, reporting why.
func reap(entryPID, execdPID int, report func(initMsg), killAll func()) int {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// No children left (cannot happen while the entrypoint lives).
			time.Sleep(10 * time.Millisecond)
			continue
		}
		switch pid {
		case entryPID:
			code := ws.ExitStatus()
			m := initMsg{Exit: &code}
			if ws.Signaled() {
				code = -1
				m.Signal = ws.Signal().String()
			}
			report(m)
			killAll()
			return 0
		case execdPID:
			report(initMsg{Execd: describeWait(ws)})
			killAll()
			return 1
		}
	}
}

// runIdle is the "idle" role, the stand-in for `tail -f /dev/null`: it
// waits until it is killed.
func runIdle() int {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
	return 0
}

func describeWait(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// execdChildConfig is what the init sends the execd child.
type execdChildConfig struct {
	Token       string   `json:"token"`
	Root        string   `json:"root"`
	Env         []string `json:"env"`
	OOMScoreAdj int      `json:"oomScoreAdj,omitempty"`
	Cwd         string   `json:"cwd,omitempty"`
	UID         *uint32  `json:"uid,omitempty"`
	GID         *uint32  `json:"gid,omitempty"`
}

func runExecdChild(execdFactory ExecdFactory) int {
	reserveThreads(spareThreads)
	os.Unsetenv(initEnv)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var cfg execdChildConfig
	cf := os.NewFile(fdexecdConfig, "execd-config")
	err := json.NewDecoder(cf).Decode(&cfg)
	cf.Close() // commands must not inherit it
	if err != nil {
		logger.Error("sandboxd execd: read config", "err", err)
		return 1
	}
	unix.CloseOnExec(fdExecdStats) // commands must not inherit it
	stats := os.NewFile(fdExecdStats, "execd-stats")
	defer stats.Close()
	lf := os.NewFile(fdExecdListener, "execd-listener")
	ln, err := net.FileListener(lf)
	lf.Close() // commands must not inherit it
	if err != nil {
		logger.Error("sandboxd execd: listener", "err", err)
		return 1
	}
	if execdFactory == nil {
		logger.Error("sandboxd execd: no execd implementation linked")
		return 1
	}
	h, closeFn, err := execdFactory(ExecdConfig{Token: cfg.Token, Root: cfg.Root, Env: cfg.Env, Logger: logger, OOMScoreAdj: cfg.OOMScoreAdj,
		Cwd: cfg.Cwd, UID: cfg.UID, GID: cfg.GID, CommandDone: reportDuration(stats)})
	if err != nil {
		logger.Error("sandboxd execd: start", "err", err)
		return 1
	}
	defer closeFn()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error("sandboxd execd: serve", "err", err)
		return 1
	}
	return 0
}

// reportDuration writes each command's seconds to stats, a line each, for
// the init to forward.
func reportDuration(stats io.Writer) func(time.Duration) {
	var mu sync.Mutex // one line per write
	return func(d time.Duration) {
		line := strconv.FormatFloat(d.Seconds(), 'g', -1, 64) + "\n"
		mu.Lock()
		_, _ = io.WriteString(stats, line)
		mu.Unlock()
	}
}

// installCA adds pemBytes to the trust store of the sandbox's root (its upper
// layer) and returns the absolute path of the bundle TLS clients should use.
func installCA(pemBytes []byte) (string, error) {
	if err := egress.InstallCA("/", pemBytes); err != nil {
		return "", err
	}
	for _, p := range egress.BundlePaths {
		if _, err := os.Stat("/" + p); err == nil {
			return "/" + p, nil
		}
	}
	return "/" + egress.BundlePaths[0], nil
}

// workAdj is the oom_score_adj of a sandbox's commands: workOOMScoreAdj in
// an isolated sandbox, else left as inherited (0).
func workAdj(isolated bool) int {
	if isolated {
		return workOOMScoreAdj
	}
	return 0
}
