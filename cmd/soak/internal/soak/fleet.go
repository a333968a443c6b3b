package soak

import (
	"bytes"
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

// binaries are the commands the soak builds and runs, and sandboxd-init,
// which sandboxd binds into its sandboxes as installed beside it.
var binaries = []string{"sandboxd", "sandboxd-init", "executor", "projector", "api"}

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
	// APIToken is the API's bearer token: the multi-host soak's API
	// listens on its bridge address, where the API requires one.
	APIToken string

	// The multi-host soak's (Config.Hosts): the network, the hosts (each
	// with its sandboxd and executors; Executors lists them all, Sandboxd
	// is nil), the S3 server and the shared storage's addresses.
	Net   *Network
	Hosts []*Host
	S3    *Proc
	// S3Endpoint is the server's URL, S3Root the directory it serves (the
	// bucket is its subdirectory S3Bucket).
	S3Endpoint, S3Root string
	// CheckpointsDSN is the hosts' shared checkpoint store.
	CheckpointsDSN string
}

// NATSURL is every node's client URL, comma-separated (nats.go reconnects
// to another when one goes).
func (f *Fleet) NATSURL() string { return strings.Join(f.NATSURLs, ",") }

// All returns every process.
func (f *Fleet) All() []*Proc {
	all := append([]*Proc{}, f.NATS...)
	all = append(all, f.Postgres)
	if f.S3 != nil {
		all = append(all, f.S3)
	}
	all = append(all, f.sandboxds()...)
	all = append(all, f.API)
	all = append(all, f.Projectors...)
	return append(all, f.Executors...)
}

