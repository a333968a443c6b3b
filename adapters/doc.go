// Package adapters defines the storage contract of the ledger: Store, the Go form
// of the seed's IStorageAdapter, with the shared types it returns, and
// ProjectionStore, which projectors write through.
//
// Implementations live in the subpackages memory, sqlite and postgres; the bus
// package provides one whose appends publish to JetStream. Every implementation
// passes the conformance suite in adaptertest.
//
// This package imports events and the standard library only.
package adapters
