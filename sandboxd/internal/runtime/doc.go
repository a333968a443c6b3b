// Package runtime runs sandboxd's sandboxes: the layer between the server's
// lifecycle (records, states, timing: package sandboxd) and the OCI runtime
// and kernel below it.
//
// A Runtime lays out each sandbox's directory (its disk, a loop-mounted ext4
// image of Config.DiskQuota bytes; its upper layers; its OCI bundle) and its
// run directory, mounts its root (an overlay of the image's layers, each
// seen through an idmapped view in the sandbox's id range, under the private
// upper layer), binds its volumes as idmapped mounts cloned from descriptors,
// makes its network namespace and egress proxy, writes its OCI spec
// (Docker's default hardening) and drives the OCI runtime's command line:
// Launch, Freeze, Thaw and Kill a Process, CleanLeftovers of a server that
// died. Without isolation (Config.NoIsolation) a sandbox is a plain host
// process tree.
//
// The sandbox init is in this package too: a binary that links it (every
// program that imports sandboxd, and cmd/sandboxd-init, which sandboxd
// prefers when it lies next to sandboxd and is of its build: initBinary) is
// bind-mounted into each sandbox and re-executed with ALINEO_SANDBOXD_INIT
// set, and RunRole, which package sandboxinit calls (from sandboxd's
// package-level init function, or as cmd/sandboxd-init's main), then plays
// the role the variable names (the init, its execd child, the holder of an
// idmapping user namespace, an idle entrypoint, its identity for sandboxd's
// check). What the init needs from sandboxinit (the execd handler's factory,
// the default entrypoint of a restored snapshot) is passed to RunRole as
// values (Roles); what it needs from the server per
// sandbox comes over its configuration pipe. The init answers on its status
// pipe: execd's port, why it ended, and the duration of each command execd
// served (execd writes them to a pipe of its own, which the init forwards;
// the server hands them to Config.ExecDone).
//
// Of this module it imports internal/mountinfo, sandboxd/egress,
// sandboxd/images, sandboxd/internal/oomscore and sandboxd/internal/proctree
// only (and the standard library, golang.org/x/sys,
// github.com/opencontainers/runtime-spec, github.com/moby/profiles/seccomp).
// It must not
// import sandboxd itself (the server imports it), sandboxd/sandboxinit or
// sandboxd/execd (the init gets execd as a Roles value), sandboxd/snapshots, the SDK, the ledger, the
// bus or testenv.
package runtime
