// Package adaptertest is the conformance suite of the storage contract, named
// like httptest. It comes in halves, as the contract does: RunLedger checks
// the adapters.Ledger contract (any ledger: a store, the bus ledger, your own),
// RunReadModel the adapters.ReadModel a Store keeps beside its ledger, and Run
// both (every Store passes it). RunProjection checks the ProjectionStore
// contract and Differential compares a store with a reference. An
// implementation's tests call them with a constructor that returns a fresh,
// empty store or ledger per call.
//
// Of this module it imports adapters and events only, and otherwise the
// standard library (testing); it must never import an implementation.
package adaptertest
