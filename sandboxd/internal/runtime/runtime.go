package runtime

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/egress"
	"github.com/alineo-labs/alineo/sandboxd/images"
)

// Config configures a Runtime. The server passes its own Config's values,
// defaults filled in; a zero Logger discards.
type Config struct {
	// DataDir is the server's data directory. The runtime keeps its state
	// under DataDir/run (the OCI runtime's state, the idmapped views, the
	// spare disks) and, in each sandbox's directory DataDir/sandboxes/<id>
	// (where the server keeps the sandbox's record), its disk, layers,
	// bundle and entrypoint log.
	DataDir string
	// RunDir is the root of the run directories: the runtime's own is
	// RunDir/<hash of DataDir>, which the sandboxes' roots must traverse.
	RunDir string
	// NoIsolation runs sandboxes as plain host processes (development only).
	NoIsolation bool
	// Runtime is the OCI runtime binary: a path, or a name looked up in PATH.
	Runtime string
	// AllowOldRuntime accepts a runc without the fixes of the November 2025
	// advisories.
	AllowOldRuntime bool
	// CgroupParent names the parent group of every sandbox's cgroup.
	CgroupParent string
	// InitBinary is the sandbox init bind-mounted into every sandbox, which
	// must speak this package's init protocol; empty: InitName next to this
	// executable when it is of the same build, else this executable
	// (initBinary).
	InitBinary string
	// DiskQuota is the size of each sandbox's disk, in bytes; 0 or
	// negative: no disk (the layers share the data directory's).
	DiskQuota int64
	// EntrypointLogLimit bounds each sandbox's entrypoint log.
	EntrypointLogLimit int64
	// ShmSize is the size of each sandbox's /dev/shm.
	ShmSize int64
	// MaxProcesses is each sandbox's pids limit.
	MaxProcesses int
	// StartupGrace is how long an entrypoint must stay alive before a
	// launch succeeds; 0 or negative: no wait.
	StartupGrace time.Duration
	// EgressResolver, EgressDial and EgressUpstreamTLS configure the egress
	// proxy of each sandbox with a network namespace of its own (see
	// egress.Config). EgressDial is what the proxy dials through: the
	// server's guard, which keeps every sandbox off the host.
	EgressResolver    egress.Resolver
	EgressDial        func(ctx context.Context, network, address string) (net.Conn, error)
	EgressUpstreamTLS *tls.Config
	// EgressMetrics counts the egress proxies' denials and refused
	// connections; nil counts nothing.
	EgressMetrics *egress.Metrics
	// ExecDone, when set, is called with the duration of every command
	// (POST /command or /code) execd served, measured in execd from the
	// request to the end of its answer. It must not block.
	ExecDone func(took time.Duration)
	Logger   *slog.Logger
}

// Runtime runs sandboxes: it lays out and mounts each one's root, writes its
// OCI bundle and drives the OCI runtime's command line (or, without
// isolation, starts a plain host process tree), and launches, freezes, thaws
// and kills its processes. Safe for concurrent use; the server serializes
// the operations on one sandbox.
type Runtime struct {
	cfg    Config
	log    *slog.Logger
	runDir string // Config.RunDir/<hash of DataDir>

	probeOnce sync.Once
	probeErr  error
	oci       *ociRuntime // set by Check
	idmap     *idmapper
	logs      sync.WaitGroup // entrypoint log drains (entryLog)
	disks     *diskPool      // formatted disks ready for new sandboxes (nil: no quota)
	// initInterp is the ELF interpreter of the init binary ("" if static),
	// initLibs the libraries it needs.
	initInterp string
	initLibs   []string

	stop   chan struct{}
	bg     sync.WaitGroup // disk pool refills
	mu     sync.Mutex     // guards closed
	closed bool
}

// New returns the runtime of cfg. It starts nothing and touches no file;
// Recover undoes what an earlier run left mounted, Check finds the OCI
// runtime.
func New(cfg Config) *Runtime {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Runtime{
		cfg:    cfg,
		log:    cfg.Logger,
		runDir: runDirFor(cfg.RunDir, cfg.DataDir),
		idmap:  &idmapper{dir: filepath.Join(cfg.DataDir, "run", "idmap")},
		stop:   make(chan struct{}),
	}
}

// Recover unmounts what an earlier run of a server on the same data
// directory left mounted when it died: idmapped lowers, and the sandboxes'
// roots in the run directory (which is this data directory's alone: named
// after it, and the data directory is locked). It logs what it cannot undo.
func (r *Runtime) Recover() {
	if err := unmountSandbox(filepath.Join(r.cfg.DataDir, "run")); err != nil {
		r.log.Warn("sandboxd: unmount what an earlier run left", "err", err)
	}
	if err := unmountSandbox(r.runDir); err != nil {
		r.log.Warn("sandboxd: unmount what an earlier run left", "dir", r.runDir, "err", err)
	}
}

// Check finds the OCI runtime and prepares the run directory, once: it
// fails with an error wrapping ErrIsolationUnavailable when sandboxes cannot
// be isolated. Without isolation it returns nil.
func (r *Runtime) Check(ctx context.Context) error {
	if r.cfg.NoIsolation {
		return nil
	}
	r.probeOnce.Do(func() {
		r.oci, r.probeErr = lookRuntime(ctx, r.cfg.Runtime, r.runtimeRoot(), r.cfg.CgroupParent, r.cfg.AllowOldRuntime)
		if r.probeErr == nil {
			if err := r.prepareRuntime(ctx); err != nil {
				if !errors.Is(err, ErrInitBinary) { // the runtime works; the init given does not
					err = fmt.Errorf("%w: %w", ErrIsolationUnavailable, err)
				}
				r.oci, r.probeErr = nil, err
			}
		}
	})
	return r.probeErr
}

