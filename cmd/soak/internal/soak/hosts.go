package soak

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/alineo-labs/alineo/internal/testutil"
)

// Host is one sandbox host of the multi-host soak: a network namespace
// with its own address on the bridge, running a sandboxd and executors
// whose --sandbox is that sandboxd (on the host's loopback, where the
// endpoints sandboxd gives out are).
type Host struct {
	Name  string // the network node's: h1, h2, ...
	Node  Node
	Netns string
	// Data is sandboxd's data directory.
	Data     string
	Sandboxd *Proc
	// SandboxURL is sandboxd as the soak reaches it, over the bridge.
	SandboxURL string
	Executors  []*Proc
}

// procs returns the host's supervised processes.
func (h *Host) procs() []*Proc { return append([]*Proc{h.Sandboxd}, h.Executors...) }

// S3Bucket is the bucket of the hosts' shared blobs.
const S3Bucket = "alineo-soak"

// checkpointsDB is the database of the hosts' shared checkpoint store, in
// the fleet's Postgres.
const checkpointsDB = "checkpoints"

// s3Access and s3Secret are the S3 server's root credentials: a server
// that lives as long as the soak and is reached only on its network.
const (
	s3Access = "alineosoak"
	s3Secret = "alineo-soak-secret"
	s3Region = "us-east-1"
)

// proxyVars are the variables that would send HTTP through a proxy: the
// multi-host soak unsets them, for itself and every process it starts, so
// that no request leaves its network.
var proxyVars = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}

// hostData is sandboxd's data directory on host name.
func hostData(dir, name string) string { return filepath.Join(dir, "hosts", name, "sandboxd") }

