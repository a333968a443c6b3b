package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/alineo-labs/alineo/internal/testutil"
)

// PostgresURLEnv names the variable that points the tests at an existing
// Postgres server instead of an ephemeral one: a postgres:// URL of a role
// that may CREATE DATABASE.
const PostgresURLEnv = "TEST_POSTGRES_URL"

// Postgres returns the DSN (a postgres:// URL) of a fresh, empty database,
// dropped when t ends. The server is the one at $TEST_POSTGRES_URL when set,
// else one ephemeral cluster per test process, started on first use from the
// Debian binaries (/usr/lib/postgresql/*/bin) as the postgres user, on a random
// loopback port. Call StopPostgres from TestMain after m.Run to stop it.
// Without a server, Postgres skips t (fails it when CI=true).
func Postgres(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(PostgresURLEnv)
	if admin == "" {
		c, err := sharedCluster()
		if err != nil {
			SkipOrFail(t, fmt.Sprintf("no Postgres: %v (install postgresql, or set %s=postgres://user@host:5432/postgres)", err, PostgresURLEnv))
		}
		admin = c.dsn("postgres")
	}
	dsn, err := createDatabase(admin, t.Name())
	if err != nil {
		SkipOrFail(t, fmt.Sprintf("no Postgres: %v", err))
	}
	t.Cleanup(func() {
		if err := dropDatabase(admin, dsn); err != nil {
			t.Logf("testenv: %v", err)
		}
	})
	return dsn
}

var shared struct {
	mu      sync.Mutex
	c       *cluster
	err     error
	stopped bool
}

func sharedCluster() (*cluster, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.c != nil || shared.err != nil {
		return shared.c, shared.err
	}
	if shared.stopped {
		return nil, errors.New("StopPostgres was called")
	}
	c, err := newCluster()
	if err == nil {
		err = c.start()
		if err != nil {
			c.remove()
		}
	}
	shared.c, shared.err = c, err
	if err != nil {
		shared.c = nil
	}
	return shared.c, shared.err
}

// StopPostgres stops the shared ephemeral cluster, if one runs, and removes its
// files. Call it from TestMain after m.Run. Later calls of Postgres skip.
func StopPostgres() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.stopped = true
	if shared.c != nil {
		_ = shared.c.stop()
		shared.c.remove()
		shared.c = nil
	}
}

// PGServer is a dedicated ephemeral Postgres cluster that a test may stop and
// start again (on the same port and data) to see how clients cope.
type PGServer struct {
	c *cluster
}

// PostgresServer starts a dedicated ephemeral cluster for t, with a database
// named "alineo", stopped and removed when t ends. It skips t when the
// binaries are missing (fails it when CI=true). TEST_POSTGRES_URL does not
// apply: a shared server cannot be stopped.
func PostgresServer(t testing.TB) *PGServer {
	t.Helper()
	c, err := newCluster()
	if err == nil {
		if err = c.start(); err != nil {
			c.remove()
		}
	}
	if err != nil {
		SkipOrFail(t, fmt.Sprintf("no Postgres: %v (install postgresql)", err))
	}
	t.Cleanup(func() {
		_ = c.stop()
		c.remove()
	})
	if err := c.exec("postgres", `CREATE DATABASE alineo`); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return &PGServer{c: c}
}

// DSN returns the URL of the cluster's "alineo" database.
func (s *PGServer) DSN() string { return s.c.dsn("alineo") }

// Stop shuts the server down (fast shutdown: connections are closed) and
// waits until it is gone.
func (s *PGServer) Stop() error { return s.c.stop() }

// Start starts the stopped server again on the same port and data.
func (s *PGServer) Start() error { return s.c.start() }

// Pause freezes the server (SIGSTOP to its process group): connections stay
// open but nothing answers, as with a hung host or a network partition.
func (s *PGServer) Pause() error { return s.c.signal(syscall.SIGSTOP) }

// Resume thaws a paused server (SIGCONT).
func (s *PGServer) Resume() error { return s.c.signal(syscall.SIGCONT) }

// cluster is one ephemeral Postgres server in a temp folder owned by the
// postgres user.
type cluster struct {
	bin      string // folder of initdb and postgres
	dir      string // temp root: data/, sock/, log
	port     int
	uid, gid uint32
	asUser   bool // run as uid/gid (when we are root)

	// lock is held (flock) while this process owns dir; the kernel drops it
	// when the process dies, which tells sweepStale the folder is left over.
	lock *os.File

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// binDir finds the newest Debian Postgres binaries, or the ones on PATH.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("initdb not found in /usr/lib/postgresql/*/bin or PATH")
}

