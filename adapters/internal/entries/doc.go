// Package entries holds the driver-independent handling of ledger entries that more than one
// store needs: checking a projected batch and reading checkpoints out of
// sandbox.checkpoint_created entries. Keeping it once keeps the stores' errors and results
// alike.
//
// Of this module it imports adapters and events only.
package entries
