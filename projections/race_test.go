//go:build race

package projections_test

const raceEnabled = true
