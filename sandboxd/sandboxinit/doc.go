// Package sandboxinit is the program sandboxd runs inside every sandbox: its
// init (PID 1), the init's execd child and their helpers, each a role of one
// binary re-executed with ALINEO_SANDBOXD_INIT naming it.
//
// Every program that imports sandboxd plays these roles (sandboxd calls
// RunRole from a package-level init function), so that sandboxd's own
// executable can be bound into sandboxes. cmd/sandboxd-init is this package
// alone: sandboxd prefers it, when it lies next to sandboxd's executable and
// is of the same build, since each start of the init and of execd (two in
// every sandbox's start) runs the init functions of every package the
// binary links, and sandboxd links blob drivers, gRPC and the cloud SDKs
// (about 20 ms a start, against 5).
//
// Of this module it imports sandboxd/execd and sandboxd/internal/runtime
// only: nothing of the server, its snapshots or their stores (the
// standard library and what those two import).
package sandboxinit
