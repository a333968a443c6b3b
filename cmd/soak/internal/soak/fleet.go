package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/opensandbox"
)

// Replicas is the replica count of every stream and bucket of the soak.
const Replicas = 3

// replicasEnv makes the binaries open the streams as R3 (internal/cli):
// one opening them with the default would scale them down to R1.
const replicasEnv = "ALINEO_NATS_REPLICAS=3"

// binaries are the commands the soak builds and runs.
var binaries = []string{"sandboxd", "executor", "projector", "api"}

// Fleet is every process of the soak and where it listens.
type Fleet struct {
	cfg Config
	bin string // directory of the built binaries

	NATS     []*Proc
	NATSURLs []string
	Postgres *Proc
	DSN      string
	pgAdmin  string

	Sandboxd   *Proc
	SandboxURL string
	Executors  []*Proc
	// Projectors are the projector's partitions (--partitions N
	// --partition I), Metrics their metrics addresses, by partition.
	Projectors []*Proc
	Metrics    []string
	API        *Proc
	APIURL     string
}

// NATSURL is every node's client URL, comma-separated (nats.go reconnects
// to another when one goes).
func (f *Fleet) NATSURL() string { return strings.Join(f.NATSURLs, ",") }

// All returns every process.
func (f *Fleet) All() []*Proc {
	all := append([]*Proc{}, f.NATS...)
	all = append(all, f.Postgres, f.Sandboxd, f.API)
	all = append(all, f.Projectors...)
	return append(all, f.Executors...)
}

// Crashes returns every exit the soak did not cause.
func (f *Fleet) Crashes() []string {
	var out []string
	for _, p := range f.All() {
		if p != nil {
			out = append(out, p.Crashes()...)
		}
	}
	return out
}