// openNetwork makes the multi-host soak's network (Config.Hosts hosts, 3
// NATS nodes); the janitor unmounts below the run's directory and each
// host's sandboxd run directory after a crash.
func (f *Fleet) openNetwork(ctx context.Context) error {
	cfg := f.cfg
	for _, k := range proxyVars {
		if _, ok := os.LookupEnv(k); ok {
			cfg.logf("unsetting %s: nothing of the soak goes through a proxy", k)
			os.Unsetenv(k)
		}
	}
	plan, err := PlanNetwork(cfg.NetPrefix, cfg.Subnet, Replicas, cfg.Hosts)
	if err != nil {
		return err
	}
	unmount := []string{cfg.Dir}
	for _, n := range plan.Of(RoleHost) {
		unmount = append(unmount, runDirOf(hostData(cfg.Dir, n.Name)))
	}
	log, err := os.OpenFile(filepath.Join(cfg.Dir, "logs", "janitor.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the janitor has its own copy
	f.Net, err = OpenNetwork(ctx, NetConfig{Plan: plan, Root: cfg.NetRoot, Self: cfg.Self, Unmount: unmount, Log: log, Logf: cfg.logf})
	if err != nil {
		return err
	}
	cfg.logf("network %s: bridge in its own namespace, the soak at %s on %s, %d namespaces under %s",
		plan.Subnet, plan.Of(RoleCtl)[0].Addr, plan.RootLink, len(plan.Nodes), f.Net.Dir)
	return nil
}

// findVersityGW returns the S3 server's binary: Config.S3Bin, versitygw
// on PATH, or in /usr/local/bin or $GOPATH/bin.
func findVersityGW(cfg Config) (string, error) {
	if cfg.S3Bin != "" {
		return cfg.S3Bin, nil
	}
	p, err := testutil.FindTool("versitygw")
	if err != nil {
		return "", fmt.Errorf("%w (make deps-soak-hosts installs it: GOBIN=/usr/local/bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)", err)
	}
	return p, nil
}

// startS3 starts versitygw in its namespace, serving Dir/s3 with the
// bucket S3Bucket.
func (f *Fleet) startS3(ctx context.Context, port int) error {
	bin, err := findVersityGW(f.cfg)
	if err != nil {
		return err
	}
	f.S3Root = filepath.Join(f.cfg.Dir, "s3")
	if err := os.MkdirAll(filepath.Join(f.S3Root, S3Bucket), 0o755); err != nil {
		return err
	}
	pl := f.at("s3")
	f.S3Endpoint = "http://" + pl.addr(port)
	f.S3 = f.put(&Proc{Name: "s3", Path: bin, Dir: f.cfg.Dir, Log: filepath.Join(f.cfg.Dir, "logs", "s3.log"),
		Args: []string{"--access", s3Access, "--secret", s3Secret, "--region", s3Region, "--port", pl.addr(port), "--quiet",
			"posix", f.S3Root}}, pl)
	return f.StartS3(ctx)
}

// StartS3 starts the S3 server and waits until it answers HTTP (any
// status: an unsigned request gets 403).
func (f *Fleet) StartS3(ctx context.Context) error {
	if err := f.S3.Start(); err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Second}
	var exited error
	err := poll(ctx, "s3", f.cfg.ReadyTimeout, 100*time.Millisecond, func() (bool, error) {
		if !f.S3.Running() {
			exited = fmt.Errorf("s3 exited: %s", lastRun(f.S3.Log))
			return true, nil
		}
		resp, err := client.Get(f.S3Endpoint + "/")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return true, nil
	})
	if exited != nil {
		return exited
	}
	return err
}

// BlobsURL is the --blobs of every host's sandboxd: the shared bucket.
func (f *Fleet) BlobsURL() string {
	q := url.Values{}
	q.Set("endpoint", f.S3Endpoint)
	q.Set("region", s3Region)
	q.Set("use_path_style", "true")
	return "s3://" + S3Bucket + "?" + q.Encode()
}

// tmp is host h's temporary directory (TMPDIR of its processes): as
// on machines of their own, no two hosts share one (a blob store's local
// read cache defaults to one there: shared, a restore on another host
// would find the blobs the first host read).
func (h *Host) tmp() string { return filepath.Join(filepath.Dir(h.Data), "tmp") }

// sandboxdArgs are host h's sandboxd's arguments and environment: on the
// host's every address (its loopback, where its executors reach it, and
// its bridge address, where the soak lists it), its own data and temporary
// directories, and unless Config.LocalStorage the shared checkpoint store
// and bucket.
func (f *Fleet) sandboxdArgs(h *Host, port int) (args, env []string) {
	args = []string{"--listen", "0.0.0.0:" + strconv.Itoa(port), "--data", h.Data,
		"--log-level", "warn", "--disk-quota", "512MiB", "--default-memory", "512MiB"}
	if f.cfg.NoIsolation {
		args = append(args, "--no-isolation")
	}
	env = []string{"TMPDIR=" + h.tmp()}
	if !f.cfg.LocalStorage {
		args = append(args, "--checkpoints", f.CheckpointsDSN, "--blobs", f.BlobsURL())
		env = append(env, "AWS_ACCESS_KEY_ID="+s3Access, "AWS_SECRET_ACCESS_KEY="+s3Secret, "AWS_REGION="+s3Region,
			"AWS_EC2_METADATA_DISABLED=true")
	}
	return args, env
}

// startHosts starts each host's sandboxd and waits until it answers; the
// executors start with the services (startServices).
func (f *Fleet) startHosts(ctx context.Context, port int) error {
	pg := f.at("pg")
	f.CheckpointsDSN = fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&connect_timeout=5", pg.addr(5432), checkpointsDB)
	for _, n := range f.Net.Plan.Of(RoleHost) {
		pl := f.at(n.Name)
		h := &Host{Name: n.Name, Node: n, Netns: pl.ns, Data: hostData(f.cfg.Dir, n.Name), SandboxURL: "http://" + pl.addr(port)}
		args, env := f.sandboxdArgs(h, port)
		h.Sandboxd = f.put(f.proc(n.Name+"-sandboxd", "sandboxd", args...), pl)
		h.Sandboxd.Env = append(h.Sandboxd.Env, env...)
		if err := os.MkdirAll(h.tmp(), 0o1777); err != nil {
			return err
		}
		local := fmt.Sprintf("http://127.0.0.1:%d", port)
		for i := range f.cfg.ExecutorsPerHost {
			id := fmt.Sprintf("%s-executor-%d", n.Name, i+1)
			e := f.put(f.executorProc(id, local), pl)
			e.Env = append(e.Env, "TMPDIR="+h.tmp())
			h.Executors = append(h.Executors, e)
		}
		f.Hosts = append(f.Hosts, h)
		f.Executors = append(f.Executors, h.Executors...)
		if err := h.Sandboxd.Start(); err != nil {
			return err
		}
	}
	for _, h := range f.Hosts {
		if err := f.waitSandboxd(ctx, h.Sandboxd, h.SandboxURL); err != nil {
			return err
		}
	}
	return nil
}

// hostOf names the host of the executor id ("" when it is no host's).
func (f *Fleet) hostOf(id string) string {
	for _, h := range f.Hosts {
		for _, e := range h.Executors {
			if e.Name == id {
				return h.Name
			}
		}
	}
	return ""
}

// killHost kills every process of h at once, as a machine that loses its
// power: its sandboxd and executors, and everything in its namespace or
// below one of them (sandboxd's runtime and the sandboxes' processes,
// whose namespaces are their own). It returns once all are gone.
func (f *Fleet) killHost(h *Host) error {
	var pids []int
	var waits []chan struct{}
	for _, p := range h.procs() {
		p.expectExit()
		if pid := p.Pid(); pid > 0 {
			pids = append(pids, pid)
		}
		if d := p.doneChan(); d != nil {
			waits = append(waits, d)
		}
	}
	ino, err := nsInode(h.Netns)
	if err != nil {
		return fmt.Errorf("kill %s: %w", h.Name, err)
	}
	if _, err := killNetnsProcs(map[uint64]bool{ino: true}, 30*time.Second, pids...); err != nil {
		return fmt.Errorf("kill %s: %w", h.Name, err)
	}
	for _, d := range waits {
		<-d
	}
	return nil
}

// startHost starts h's sandboxd, waits until it answers, then starts its
// executors.
func (f *Fleet) startHost(ctx context.Context, h *Host) error {
	if err := h.Sandboxd.Start(); err != nil {
		return err
	}
	if err := f.waitSandboxd(ctx, h.Sandboxd, h.SandboxURL); err != nil {
		return err
	}
	for _, e := range h.Executors {
		if err := e.Start(); err != nil {
			return err
		}
	}
	return nil
}

// stopS3 stops the S3 server (SIGTERM, then its group killed).
func (f *Fleet) stopS3() error { return f.S3.StopGroup(syscall.SIGTERM, 10*time.Second) }
