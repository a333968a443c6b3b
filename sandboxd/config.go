package sandboxd

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/egress"
)

// Config configures a Server. The zero value is valid: an ephemeral server on
// 127.0.0.1:0 with a temporary data directory removed by Close.
type Config struct {
	// Listen is the TCP address Start listens on. Default "127.0.0.1:0".
	Listen string
	// DataDir holds records, images and each sandbox's upper layer. Empty means a
	// fresh temporary directory, removed by Close (the daemon defaults to
	// ./.alineo/sandboxd instead).
	DataDir string
	// APIKey, when set, is required in the OPEN-SANDBOX-API-KEY header of every
	// route but /health and the proxy route.
	APIKey string
	// Images maps an image name (the uri of a create request) to a root
	// filesystem directory or a tarball of one. Names not here, not imported
	// and not HostImage are pulled from their registry.
	Images map[string]string
	// RegistryMirrors are Docker Hub mirrors tried in order before Docker
	// Hub itself ("https://mirror.example", "host:port"; "http://host:port"
	// only for a host also in InsecureRegistries).
	RegistryMirrors []string
	// InsecureRegistries are the "HOST:PORT" registries spoken to in plain
	// HTTP (after an HTTPS attempt), as Docker's insecure-registries. Every
	// other registry is HTTPS only, loopback ones included.
	InsecureRegistries []string
	// PullTimeout bounds the pull of a sandbox's image, which does not count
	// against StartTimeout. Default 10 minutes.
	PullTimeout time.Duration
	// InitBinary is the sandbox init (and execd) bind-mounted into every
	// sandbox: a statically linked build (CGO_ENABLED=0, as the Makefile
	// builds) of cmd/sandboxd-init, the init's own program, or of any
	// program that imports this package; it must speak this sandboxd's init
	// protocol (Start fails with ErrInitBinary otherwise). Default:
	// sandboxd-init next to this executable when it is of the same build
	// (it starts each sandbox's init and execd in about 5 ms, against 20 for
	// sandboxd's own), else this executable. A dynamically linked init runs
	// only in roots that have its interpreter and libraries (the host image,
	// or an image that happens to have them); other creates fail and say so.
	InitBinary string
	// NoIsolation runs sandboxes as plain host processes (development only).
	NoIsolation bool
	// Runtime is the OCI runtime binary every sandbox runs under: a path, or
	// a name looked up in PATH. Default "runc". crun, gVisor's runsc and
	// kata-runtime speak the same command line.
	Runtime string
	// AllowOldRuntime accepts a runc without the fixes of the November 2025
	// advisories (before 1.2.8, 1.3.3 or 1.4.0), which is refused otherwise.
	AllowOldRuntime bool
	// DiskQuota bounds each sandbox's writable layer, in bytes: past it,
	// writes in that sandbox fail with ENOSPC. Default 10 GiB; negative
	// disables the quota (the layer then shares the data directory's disk).
	DiskQuota int64
	// VolumeQuota is the size of the disk of its own that a managed (pvc)
	// volume gets when its request names no storage: past it, writes to the
	// volume fail with ENOSPC. Default DiskQuota; negative: no disk, the
	// volume shares the data directory's (as before; volumes made by an
	// earlier version have none).
	VolumeQuota int64
	// Checkpoints is the checkpoint store of the snapshots' lineage: a
	// postgres:// URL that every host of a fleet shares, or a SQLite file
	// (a path, file:// or sqlite://). Empty: DataDir/snapshots' own SQLite
	// file, this host's alone. Shared, every snapshot route works from every
	// host (see shared.go); give Blobs too.
	Checkpoints string
	// Blobs is the snapshots' content store: file:// (a folder),
	// s3://bucket?endpoint=…&region=…&use_path_style=true (credentials from
	// the AWS environment and config chain), gs:// or azblob://. Empty:
	// DataDir/snapshots' folder.
	Blobs string
	// BlobCacheBytes bounds the local read cache of a remote Blobs store.
	// Default 4 GiB.
	BlobCacheBytes int64
	// EntrypointLogLimit bounds each sandbox's entrypoint log (its init's,
	// entrypoint's and execd's output), which lies outside the disk quota: the
	// server keeps at most this many of the latest bytes. Default 8 MiB.
	EntrypointLogLimit int64
	// RunDir holds, per server (a subdirectory named after DataDir), the
	// mount points of the sandboxes' roots and the init binary: paths the
	// sandboxes' root must traverse, unlike DataDir. Default
	// "/run/alineo-sandboxd".
	RunDir string
	// ShmSize is the size of each sandbox's /dev/shm. Default 64 MiB, as Docker.
	ShmSize int64
	// VolumeRoots are the host directories below which a create request's
	// `host` volumes may bind host paths (each a bind mount, read-only when the
	// volume says so). A host path outside every one is refused with 400;
	// without any, every host volume is. Open resolves each to a clean absolute
	// path without symbolic links.
	VolumeRoots []string
	// DefaultMemory is the memory limit, in bytes, of a sandbox whose
	// resourceLimits name no memory. Default 2 GiB (what the official SDKs
	// ask for by default); negative means no limit.
	DefaultMemory int64
	// AllowHosts are "IP:PORT" (or "localhost:PORT") destinations on this
	// host (its loopback or interface addresses) that sandboxes may reach
	// through their egress proxy when their policy allows it. Every other
	// address of the host is closed to every sandbox, whatever its
	// networkPolicy says. Open validates each entry.
	AllowHosts []string
	// HostNetwork lets a sandbox created without a networkPolicy or
	// credentialProxy share the host's network namespace: any protocol to any
	// address, the host's own loopback services (databases, NATS, this
	// server's neighbours) included (one with the credential proxy keeps its
	// namespace, allow-all). By default a sandbox without a networkPolicy gets
	// a network namespace of its own behind an egress proxy whose policy
	// (HostPolicy) allows every destination but the host's own addresses.
	HostNetwork bool
	// Logger receives the server's logs. Default: discard.
	Logger *slog.Logger

	// DefaultTimeout is the TTL of a sandbox created without a timeout; zero
	// means no expiry, as the protocol says.
	DefaultTimeout time.Duration
	// MaxTimeout caps the timeout of a create request. Default 7 days.
	MaxTimeout time.Duration
	// StartTimeout bounds Pending: a sandbox not running by then goes Failed.
	// Default 30 s.
	StartTimeout time.Duration
	// StartupGrace is how long an entrypoint must stay alive before the sandbox
	// counts as Running, so that one exiting at once goes straight to Failed.
	// Default 10 ms; negative disables it.
	StartupGrace time.Duration
	// Retention is how long Terminated and Failed records are kept. Default 1 h.
	Retention time.Duration
	// SweepInterval is the period of the TTL and retention sweep. Default 1 s.
	SweepInterval time.Duration
	// CgroupParent names the parent group of every sandbox's cgroup (the
	// runtime's cgroupsPath is /CgroupParent/<id>). Default "alineo-sandboxd".
	CgroupParent string
	// MaxSandboxes bounds live sandboxes; a create beyond it gets 409.
	// Default 256.
	MaxSandboxes int
	// MaxProcesses is each sandbox's pids limit (fork-bomb guard). Default 1024.
	MaxProcesses int

	// EgressResolver resolves the host names that sandboxes with a network
	// policy reach through their egress proxy. Default net.DefaultResolver.
	EgressResolver egress.Resolver
	// EgressDial connects an egress proxy to an upstream address the policy
	// allowed ("ip:port"). Default a net.Dialer.
	EgressDial func(ctx context.Context, network, address string) (net.Conn, error)
	// EgressUpstreamTLS configures TLS from an egress proxy to upstream servers
	// when it terminates TLS to inject credentials (RootCAs nil: the host's
	// roots).
	EgressUpstreamTLS *tls.Config
	// EgressMetrics counts the egress proxies' denials and refused
	// connections per sandbox; register it with a Prometheus registry to
	// export them. Default: counted, but nothing exports them.
	EgressMetrics *egress.Metrics
	// Metrics counts the server's sandboxes, creates, the commands its
	// sandboxes' execd served, image pulls and snapshots (see Metrics); register it with
	// a Prometheus registry to export them. Default: counted, but nothing
	// exports them. One Metrics serves one Server.
	Metrics *Metrics
}

