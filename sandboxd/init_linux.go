package sandboxd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/egress"
	"github.com/alineo-labs/alineo/sandboxd/internal/proctree"
	"golang.org/x/sys/unix"
)

// initEnv selects the role of a re-executed sandboxd binary: "init" (a
// sandbox's PID 1), "execd" (its execd server) or "probe" (the namespace check).
const initEnv = "ALINEO_SANDBOXD_INIT"

// File descriptors handed to a re-executed init (ExtraFiles start at 3).
const (
	fdCtl    = 3 // server → init: the config line, then held open; EOF = server gone
	fdStatus = 4 // init → server: JSON status lines
	fdLog    = 5 // the entrypoint log (append)
	// With a network namespace of its own (initConfig.Netns):
	fdExecdHost = 6 // a listener on a host loopback port, for execd
	fdEgress    = 7 // unix socket: init → server, the egress proxy listener
)

// execdTmp is the $TMPDIR of the execd of an isolated sandbox: a tmpfs, kept
// out of the overlay that snapshots capture.
const execdTmp = "/dev/shm"

// File descriptors handed to the execd child.
const (
	fdExecdListener = 3
	fdexecdConfig   = 4
)

// initConfig is what the server sends the init.
type initConfig struct {
	ID       string   `json:"id"`
	Isolated bool     `json:"isolated"`
	Lower    string   `json:"lower,omitempty"`
	HostDirs []string `json:"hostDirs,omitempty"`
	// HostMask holds whiteout layers to lay over host directories (rootfs.HostMask).
	HostMask   string   `json:"hostMask,omitempty"`
	SandboxDir string   `json:"sandboxDir"`
	Entrypoint []string `json:"entrypoint"`
	Env        []string `json:"env"`
	Token      string   `json:"token"`
	// Netns: the sandbox has its own network namespace; the init brings up
	// its loopback, listens on 127.0.0.1:ProxyPort for the egress proxy and
	// serves execd on fdExecdHost.
	Netns bool `json:"netns,omitempty"`
	// CACert is the egress CA (PEM) to add to the sandbox's trust store.
	CACert string `json:"caCert,omitempty"`
}

// initMsg is one status line from the init.
type initMsg struct {
	Port   int    `json:"port,omitempty"`
	Exit   *int   `json:"exit,omitempty"`
	Signal string `json:"signal,omitempty"`
	Execd  string `json:"execd,omitempty"`
	Error  string `json:"error,omitempty"`
}

// execdConfig is what the sandbox init passes to execdFactory.
type execdConfig struct {
	Token  string
	Root   string
	Env    []string
	Logger *slog.Logger
}

func init() {
	switch os.Getenv(initEnv) {
	case "":
		return
	case "init":
		os.Exit(runInit())
	case "execd":
		os.Exit(runExecdChild())
	case "probe":
		os.Exit(runProbe())
	default:
		fmt.Fprintf(os.Stderr, "sandboxd: unknown %s role %q\n", initEnv, os.Getenv(initEnv))
		os.Exit(2)
	}
}

// runProbe checks, inside fresh namespaces, that a mount works.
func runProbe() int {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Fprintln(os.Stderr, "make / private:", err)
		return 1
	}
	return 0
}

