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
// drives as processes (the binaries it builds).
package soak
