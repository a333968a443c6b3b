// Package memory is an in-memory checkpoints.Store for tests and single-process
// use. State lives in one Store value and is lost with it.
//
// It imports checkpoints and the standard library only.
package memory
