// Package checkpointtest is the conformance suite every checkpoints.Store
// passes, named like httptest. Call Run from a test of the implementation, and
// RunShared when two Store values can share one database.
//
// It imports checkpoints, testing and the standard library only.
package checkpointtest