func newCluster() (*cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	c := &cluster{bin: bin}
	if os.Geteuid() == 0 {
		// Postgres refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		c.uid, c.gid, c.asUser = uint32(uid), uint32(gid), true
	}
	sweepStale()
	if c.dir, err = os.MkdirTemp("", "alineo-pg-"); err != nil {
		return nil, err
	}
	if c.lock, err = lockDir(c.dir); err != nil {
		c.remove()
		return nil, err
	}
	for _, d := range []string{c.dir, c.path("sock")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			c.remove()
			return nil, err
		}
		if c.asUser {
			if err := os.Chown(d, int(c.uid), int(c.gid)); err != nil {
				c.remove()
				return nil, err
			}
		}
	}
	ports, err := testutil.FreePorts(1)
	if err != nil {
		c.remove()
		return nil, err
	}
	c.port = ports[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", c.path("data"), "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	c.prepare(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		c.remove()
		return nil, fmt.Errorf("initdb: %w: %s", err, lastLines(out, 5))
	}
	return c, nil
}

func (c *cluster) path(name string) string { return filepath.Join(c.dir, name) }

func (c *cluster) prepare(cmd *exec.Cmd) {
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// If this process dies without stopping the server, the kernel tells
		// the server to shut down at once (SIGQUIT: immediate shutdown).
		Pdeathsig: syscall.SIGQUIT,
		Setpgid:   true,
	}
	if c.asUser {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.uid, Gid: c.gid}
	}
}

func (c *cluster) dsn(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=5", c.port, db)
}

// start runs the server and waits until it accepts connections.
func (c *cluster) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		return errors.New("postgres is running")
	}
	logf, err := os.OpenFile(c.path("postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.path("data"), "-p", strconv.Itoa(c.port),
		"-k", c.path("sock"), "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=128MB")
	c.prepare(cmd)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig fires when the OS thread that started the server exits, not
	// the process: the Go runtime ends a thread whose goroutine exits locked to
	// it (sandboxd's namespace work does), which killed the shared server in
	// the middle of a test run. The server is started from a goroutine locked
	// to its thread until the server is gone.
	started, done := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the server
		err := cmd.Start()
		started <- err
		if err != nil {
			runtime.UnlockOSThread()
			return
		}
		_ = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	c.cmd, c.done = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.dsn("postgres"))
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return nil
		}
		select {
		case <-done:
			c.cmd, c.done = nil, nil
			log, _ := os.ReadFile(c.path("postgres.log"))
			return fmt.Errorf("postgres exited: %s", lastLines(log, 5))
		case <-time.After(wait):
		}
		if time.Now().After(deadline) {
			c.kill()
			return fmt.Errorf("postgres not ready after 60s: %w", err)
		}
	}
}

// stop shuts the server down: fast shutdown, then SIGKILL after 15s.
func (c *cluster) stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return nil
	}
	// Thaw it in case it is paused, then fast shutdown.
	_ = syscall.Kill(c.cmd.Process.Pid, syscall.SIGCONT)
	for _, child := range children(c.cmd.Process.Pid) {
		_ = syscall.Kill(child, syscall.SIGCONT)
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		c.kill()
		return errors.New("postgres did not stop in 15s; killed")
	}
	c.cmd, c.done = nil, nil
	return nil
}

// signal sends sig to the server and to its children: the backends run in
// sessions of their own (setsid), so the process group alone would miss them.
func (c *cluster) signal(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return errors.New("postgres is not running")
	}
	pid := c.cmd.Process.Pid
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	for _, child := range children(pid) {
		_ = syscall.Kill(child, sig)
	}
	return nil
}

// children lists the processes whose parent is pid, from /proc.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// kill kills the server's process group; callers hold c.mu.
func (c *cluster) kill() {
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	<-c.done
	c.cmd, c.done = nil, nil
}

func (c *cluster) remove() {
	_ = os.RemoveAll(c.dir)
	if c.lock != nil {
		_ = c.lock.Close()
	}
}

const lockName = ".alineo-lock"

func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}

// sweepStale removes the folders of clusters whose test process died without
// StopPostgres (their servers shut down with it, by Pdeathsig).
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "alineo-pg-*"))
	for _, d := range dirs {
		f, err := os.Open(filepath.Join(d, lockName))
		if err != nil {
			// No lock file: being created this instant, or not ours; leave young ones.
			if fi, serr := os.Stat(d); serr == nil && time.Since(fi.ModTime()) > 10*time.Minute {
				_ = os.RemoveAll(d)
			}
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = os.RemoveAll(d) // nobody holds it: its process is gone
		}
		f.Close()
	}
}

// exec runs one statement in database db.
func (c *cluster) exec(db, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.dsn(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// createDatabase creates a database named after the test on the server of the
// admin URL, and returns the URL of the new database.
func createDatabase(admin, testName string) (string, error) {
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("%s is not a postgres:// URL", PostgresURLEnv)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + sanitize(testName) + "_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("connect to %s:%s: %w", u.Hostname(), u.Port(), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

func dropDatabase(admin, dsn string) error {
	u, err := url.Parse(dsn)
	if err != nil {
		return err
	}
	name := strings.TrimPrefix(u.Path, "/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// sanitize keeps a test name usable in a database name (at most 63 bytes in all).
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 40 {
		out = out[len(out)-40:]
	}
	return out
}

func lastLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
}