// RunDir is the runtime's run directory (Config.RunDir/<hash of DataDir>).
func (r *Runtime) RunDir() string { return r.runDir }

// sandboxDir is DataDir/sandboxes/<id>.
func (r *Runtime) sandboxDir(id string) string {
	return filepath.Join(r.cfg.DataDir, "sandboxes", id)
}

// LayersDir is the directory that holds sandbox id's writable layers, which
// a snapshot captures and into which a snapshot is restored before Launch:
// its layers directory (upper and hostup/<dir>) on its disk, or without
// isolation its plain root.
func (r *Runtime) LayersDir(id string) string {
	if r.cfg.NoIsolation {
		return filepath.Join(r.sandboxDir(id), plainRoot)
	}
	return filepath.Join(r.sandboxDir(id), diskDir, layersDir)
}

// Mounts lists the mount points at or below sandbox id's directory, deepest
// first: a directory with mounts left must not be removed.
func (r *Runtime) Mounts(id string) []string { return mountsUnder(r.sandboxDir(id)) }

// Close ends the runtime's background work, waits for the entrypoint logs'
// drains (awaitLogs), unmounts the idmapped views and removes the run
// directory and the spare disks. The server calls it once every sandbox is
// killed. Later calls return nil.
func (r *Runtime) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.stop)
	r.mu.Unlock()
	r.bg.Wait()
	r.awaitLogs(5 * time.Second)
	var errs []error
	if err := r.idmap.close(); err != nil {
		errs = append(errs, err)
	}
	if r.oci != nil {
		if err := r.removeRunDirs(); err != nil {
			errs = append(errs, err)
		}
	}
	if r.disks != nil {
		if err := os.RemoveAll(r.disks.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// awaitLogs waits up to d for the entrypoint logs' drains to end, which
// they do once every process of their sandbox is gone: one that outlived
// its sandbox (a plain process without isolation that left its group) is
// left to the kernel.
func (r *Runtime) awaitLogs(d time.Duration) {
	done := make(chan struct{})
	go func() {
		r.logs.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		r.log.Warn("sandboxd: an entrypoint log is still held open by a process that outlived its sandbox")
	}
}

// untilStop returns a context that ends after d or when the runtime closes.
func (r *Runtime) untilStop(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Sandbox is what Launch starts: a sandbox as the server recorded it.
type Sandbox struct {
	ID string
	// Image is the name of the sandbox's image, for messages.
	Image string
	// Root is the sandbox's resolved image.
	Root Rootfs
	// Entrypoint is the sandbox's command, Env its environment (over the
	// defaults and the image's), ExecdToken the token its execd requires.
	Entrypoint []string
	Env        map[string]string
	ExecdToken string
	Limits     Limits
	// IDBase is the first host id of the sandbox's id range.
	IDBase  uint32
	Volumes []Volume
	// Egress, when set, gives the sandbox a network namespace of its own,
	// whose only way out is its egress proxy.
	Egress *Egress
}

// Limits are a sandbox's cgroup limits; zero means none.
type Limits struct {
	MilliCPU    int64
	MemoryBytes int64
}

// Volume is a volume a sandbox binds: the directory Dir below Root, found
// again from a descriptor of Root (OpenBeneath), bound at Destination.
type Volume struct {
	Name        string
	Root        string
	Dir         string
	Destination string
	ReadOnly    bool
}

// Egress is the egress side of a sandbox with its own network namespace.
type Egress struct {
	// Policy is the sandbox's initial egress policy.
	Policy *egress.Policy
	// Token is the token of its egress API.
	Token string
	// CredentialProxy turns on the proxy's credential injection.
	CredentialProxy bool
}

// Rootfs is a resolved image.
type Rootfs struct {
	// Lowers are the read-only lower layers of the sandbox's overlay root,
	// top first.
	Lowers []string
	// Host says this is the host image (sandboxd's HostImage).
	Host bool
	// HostDirs are host directories (e.g. "usr") each mounted as a private
	// overlay with the host directory below; set for the host image only.
	HostDirs []string
	// HostMask, when set, holds for some host directories (HostMask/<dir>) a
	// layer of whiteouts laid over the host directory: it hides what other
	// users of the host may not read (see BuildHostMask).
	HostMask string
	// Image is the pulled image the layers are of; nil for the host image,
	// the server's configured images and imported images.
	Image *images.Image
	// Source says where the image came from, for logs and records.
	Source string
}

// Config is the image's config (zero for images without one).
func (fs Rootfs) Config() images.ImageConfig {
	if fs.Image == nil {
		return images.ImageConfig{}
	}
	return fs.Image.Config
}

// Ready reports whether sandboxes can run: the error of Check, or, when
// Check found the OCI runtime, of a look at its binary now (removed or no
// longer executable since).
func (r *Runtime) Ready(ctx context.Context) error {
	if err := r.Check(ctx); err != nil {
		return err
	}
	if r.cfg.NoIsolation {
		return nil
	}
	if _, err := exec.LookPath(r.oci.path); err != nil {
		return fmt.Errorf("%w: OCI runtime %s: %w", ErrIsolationUnavailable, r.oci.path, err)
	}
	return nil
}
