// Package projectiontest builds recorded ledger histories for projection
// tests and benchmarks: a deterministic, realistic mix of sandboxes (created,
// execs with output and exit codes over several days, credentials bound and
// revoked, egress rules added and removed, checkpoints, closed), written to a
// bus through the real bus.Ledger writer, and helpers to run a Runtime in a
// test.
//
// Of this module it imports bus, events, projections and testenv only; never
// a database driver.
package projectiontest
