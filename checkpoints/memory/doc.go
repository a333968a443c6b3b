// Package memory is an in-memory checkpoints.Store for tests and single-process
// use. State lives in one Store value and is lost with it.
//
// Of this module it imports checkpoints only, and otherwise the standard
// library.
package memory