func runInit() int {
	// Nothing the init starts inherits its descriptors but those passed on
	// purpose: a sandbox process must not forge status lines.
	for _, fd := range []int{fdCtl, fdStatus, fdLog, fdExecdHost, fdEgress} {
		unix.CloseOnExec(fd)
	}
	ctl := os.NewFile(fdCtl, "ctl")
	status := os.NewFile(fdStatus, "status")
	logf := os.NewFile(fdLog, "log")
	enc := json.NewEncoder(status)
	report := func(m initMsg) { _ = enc.Encode(m) }
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
	os.Clearenv()
	for _, kv := range cfg.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			os.Setenv(k, v)
		}
	}
	if cfg.Netns {
		if err := setupNetns(); err != nil {
			return fail("set up the network namespace: %v", err)
		}
	}
	root := "/"
	if cfg.Isolated {
		if err := setupRoot(&cfg); err != nil {
			return fail("set up root: %v", err)
		}
		host := cfg.ID
		if len(host) > 12 {
			host = host[:12]
		}
		_ = unix.Sethostname([]byte(host))
		if cfg.CACert != "" {
			bundle, err := installCA([]byte(cfg.CACert))
			if err != nil {
				return fail("install the egress CA: %v", err)
			}
			for _, kv := range caEnv(bundle) {
				k, v, _ := strings.Cut(kv, "=")
				os.Setenv(k, v)
				cfg.Env = append(cfg.Env, kv)
			}
		}
	} else {
		root = filepath.Join(cfg.SandboxDir, plainRoot)
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}

	var ln net.Listener
	if cfg.Netns {
		f := os.NewFile(fdExecdHost, "execd-listener")
		ln, err = net.FileListener(f)
		f.Close()
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return fail("listen: %v", err)
	}
	lnf, err := ln.(*net.TCPListener).File()
	if err != nil {
		return fail("listener file: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port

	cr, cw, err := os.Pipe()
	if err != nil {
		return fail("pipe: %v", err)
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
	execd.ExtraFiles = []*os.File{lnf, cr}
	execd.Stdout, execd.Stderr = logf, logf
	execd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !cfg.Isolated {
		execd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := execd.Start(); err != nil {
		return fail("start execd: %v", err)
	}
	cr.Close()
	lnf.Close()
	ln.Close()
	if err := json.NewEncoder(cw).Encode(execdChildConfig{Token: cfg.Token, Root: root, Env: cfg.Env}); err != nil {
		return fail("configure execd: %v", err)
	}
	cw.Close()

	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return fail("open %s: %v", os.DevNull, err)
	}
	entry := exec.Command(cfg.Entrypoint[0], cfg.Entrypoint[1:]...)
	entry.Env = cfg.Env
	entry.Dir = root
	entry.Stdin, entry.Stdout, entry.Stderr = devnull, logf, logf
	entry.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if !cfg.Isolated {
		entry.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := entry.Start(); err != nil {
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
		case entry.Process.Pid:
			code := ws.ExitStatus()
			m := initMsg{Exit: &code}
			if ws.Signaled() {
				code = -1
				m.Signal = ws.Signal().String()
			}
			report(m)
			killAll()
			return 0
		case execd.Process.Pid:
			report(initMsg{Execd: describeWait(ws)})
			killAll()
			return 1
		}
	}
}

func describeWait(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// execdChildConfig is what the init sends the execd child.
type execdChildConfig struct {
	Token string   `json:"token"`
	Root  string   `json:"root"`
	Env   []string `json:"env"`
}

func runExecdChild() int {
	os.Unsetenv(initEnv)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var cfg execdChildConfig
	if err := json.NewDecoder(os.NewFile(fdexecdConfig, "execd-config")).Decode(&cfg); err != nil {
		logger.Error("sandboxd execd: read config", "err", err)
		return 1
	}
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
	h, closeFn, err := execdFactory(execdConfig{Token: cfg.Token, Root: cfg.Root, Env: cfg.Env, Logger: logger})
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

// setupRoot builds the sandbox's root filesystem and pivots into it. It runs in
// the sandbox's fresh mount namespace.
func setupRoot(cfg *initConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	dir := cfg.SandboxDir
	merged := filepath.Join(dir, "merged")
	if err := overlay([]string{cfg.Lower}, filepath.Join(dir, layersDir, "upper"), filepath.Join(dir, "work"), merged); err != nil {
		return err
	}
	for _, d := range cfg.HostDirs {
		target := filepath.Join(merged, d)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		lower := []string{"/" + d}
		if cfg.HostMask != "" {
			if mask := filepath.Join(cfg.HostMask, d); dirExists(mask) {
				lower = []string{mask, "/" + d}
			}
		}
		if err := overlay(lower, filepath.Join(dir, layersDir, "hostup", d), filepath.Join(dir, "hostwork", d), target); err != nil {
			return err
		}
	}
	mounts := []struct {
		src, target, fstype string
		flags               uintptr
		data                string
	}{
		{"proc", "proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"tmpfs", "dev", "tmpfs", unix.MS_NOSUID, "mode=755"},
	}
	if err := rootTmp(merged); err != nil {
		return err
	}
	for _, m := range mounts {
		t := filepath.Join(merged, m.target)
		if err := os.MkdirAll(t, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, t, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("mount %s on /%s: %w", m.fstype, m.target, err)
		}
	}
	dev := filepath.Join(merged, "dev")
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		t := filepath.Join(dev, d)
		f, err := os.OpenFile(t, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount("/dev/"+d, t, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", d, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dev, "shm"), 0o1777); err != nil {
		return err
	}
	if err := unix.Mount("shm", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	// A private devpts instance, so programs that need a terminal (script,
	// python's pty, ssh) work and see no other sandbox's terminals.
	if err := os.MkdirAll(filepath.Join(dev, "pts"), 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mount /dev/pts: %w", err)
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	if err := unix.Chdir(merged); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return unix.Chdir("/")
}

// rootTmp makes /tmp of the sandbox's root a world-writable sticky directory
// of its overlay, as in a container: what a job writes there lands in the
// private upper layer, so snapshots capture it and restore it. An image's
// /tmp that is not a directory (a symlink, say) is left as the image made it;
// it is never followed, since the root is not pivoted into yet.
func rootTmp(merged string) error {
	t := filepath.Join(merged, "tmp")
	fi, err := os.Lstat(t)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(t, 0o755); err != nil {
			return fmt.Errorf("create /tmp: %w", err)
		}
	case err != nil:
		return fmt.Errorf("stat /tmp: %w", err)
	case !fi.IsDir():
		return nil
	case fi.Mode()&(os.ModePerm|os.ModeSticky) == 0o777|os.ModeSticky:
		return nil // already right: no copy-up into the upper layer
	}
	if err := os.Chmod(t, 0o777|os.ModeSticky); err != nil { // Mkdir is subject to the umask
		return fmt.Errorf("chmod /tmp: %w", err)
	}
	return nil
}

func overlay(lower []string, upper, work, target string) error {
	for _, d := range []string{upper, work, target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	lowers := make([]string, len(lower))
	for i, l := range lower {
		lowers[i] = escapeOverlay(l)
	}
	opts := "lowerdir=" + strings.Join(lowers, ":") + ",upperdir=" + escapeOverlay(upper) + ",workdir=" + escapeOverlay(work)
	// The init mounts in its user namespace, where the trusted.* xattrs that
	// overlayfs marks opaque directories with are out of reach: without
	// userxattr (user.overlay.*, Linux 5.11+), replacing a directory of the
	// lower layer fails with EIO. Older kernels get the plain mount.
	if err := unix.Mount("overlay", target, "overlay", 0, opts+",userxattr"); err == nil {
		return nil
	}
	if err := unix.Mount("overlay", target, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay on %s: %w", target, err)
	}
	return nil
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func escapeOverlay(p string) string {
	return strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`).Replace(p)
}

// setupNetns brings up the loopback of the sandbox's fresh network namespace,
// listens on 127.0.0.1:ProxyPort and sends the listener to the server, which
// serves the sandbox's egress proxy on it.
func setupNetns() error {
	sock := os.NewFile(fdEgress, "egress-sock")
	defer sock.Close()
	if err := loopbackUp(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ProxyPort))
	if err != nil {
		return fmt.Errorf("listen on the proxy port: %w", err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		return err
	}
	defer f.Close()
	if err := sendFile(sock, f); err != nil {
		return fmt.Errorf("send the proxy listener: %w", err)
	}
	return nil
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