// sandboxds returns every sandboxd: the one of the single-host soak, or
// each host's.
func (f *Fleet) sandboxds() []*Proc {
	if f.Hosts == nil {
		return []*Proc{f.Sandboxd}
	}
	var out []*Proc
	for _, h := range f.Hosts {
		out = append(out, h.Sandboxd)
	}
	return out
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
// sandboxd-init into each sandbox as its init, which must be static).
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

// fleetPorts are the ports the fleet's processes listen on.
type fleetPorts struct {
	natsClient, natsCluster []int
	postgres, sandboxd, api int
	metrics                 []int
	s3                      int
}

// freePorts are loopback ports for the single-host soak, where every
// process shares the address 127.0.0.1.
func freePorts(projectors int) (fleetPorts, error) {
	ports, err := testutil.FreePorts(6 + 2*3 + projectors)
	if err != nil {
		return fleetPorts{}, err
	}
	return fleetPorts{natsClient: ports[6:9], natsCluster: ports[9:12], postgres: ports[0], sandboxd: ports[1],
		api: ports[3], metrics: ports[12:]}, nil
}

// fixedPorts are the multi-host soak's ports: every process has an
// address of its own (its namespace's), so the ports are the usual ones.
func fixedPorts(projectors int) fleetPorts {
	ps := fleetPorts{natsClient: []int{4222, 4222, 4222}, natsCluster: []int{6222, 6222, 6222}, postgres: 5432,
		sandboxd: 8080, api: 8081, s3: 7070}
	for i := range projectors {
		ps.metrics = append(ps.metrics, 9100+i)
	}
	return ps
}

// place is where a process runs: its namespace's file ("" on loopback)
// and the address it listens on.
type place struct {
	ns   string
	host string
}

// at is the place of the network's node name; 127.0.0.1 in the single-host
// soak.
func (f *Fleet) at(node string) place {
	if f.Net == nil {
		return place{host: "127.0.0.1"}
	}
	n, ok := f.Net.Plan.Node(node)
	if !ok {
		panic("soak: no node " + node + " in the network plan")
	}
	return place{ns: f.Net.NS(n.Name), host: n.Addr.String()}
}

func (pl place) addr(port int) string { return net.JoinHostPort(pl.host, strconv.Itoa(port)) }

// put runs p at pl.
func (f *Fleet) put(p *Proc, pl place) *Proc {
	if pl.ns != "" {
		p.Netns, p.Self = pl.ns, f.cfg.Self
	}
	return p
}

// startFleet builds the binaries and starts every process, each waited for
// until it answers. With Config.Hosts it first makes the network
// (hosts.go) and places each process in its namespace.
func startFleet(ctx context.Context, cfg Config) (*Fleet, error) {
	f := &Fleet{cfg: cfg, bin: cfg.BinDir}
	if f.bin == "" {
		f.bin = filepath.Join(cfg.Dir, "bin")
		cfg.logf("building %s", strings.Join(binaries, ", "))
		if err := build(ctx, f.bin, cfg.Out); err != nil {
			return nil, err
		}
	}
	var ps fleetPorts
	if cfg.Hosts > 0 {
		if err := f.openNetwork(ctx); err != nil {
			return f, err
		}
		ps = fixedPorts(cfg.Projectors)
	} else {
		var err error
		if ps, err = freePorts(cfg.Projectors); err != nil {
			return nil, err
		}
	}
	if err := f.startNATS(ctx, ps); err != nil {
		return f, err
	}
	if err := f.startPostgres(ctx, ps.postgres); err != nil {
		return f, err
	}
	if cfg.Hosts > 0 {
		if err := f.startS3(ctx, ps.s3); err != nil {
			return f, err
		}
		if err := f.startHosts(ctx, ps.sandboxd); err != nil {
			return f, err
		}
	} else if err := f.startSandboxd(ctx, ps.sandboxd); err != nil {
		return f, err
	}
	svc := f.at(RoleServices)
	f.APIURL = "http://" + svc.addr(ps.api)
	for i := range cfg.Projectors {
		m := svc.addr(ps.metrics[i])
		f.Metrics = append(f.Metrics, m)
		f.Projectors = append(f.Projectors, f.put(f.proc(fmt.Sprintf("projector-%d", i), "projector", "run", "--nats", f.NATSURL(),
			"--postgres", f.DSN, "--partitions", strconv.Itoa(cfg.Projectors), "--partition", strconv.Itoa(i),
			"--metrics", m, "--progress", "5s"), svc))
	}
	f.API = f.put(f.proc("api", "api", "--listen", strings.TrimPrefix(f.APIURL, "http://"), "--nats", f.NATSURL(),
		"--postgres", f.DSN, "--projector=false"), svc)
	if cfg.Hosts > 0 {
		f.APIToken = "soak-" + strconv.FormatInt(cfg.Seed, 10)
		f.API.Env = append(f.API.Env, "ALINEO_API_TOKEN="+f.APIToken)
	}
	if cfg.Hosts == 0 {
		for i := range cfg.Executors {
			f.Executors = append(f.Executors, f.executor(i))
		}
	}
	return f, nil
}

func (f *Fleet) proc(name, bin string, args ...string) *Proc {
	return &Proc{Name: name, Path: filepath.Join(f.bin, bin), Args: args, Env: []string{replicasEnv},
		Dir: f.cfg.Dir, Log: filepath.Join(f.cfg.Dir, "logs", name+".log")}
}

func (f *Fleet) executor(i int) *Proc {
	return f.executorProc(fmt.Sprintf("executor-%d", i+1), f.SandboxURL)
}

// executorProc is the executor id working on the sandboxd at sandbox.
func (f *Fleet) executorProc(id, sandbox string) *Proc {
	return f.proc(id, "executor", "work", "--id", id, "--nats", f.NATSURL(), "--sandbox", sandbox,
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

func (f *Fleet) startNATS(ctx context.Context, ps fleetPorts) error {
	n := len(ps.natsClient)
	self := f.cfg.Self
	var routes []string
	for i := range n {
		pl := f.at(fmt.Sprintf("nats%d", i+1))
		routes = append(routes, "nats-route://"+pl.addr(ps.natsCluster[i]))
		f.NATSURLs = append(f.NATSURLs, "nats://"+pl.addr(ps.natsClient[i]))
	}
	for i := range n {
		name := fmt.Sprintf("nats-%d", i+1)
		pl := f.at(fmt.Sprintf("nats%d", i+1))
		store := filepath.Join(f.cfg.Dir, name)
		p := f.put(&Proc{Name: name, Path: self, Dir: f.cfg.Dir, Log: filepath.Join(f.cfg.Dir, "logs", name+".log"),
			Args: []string{NATSNodeCommand, "--name", name, "--host", pl.host, "--port", strconv.Itoa(ps.natsClient[i]),
				"--cluster-port", strconv.Itoa(ps.natsCluster[i]), "--routes", strings.Join(routes, ","), "--store", store}}, pl)
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
	if f.Net != nil {
		// initdb trusts loopback only: trust the soak's subnet too.
		hba, err := os.OpenFile(filepath.Join(dir, "data", "pg_hba.conf"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(hba, "host all all %s trust\n", f.Net.Plan.Subnet)
		if cerr := hba.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("pg_hba.conf: %w", err)
		}
	}
	pl := f.at("pg")
	f.Postgres = f.put(&Proc{Name: "postgres", Path: filepath.Join(bin, "postgres"), Dir: dir, Cred: cred,
		Env: []string{"LC_ALL=C"}, Log: filepath.Join(f.cfg.Dir, "logs", "postgres.log"),
		Args: []string{"-D", filepath.Join(dir, "data"), "-p", strconv.Itoa(port), "-k", filepath.Join(dir, "sock"),
			"-c", "listen_addresses=" + pl.host, "-c", "fsync=off", "-c", "synchronous_commit=off",
			"-c", "max_connections=200"}}, pl)
	f.pgAdmin = fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=5", pl.addr(port))
	f.DSN = fmt.Sprintf("postgres://postgres@%s/alineo?sslmode=disable&connect_timeout=5", pl.addr(port))
	if err := f.StartPostgres(ctx); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, f.pgAdmin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CREATE DATABASE alineo")
	if err == nil && f.cfg.Hosts > 0 {
		// The hosts' shared checkpoint store (sandboxd --checkpoints).
		_, err = conn.Exec(ctx, "CREATE DATABASE "+checkpointsDB)
	}
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
	return f.waitSandboxd(ctx, f.Sandboxd, f.SandboxURL)
}

// waitSandboxd waits until the sandboxd p answers a list at url; it gives
// up at once, with what it wrote, when p exits.
func (f *Fleet) waitSandboxd(ctx context.Context, p *Proc, url string) error {
	c, err := opensandbox.New(opensandbox.Config{BaseURL: url})
	if err != nil {
		return err
	}
	var exited error
	err = poll(ctx, p.Name, f.cfg.ReadyTimeout, 100*time.Millisecond, func() (bool, error) {
		if !p.Running() {
			exited = fmt.Errorf("%s exited: %s", p.Name, lastRun(p.Log))
			return true, nil
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := c.ListSandboxes(cctx, opensandbox.ListSandboxesOptions{})
		return err == nil, err
	})
	if exited != nil {
		return exited
	}
	if err != nil {
		return err
	}
	// It chose its sandbox init before it listened: sandboxd-init, built
	// beside it, of its build; a warning says it would not.
	if b, err := os.ReadFile(p.Log); err == nil && bytes.Contains(b, []byte("not using the sandbox init")) {
		return fmt.Errorf("%s does not use the sandboxd-init built beside it: %s", p.Name, lastRun(p.Log))
	}
	return nil
}

// lastRun returns what the last run of a process wrote to its log path
// (after Start's header): its first 2 lines (a usage error's message) and
// its last 3, joined by " | ".
func lastRun(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	text := string(data)
	if i := strings.LastIndex(text, "=== soak: start "); i >= 0 {
		if j := strings.IndexByte(text[i:], '\n'); j >= 0 {
			text = text[i+j+1:]
		}
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) > 5 {
		lines = append(lines[:2:2], append([]string{"..."}, lines[len(lines)-3:]...)...)
	}
	return strings.Join(lines, " | ")
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
	for _, s := range f.sandboxds() {
		stop(s, syscall.SIGTERM)
	}
	stop(f.S3, syscall.SIGTERM)
	stop(f.Postgres, syscall.SIGINT)
	for _, n := range f.NATS {
		stop(n, syscall.SIGTERM)
	}
}
