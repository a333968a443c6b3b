//go:build race

package audit_test

// raceEnabled scales TestVerifyBoundedMemory down under the race detector,
// which slows hashing and canonical JSON about tenfold.
const raceEnabled = true
