//go:build !race

package projectorcmd_test

const raceEnabled = false
