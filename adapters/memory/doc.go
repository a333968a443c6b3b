// Package memory is an in-memory adapters.Store (both the Ledger and the
// ReadModel) and adapters.ProjectionStore:
// maps and slices behind one mutex, with the same semantics as the SQLite and
// Postgres stores (it passes the same adaptertest suites). Use it in tests and
// for short-lived programs; everything is gone when the process ends.
//
// It validates what it is given as the SQL stores do (see the adapters
// package doc).
//
// Of this module it imports adapters, adapters/internal/..., events and
// internal/validated only; never a database driver.
package memory