// validate checks what withDefaults cannot fill in.
func (c Config) validate() error {
	for _, h := range c.AllowHosts {
		host, port, err := net.SplitHostPort(h)
		if err == nil {
			_, err = strconv.ParseUint(port, 10, 16)
		}
		if err == nil && host != "localhost" {
			_, err = netip.ParseAddr(host)
		}
		if err != nil {
			return fmt.Errorf("%w: allow-host %q: want IP:PORT or localhost:PORT", ErrInvalidConfig, h)
		}
	}
	if c.MaxProcesses < 0 {
		return fmt.Errorf("%w: max processes %d", ErrInvalidConfig, c.MaxProcesses)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = 7 * 24 * time.Hour
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.StartupGrace == 0 {
		c.StartupGrace = 10 * time.Millisecond
	}
	if c.Retention == 0 {
		c.Retention = time.Hour
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Second
	}
	if c.CgroupParent == "" {
		c.CgroupParent = "alineo-sandboxd"
	}
	if c.MaxSandboxes == 0 {
		c.MaxSandboxes = 256
	}
	if c.MaxProcesses == 0 {
		c.MaxProcesses = 1024
	}
	if c.Runtime == "" {
		c.Runtime = "runc"
	}
	if c.DiskQuota == 0 {
		c.DiskQuota = 10 << 30
	}
	if c.VolumeQuota == 0 {
		c.VolumeQuota = c.DiskQuota
	}
	if c.EntrypointLogLimit <= 0 {
		c.EntrypointLogLimit = 8 << 20
	}
	if c.RunDir == "" {
		c.RunDir = "/run/alineo-sandboxd"
	}
	if c.ShmSize == 0 {
		c.ShmSize = 64 << 20
	}
	if c.DefaultMemory == 0 {
		c.DefaultMemory = 2 << 30
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.PullTimeout == 0 {
		c.PullTimeout = 10 * time.Minute
	}
	return c
}
