//go:build race

package projectorcmd_test

// raceEnabled: the test binary was built with -race, so a build it runs
// with -race reuses the compiled dependencies.
const raceEnabled = true
