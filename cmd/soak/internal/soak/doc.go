// Package soak is the chaos soak of issue 18: it builds this module's
// binaries and runs them as separate processes (a 3-node NATS cluster whose
// streams are R3, Postgres, sandboxd, executors, the projector in partitions
// (one process each), the API),
// drives a load of jobs with checkpoints, streamed output and file writes
// through them while a seeded fault schedule kills, stops and restarts them,
// and ends with checks of what the system promises: every job finished once
// with its result, no step before a checkpoint ran live twice, every
// acknowledged event is in the stream and the tables, no fenced writer wrote
// after its fence, nothing left running, every SSE auditor saw its events
// exactly once and in order, every projector partition caught up.
//
// With Config.Hosts (make soak, make soak-ci) the fleet runs across machines: a
// network of namespaces on a bridge (netplan.go, netns.go), addresses from
// 198.18.0.0/15 only, each host a namespace with its own sandboxd and
// executors (hosts.go), each NATS node, Postgres, an S3 server and the
// services in namespaces of their own. The schedule then also kills whole
// hosts, cuts a host's or a NATS node's link and stops the S3 server, and
// three checks follow the nine (hostchecks.go): the jobs of a lost host
// finished once elsewhere from their checkpoint, every checkpoint's blobs
// are in the bucket (storage.go), no host keeps a sandbox running. A
// janitor process removes the network whatever way the soak ends.
//
// A signal (Run's context) stops it in any phase: the fleet is killed and
// reaped, sandboxd's leftover mounts are unmounted, and the report says what
// the run had so far (abort.go).
//
// The checks (checks.go) are functions of an Observation, which Run collects
// from the processes at the end; the tests break each property on purpose in
// an Observation and see its check fail. cmd/soak is the command (make soak,
// make soak-ci).
//
// Of this module it imports bus, events, internal/mountinfo,
// internal/testutil, jobs and opensandbox only: the rest of the system it
// drives as processes (the binaries it builds), and the checkpoint stores
// it reads as an auditor would, by their table and JSON (storage.go).
package soak
