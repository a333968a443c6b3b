//go:build race

package alineo_test

// raceEnabled scales down the heaviest workloads under the race detector, which
// slows the JSON-heavy output path about tenfold.
const raceEnabled = true
