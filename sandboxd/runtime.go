package sandboxd

import (
	"context"
	"log/slog"
	"net"

	"github.com/alineo-labs/alineo/sandboxd/internal/runtime"
)

// The user namespace of a sandbox maps its ids 0..IDMapSize-1 to a range of
// host ids of its own, the first at IDMapHost (see idrange.go): a sandbox's
// root is an unprivileged user on the host, and no other sandbox's.
const (
	IDMapHost = runtime.IDMapHost
	IDMapSize = runtime.IDMapSize
)

// ProxyPort is the port on the sandbox's own loopback where its egress proxy
// listens; HTTP_PROXY and HTTPS_PROXY point there.
const ProxyPort = runtime.ProxyPort

// StaticBinary reports whether the executable at p is statically linked
// (has no ELF interpreter), as the sandbox init must be to run in any image.
func StaticBinary(p string) (bool, error) { return runtime.StaticBinary(p) }

// runtimeConfig is the configuration of a server's runtime: the server's
// Config c (defaults filled in), its data directory, the dial of the egress
// proxies (the server's guardDial) and its logger.
func runtimeConfig(c Config, dataDir string, dial func(ctx context.Context, network, address string) (net.Conn, error), log *slog.Logger) runtime.Config {
	return runtime.Config{
		DataDir:            dataDir,
		RunDir:             c.RunDir,
		NoIsolation:        c.NoIsolation,
		Runtime:            c.Runtime,
		AllowOldRuntime:    c.AllowOldRuntime,
		CgroupParent:       c.CgroupParent,
		InitBinary:         c.InitBinary,
		DiskQuota:          c.DiskQuota,
		EntrypointLogLimit: c.EntrypointLogLimit,
		ShmSize:            c.ShmSize,
		MaxProcesses:       c.MaxProcesses,
		StartupGrace:       c.StartupGrace,
		EgressResolver:     c.EgressResolver,
		EgressDial:         dial,
		EgressUpstreamTLS:  c.EgressUpstreamTLS,
		EgressMetrics:      c.EgressMetrics,
		ExecDone:           c.Metrics.execDone,
		Logger:             log,
	}
}

// launchSpec is what the runtime launches for rec, whose image resolved to
// fs.
func launchSpec(rec *record, fs runtime.Rootfs) *runtime.Sandbox {
	sb := &runtime.Sandbox{
		ID:         rec.ID,
		Image:      rec.imageURI(),
		Root:       fs,
		Entrypoint: rec.Entrypoint,
		Env:        rec.Env,
		ExecdToken: rec.ExecdToken,
		Limits:     runtime.Limits(rec.Limits),
		IDBase:     rec.idBase(),
		Volumes:    make([]runtime.Volume, len(rec.Volumes)),
	}
	for i, v := range rec.Volumes {
		sb.Volumes[i] = runtime.Volume{Name: v.Name, Root: v.Root, Dir: v.Dir, Destination: v.Destination, ReadOnly: v.ReadOnly}
	}
	if rec.Egress {
		sb.Egress = &runtime.Egress{Policy: rec.NetworkPolicy, Token: rec.EgressToken, CredentialProxy: rec.CredentialProxy}
	}
	return sb
}
