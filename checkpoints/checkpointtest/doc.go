// Package checkpointtest is the conformance suite every checkpoints.Store
// passes, named like httptest. Call Run from a test of the implementation, and
// RunShared when two Store values can share one database.
//
// Of this module it imports checkpoints only, and otherwise the standard
// library (testing).
package checkpointtest