// build builds the binaries into dir (CGO_ENABLED=0: sandboxd bind-mounts
// itself into each sandbox as its init and must be static).
func build(ctx context.Context, dir string, log io.Writer) error {
	args := []string{"build", "-o", dir + "/"}
	for _, b := range binaries {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// startFleet builds the binaries and starts every process, each waited for
// until it answers.
func startFleet(ctx context.Context, cfg Config) (*Fleet, error) {
	f := &Fleet{cfg: cfg, bin: cfg.BinDir}
	if f.bin == "" {
		f.bin = filepath.Join(cfg.Dir, "bin")
		cfg.logf("building %s", strings.Join(binaries, ", "))
		if err := build(ctx, f.bin, cfg.Out); err != nil {
			return nil, err
		}
	}
	ports, err := testutil.FreePorts(6 + 2*3 + cfg.Projectors)
	if err != nil {
		return nil, err
	}
	if err := f.startNATS(ctx, ports[6:12]); err != nil { // 3 client ports, then 3 cluster ports
		return f, err
	}
	if err := f.startPostgres(ctx, ports[0]); err != nil {
		return f, err
	}
	if err := f.startSandboxd(ctx, ports[1]); err != nil {
		return f, err
	}
	f.APIURL = fmt.Sprintf("http://127.0.0.1:%d", ports[3])
	for i := range cfg.Projectors {
		m := fmt.Sprintf("127.0.0.1:%d", ports[12+i])
		f.Metrics = append(f.Metrics, m)
		f.Projectors = append(f.Projectors, f.proc(fmt.Sprintf("projector-%d", i), "projector", "run", "--nats", f.NATSURL(),
			"--postgres", f.DSN, "--partitions", strconv.Itoa(cfg.Projectors), "--partition", strconv.Itoa(i),
			"--metrics", m, "--progress", "5s"))
	}
	f.API = f.proc("api", "api", "--listen", strings.TrimPrefix(f.APIURL, "http://"), "--nats", f.NATSURL(),
		"--postgres", f.DSN, "--projector=false")
	for i := range cfg.Executors {
		f.Executors = append(f.Executors, f.executor(i))
	}
	return f, nil
}

func (f *Fleet) proc(name, bin string, args ...string) *Proc {
	return &Proc{Name: name, Path: filepath.Join(f.bin, bin), Args: args, Env: []string{replicasEnv},
		Dir: f.cfg.Dir, Log: filepath.Join(f.cfg.Dir, "logs", name+".log")}
}

func (f *Fleet) executor(i int) *Proc {
	id := fmt.Sprintf("executor-%d", i+1)
	return f.proc(id, "executor", "work", "--id", id, "--nats", f.NATSURL(), "--sandbox", f.SandboxURL,
		"--ack-wait", f.cfg.AckWait.String(), "--concurrency", strconv.Itoa(f.cfg.Concurrency),
		"--drain-timeout", "20s", "--log-level", "info")
}

// startServices starts the projector, the API and the executors once the
// streams exist (the soak creates them R3 first).
func (f *Fleet) startServices(ctx context.Context) error {
	for _, p := range f.Projectors {
		if err := p.Start(); err != nil {
			return err
		}
	}
	if err := f.API.Start(); err != nil {
		return err
	}
	for _, e := range f.Executors {
		if err := e.Start(); err != nil {
			return err
		}
	}
	for i, m := range f.Metrics {
		if err := f.waitHTTP(ctx, f.Projectors[i].Name, "http://"+m+"/healthz"); err != nil {
			return err
		}
	}
	return f.waitHTTP(ctx, "api", f.APIURL+"/healthz")
}

func (f *Fleet) waitHTTP(ctx context.Context, what, url string) error {
	return poll(ctx, what, f.cfg.ReadyTimeout, 100*time.Millisecond, func() (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("%s: %s", url, resp.Status)
	})
}

func (f *Fleet) startNATS(ctx context.Context, ports []int) error {
	n := len(ports) / 2
	self := f.cfg.Self
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
		f.NATSURLs = append(f.NATSURLs, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	for i := range n {
		name := fmt.Sprintf("nats-%d", i+1)
		store := filepath.Join(f.cfg.Dir, name)
		p := &Proc{Name: name, Path: self, Dir: f.cfg.Dir, Log: filepath.Join(f.cfg.Dir, "logs", name+".log"),
			Args: []string{NATSNodeCommand, "--name", name, "--port", strconv.Itoa(ports[i]),
				"--cluster-port", strconv.Itoa(ports[n+i]), "--routes", strings.Join(routes, ","), "--store", store}}
		if err := p.Start(); err != nil {
			return err
		}
		f.NATS = append(f.NATS, p)
	}
	for i := range n {
		if err := f.waitNATSNode(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

func (f *Fleet) waitNATSNode(ctx context.Context, i int) error {
	addr := strings.TrimPrefix(f.NATSURLs[i], "nats://")
	return poll(ctx, f.NATS[i].Name, f.cfg.ReadyTimeout, 100*time.Millisecond, func() (bool, error) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, err
		}
		c.Close()
		return true, nil
	})
}

// pgBin finds the Postgres binaries (Debian's layout first).
func pgBin() (string, error) {
	ds, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(ds) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(ds[i], "initdb")); err == nil {
			return ds[i], nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("initdb not found in /usr/lib/postgresql/*/bin or PATH (install postgresql)")
}

// startPostgres makes a cluster under Dir/pg and starts it; as root it runs as
// the postgres user (Postgres refuses root).
func (f *Fleet) startPostgres(ctx context.Context, port int) error {
	bin, err := pgBin()
	if err != nil {
		return err
	}
	dir := filepath.Join(f.cfg.Dir, "pg")
	if err := os.MkdirAll(filepath.Join(dir, "sock"), 0o700); err != nil {
		return err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("running as root and %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		for _, d := range []string{dir, filepath.Join(dir, "sock")} {
			if err := os.Chown(d, uid, gid); err != nil {
				return err
			}
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.Dir, initdb.Env = dir, append(os.Environ(), "LC_ALL=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	f.Postgres = &Proc{Name: "postgres", Path: filepath.Join(bin, "postgres"), Dir: dir, Cred: cred,
		Env: []string{"LC_ALL=C"}, Log: filepath.Join(f.cfg.Dir, "logs", "postgres.log"),
		Args: []string{"-D", filepath.Join(dir, "data"), "-p", strconv.Itoa(port), "-k", filepath.Join(dir, "sock"),
			"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
			"-c", "max_connections=200"}}
	f.pgAdmin = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", port)
	f.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/alineo?sslmode=disable&connect_timeout=5", port)
	if err := f.StartPostgres(ctx); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, f.pgAdmin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CREATE DATABASE alineo")
	return err
}

// StartPostgres starts the server and waits until it accepts connections.
func (f *Fleet) StartPostgres(ctx context.Context) error {
	if err := f.Postgres.Start(); err != nil {
		return err
	}
	return poll(ctx, "postgres", f.cfg.ReadyTimeout, 100*time.Millisecond, func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, f.pgAdmin)
		if err != nil {
			return false, err
		}
		conn.Close(cctx)
		return true, nil
	})
}

func (f *Fleet) startSandboxd(ctx context.Context, port int) error {
	f.SandboxURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	args := []string{"--listen", strings.TrimPrefix(f.SandboxURL, "http://"), "--data", filepath.Join(f.cfg.Dir, "sandboxd"),
		"--log-level", "warn", "--disk-quota", "512MiB", "--default-memory", "512MiB"}
	if f.cfg.NoIsolation {
		args = append(args, "--no-isolation")
	}
	f.Sandboxd = f.proc("sandboxd", "sandboxd", args...)
	if err := f.Sandboxd.Start(); err != nil {
		return err
	}
	c, err := opensandbox.New(opensandbox.Config{BaseURL: f.SandboxURL})
	if err != nil {
		return err
	}
	return poll(ctx, "sandboxd", f.cfg.ReadyTimeout, 100*time.Millisecond, func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := c.ListSandboxes(cctx, opensandbox.ListSandboxesOptions{})
		return err == nil, err
	})
}

// shutdown stops every process: the executors first (they drain), then the
// services, sandboxd (it removes its sandboxes), Postgres and NATS last.
func (f *Fleet) shutdown() {
	stop := func(p *Proc, sig syscall.Signal) {
		if p != nil {
			if err := p.Stop(sig, 60*time.Second); err != nil {
				f.cfg.logf("%v", err)
			}
		}
	}
	for _, e := range f.Executors {
		stop(e, syscall.SIGTERM)
	}
	stop(f.API, syscall.SIGTERM)
	for _, p := range f.Projectors {
		stop(p, syscall.SIGTERM)
	}
	stop(f.Sandboxd, syscall.SIGTERM)
	stop(f.Postgres, syscall.SIGINT)
	for _, n := range f.NATS {
		stop(n, syscall.SIGTERM)
	}
}
