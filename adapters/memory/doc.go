// Package memory is an in-memory adapters.Store and adapters.ProjectionStore:
// maps and slices behind one mutex, with the same semantics as the SQLite and
// Postgres stores (it passes the same adaptertest suites). Use it in tests and
// for short-lived programs; everything is gone when the process ends.
//
// It imports events, adapters and adapters/internal only, never a database driver.
package memory
