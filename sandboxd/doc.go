// Package sandboxd is a Docker-free, OpenSandbox-compatible sandbox server: the
// lifecycle API of the OpenSandbox protocol (create, get, list, delete, pause,
// resume, renew-expiration, metadata, endpoints and the server proxy, under /v1
// and at the root) in front of a small runtime that isolates each sandbox with
// Linux namespaces, overlayfs and cgroups. Each sandbox serves the execd API of
// package sandboxd/execd on a loopback port.
//
// # Runtime
//
// A sandbox is a process tree in new user (identity-mapped: root stays root),
// mount, PID, UTS, IPC and network namespaces. Only with Config.HostNetwork
// does a sandbox created without a networkPolicy share the host's network
// namespace (execd then listens on 127.0.0.1 and is reachable from the host).
//
// # Egress
//
// A sandbox gets a new network namespace with only loopback up; created
// without a networkPolicy (credential proxy or not), its policy is
// HostPolicy (every destination but the host's own addresses). Its init listens on
// 127.0.0.1:ProxyPort there and sends the listener to the server over a unix
// socket (SCM_RIGHTS); the server serves the sandbox's egress.Proxy on it, so
// the proxy dials from the host and the policy decides everything that leaves.
// execd serves a listener the server opened on a host loopback port (a socket
// stays in the namespace it was made in), and the proxy route reaches other
// ports by dialing from a thread that joined the sandbox's namespace. Port
// 18080 is the egress API (egress.Proxy.Handler) on a host loopback port. With
// the credential proxy, the init installs the proxy's CA certificate into the
// sandbox's trust store (egress.InstallCA, after the pivot, so the write lands
// in the upper layer) and points SSL_CERT_FILE and friends at it; credential
// values never leave the server.
//
// The server starts a sandbox by re-executing its own binary (/proc/self/exe)
// with the environment variable ALINEO_SANDBOXD_INIT set. A package-level init
// function of this package checks that variable before main (or a test's main)
// runs, so every binary that imports sandboxd, including go test binaries and
// programs that embed the server, can act as a sandbox init. The init, PID 1 of
// the sandbox:
//
//  1. reads its configuration from a pipe the server writes after it has placed
//     the process in the sandbox's cgroups;
//  2. mounts an overlay root: the image root filesystem read-only below, a
//     private upper layer under DataDir/sandboxes/<id>/layers above, with /tmp
//     a mode-1777 directory of the overlay (so snapshots capture it); a private
//     tmpfs on /dev/shm; a minimal /dev (null, zero, full, random, urandom, tty,
//     a private devpts); its own /proc; then pivot_root into it and detaches
//     the old root;
//  3. starts execd in a child process (re-executed the same way) on a
//     127.0.0.1:0 listener it opened itself (or, in a network namespace of
//     its own, the one the server passed), and reports the port to the server;
//  4. starts the entrypoint as a child, its output appended to
//     DataDir/sandboxes/<id>/entrypoint.log;
//  5. reaps every orphan (it is PID 1) and exits when the entrypoint or execd
//     exits, or when the pipe from the server closes (the server died): the
//     kernel then kills every process of the sandbox.
//
// execd runs in its own process so that PID 1 can reap with wait4(-1) without
// stealing exit statuses from the commands execd waits for.
//
// # Images
//
// Images cannot be pulled. An image name resolves, in order, to Config.Images
// (a root filesystem directory or a tarball, extracted once into
// DataDir/images/), to DataDir/images/<name> (see ImportImage and
// `sandboxd image import`), and else to the host's own system directories:
// /usr, /etc and /bin, /sbin, /lib* (each a private overlay with the host
// directory read-only below), so any image name, e.g. "ubuntu:22.04", works with
// zero set-up. The server logs which one it used. When the server runs as root
// (sandbox root is then host root), the fallback's /etc and /opt hide, with a
// layer of overlay whiteouts rebuilt at each start, every entry other host
// users may not read (/etc/shadow, /etc/ssl/private, database credentials):
// a sandbox sees of them what any unprivileged host user sees.
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
// Pause freezes every process of the sandbox with the cgroup freezer (v1
// freezer.state or v2 cgroup.freeze, whichever hierarchy Config.CgroupRoot is), or
// with SIGSTOP/SIGCONT of every process of the tree where no freezer is
// available. CPU and memory limits use the cpu and memory cgroup controllers,
// and the pids controller caps the number of tasks (Config.MaxProcesses),
// where present; where not, the server logs that they are not enforced.
//
// With Config.NoIsolation (development only) a sandbox is a plain host process
// tree whose execd root is DataDir/sandboxes/<id>/root; the server warns loudly.
// Without it, a kernel that refuses namespaces makes sandbox creation fail with
// ErrIsolationUnavailable.
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
// This package imports the standard library, golang.org/x/sys, checkpoints,
// checkpoints/sqlite, sandboxd/egress, sandboxd/execd, sandboxd/internal/proctree and
// sandboxd/snapshots; it must not import the SDK, the ledger, the bus or testenv.
package sandboxd
