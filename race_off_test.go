//go:build !race

package alineo_test

const raceEnabled = false
