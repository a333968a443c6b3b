// Package sandboxd is a Docker-free, OpenSandbox-compatible sandbox server: the
// lifecycle API of the OpenSandbox protocol (create, get, list, delete, pause,
// resume, renew-expiration, metadata, endpoints and the server proxy, under /v1
// and at the root) in front of a runtime that runs each sandbox under an OCI
// runtime (runc by default, Config.Runtime). Each sandbox serves the execd API
// of package sandboxd/execd.
//
// # Runtime
//
// The server writes an OCI bundle per sandbox and drives the runtime's command
// line: a foreground run (the server is the runtime's parent and learns the
// exit), pause and resume (the cgroup freezer), kill and delete. The spec holds
// Docker's default hardening: a user namespace whose ids 0..IDMapSize-1 map to
// a range of host ids of the sandbox's own (IDMapHost + k*IDMapSize, the lowest
// k no live sandbox holds), Docker's default seccomp profile and capability
// set, no new privileges, runc's masked and read-only paths, and cgroup limits
// from resourceLimits plus a pids limit (Config.MaxProcesses). The server
// mounts each sandbox's root, nosuid and nodev: an overlay of its image, seen
// through an idmapped mount, under a private upper layer on a loop-mounted
// ext4 disk of Config.DiskQuota bytes, in a directory of the run directory
// that only the sandbox's root may traverse (0700). A sandbox's own work (its
// entrypoint and execd's commands) runs at oom_score_adj 1000, so at its memory
// limit the OOM killer takes the work, not the init or execd.
//
// Only with Config.HostNetwork does a sandbox created without a networkPolicy
// share the host's network namespace (execd then listens on 127.0.0.1 and is
// reachable from the host).
//
// # Egress
//
// A sandbox gets a new network namespace, made by the server and passed to
// the runtime as a path, with only loopback up; created without a
// networkPolicy (credential proxy or not), its policy is HostPolicy (every
// destination but the host's own addresses). The server listens on
// 127.0.0.1:ProxyPort inside it and serves the sandbox's egress.Proxy there, so
// the proxy dials from the host and the policy decides everything that leaves.
// Whatever the policy, the proxy never dials the host's own addresses
// (loopback, unspecified, link-local, interface addresses) but those the
// operator opened (Config.AllowHosts), nor ever the server's own ports.
// execd serves a listener the server opened on a host loopback port (a socket
// stays in the namespace it was made in), and the proxy route reaches other
// ports by dialing from a thread that joined the sandbox's namespace. Port
// 18080 is the egress API (egress.Proxy.Handler) on a host loopback port. With
// the credential proxy, the init installs the proxy's CA certificate into the
// sandbox's trust store (egress.InstallCA; the write lands in the upper layer) and points SSL_CERT_FILE and friends at it; credential
// values never leave the server.
//
// The sandbox's init is this binary, bind-mounted into the sandbox and
// started by the runtime with the environment variable ALINEO_SANDBOXD_INIT
// set. A package-level init function of this package checks that variable
// before main (or a test's main) runs (sandboxinit.RunRole), so every binary
// that imports sandboxd, including go test binaries and programs that embed
// the server, can act as a sandbox init. cmd/sandboxd-init is the init's
// program alone, which starts in a quarter of the time: when it lies next
// to this binary's executable and is of the same build, or is named by
// Config.InitBinary, it is the init instead. The init, PID 1 of the sandbox:
//
//  1. reads its configuration from a pipe the server passes (the runtime's
//     --preserve-fds), then holds it open: its end means the server died;
//  2. starts execd in a child process (re-executed the same way) on a
//     127.0.0.1:0 listener it opened itself (or, in a network namespace of
//     its own, the host loopback listener the server passed), and reports the
//     port to the server;
//  3. starts the entrypoint as a child, its output appended to
//     DataDir/sandboxes/<id>/entrypoint.log;
//  4. reaps every orphan (it is PID 1) and exits when the entrypoint or execd
//     exits, or when the pipe from the server closes: the kernel then kills
//     every process of the sandbox, and the runtime removes the container.
//
// execd runs in its own process so that PID 1 can reap with wait4(-1) without
// stealing exit statuses from the commands execd waits for.
//
// # Images
//
// An image name resolves, in order, to HostImage ("host": the host's own
// system directories /usr, /etc, /opt and /bin, /sbin, /lib*, each a private
// overlay with the host directory read-only below, whose /etc and /opt hide,
// with a layer of overlay whiteouts rebuilt at each start, every entry other
// host users may not read), to Config.Images (a root filesystem directory or
// a tarball, extracted once into DataDir/images/), to DataDir/images/<name>
// (see ImportImage and `sandboxd image import`), and else to an image of a
// registry: from the layer store of package sandboxd/images under
// DataDir/images/.oci, pulled on first use (Config.RegistryMirrors,
// Config.InsecureRegistries, credentials from the create's image.auth or the
// Docker config file). A sandbox's root is an overlay of the image's layers,
// each seen through an idmapped mount shared by every sandbox, under its
// private upper layer. The image's Env, WorkingDir, User and, for a request
// without entrypoint, Entrypoint and Cmd apply. An image that cannot be had
// ends the sandbox Failed with reason ReasonImageNotFound,
// ReasonImageUnauthorized or ReasonImagePullFailed and a message naming the
// image (with a hint for a name without a registry host); the create is
// then answered with an *ImageError (404 or 424) and the sandbox forgotten.
// No other name ever runs on the host's directories. Server.GCImages
// and GCImages collect the layers no image references.
//
// The init bind-mounted into every sandbox must be statically linked to run
// in any image (Config.InitBinary; StaticBinary): a dynamically linked one
// serves only roots that have its interpreter and libraries, and the others'
// creates fail with ErrInitNotStatic in the message.
//
// # Volumes
//
// A create request's volumes are host volumes below Config.VolumeRoots
// (anything else is refused) and pvc volumes, named directories under
// DataDir/volumes (0700) kept across sandboxes. The server finds each volume's
// directory from a descriptor of its root, one component at a time with
// openat2 (RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS), creating what is missing with
// mkdirat, clones it as a detached mount idmapped into the sandbox's range
// (nosuid, nodev), and the runtime binds that mount: no path a sandbox sharing
// the volume could change is ever resolved twice. Files keep on disk the ids
// their sandboxes see (the sandbox's root is host root there), so every
// sandbox of a volume owns what it owns. Volumes are not part of snapshots.
//
// # Timing
//
// Create answers once the sandbox is Running (or Failed), pause and resume
// once the state is reached, and a deleted sandbox is forgotten (404), as the
// real server's providers do.
//
// # State and restart
//
// Records are JSON files under DataDir/sandboxes/<id>/sandbox.json. They
// survive a restart; a sandbox that was live (Pending, Running, Pausing, Paused,
// Resuming, Stopping) when the server stopped comes back Terminated with reason
// "sandboxd_restart": its processes do not survive the server (they exit when
// the pipe from the server closes). Terminated and Failed records are kept for
// Config.Retention, then removed.
//
// Pause freezes every process of the sandbox with the runtime's pause.
//
// With Config.NoIsolation (development only) a sandbox is a plain host process
// tree whose execd root is DataDir/sandboxes/<id>/root, paused with
// SIGSTOP/SIGCONT; the server warns loudly. Without it, a missing or broken
// runtime makes Start, and sandbox creation, fail with ErrIsolationUnavailable.
//
// # Snapshots
//
// POST /sandboxes/{id}/snapshots answers 202 with a Creating snapshot and
// captures the sandbox's upper layers (DataDir/sandboxes/<id>/layers: upper
// and hostup/<dir>) in the background with package sandboxd/snapshots,
// freezing the sandbox only while its files are read; the snapshot then reads
// Ready, or Failed with the reason. The checkpoint lineage (one thread per
// sandbox) is a checkpoints/sqlite file and the contents content-addressed
// blobs, both under DataDir/snapshots, with one JSON record per snapshot for
// its name, source, image and state; all survive a restart. A second
// snapshot of a sandbox hashes and stores only the files that changed. A
// create request with snapshotId restores the snapshot, whiteouts and opaque
// directories included, into the new sandbox's upper layers before its overlay
// is mounted over the source's image, and forks it into the new sandbox's
// thread. Deleting a snapshot (409 while Creating) collects the blobs no other
// checkpoint references.
//
// # Metrics and health
//
// Config.Metrics (a prometheus.Collector, see Metrics) counts the sandboxes
// by state, the latency of creates and of the commands execd served (timed
// in execd, reported through the init's status pipe), the image pulls by result with their bytes and duration, the
// snapshots' bytes written to and read from the blob store, and the
// snapshot operations by result. Server.Ready says whether the server can
// serve: its OCI runtime there, its data directory writable, its checkpoint
// store reachable.
//
// The runtime (the OCI bundle and runtime, mounts, disks, network
// namespaces, the sandbox init) is package sandboxd/internal/runtime; this
// package keeps the API, the lifecycle, images, volumes and snapshots.
//
// Of this module it imports checkpoints, checkpoints/storeurl,
// sandboxd/egress, sandboxd/execd, sandboxd/images, sandboxd/internal/runtime,
// sandboxd/sandboxinit and sandboxd/snapshots only (and the standard library, golang.org/x/sys,
// Prometheus's client);
// never the SDK, the ledger, the bus or testenv.
package sandboxd
