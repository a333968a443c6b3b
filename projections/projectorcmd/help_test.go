package projectorcmd_test

import (
	"testing"

	"github.com/alineo-labs/alineo/internal/usage/usagetest"
)

// TestHelpAndUsageErrors: -h/--help exit 0 and list the subcommands; bad
// flags and arguments are usage errors (exit 2).
func TestHelpAndUsageErrors(t *testing.T) {
	usagetest.Check(t, run, []usagetest.Case{
		{Args: []string{"-h"}, Code: 0, Want: []string{"usage: projector", "\n  run ", "\n  rebuild ", "\n  verify "}},
		{Args: []string{"--help"}, Code: 0, Want: []string{"rebuild", "verify"}},
		{Args: []string{"help"}, Code: 0, Want: []string{"rebuild", "verify"}},
		{Args: []string{"rebuild", "-h"}, Code: 0, Want: []string{"usage: projector rebuild", "-sqlite"}},
		{Args: []string{"verify", "--help"}, Code: 0, Want: []string{"usage: projector verify"}},
		{Args: []string{"run", "-h"}, Code: 0, Want: []string{"usage: projector run", "-progress"}},
		{Args: []string{"frobnicate"}, Code: 2},
		{Args: []string{"--nope"}, Code: 2},
		{Args: []string{"run", "extra"}, Code: 2},
		{Args: []string{"partitions", "-h"}, Code: 0, Want: []string{"usage: projector partitions", "-partitions"}},
		{Args: []string{"--projection", "execstats", "rebuild", "-h"}, Code: 0, Want: []string{"usage: projector rebuild"}},
		{Args: []string{"--version"}, Code: 0, Want: []string{"projector "}},
		{Args: []string{"verify", "--version"}, Code: 0, Want: []string{"projector "}},
	})
}

// TestEveryCommandTakesEveryFlag: scripts pass the same flags to every
// command (the soak runs verify with --metrics ""), so every command accepts
// them, whatever it reads.
func TestEveryCommandTakesEveryFlag(t *testing.T) {
	usagetest.Check(t, run, []usagetest.Case{
		{Args: []string{"verify", "--metrics", "", "--progress", "1s", "--from", "3", "-h"}, Code: 0},
		{Args: []string{"rebuild", "--metrics", "", "--progress", "1s", "-h"}, Code: 0},
		{Args: []string{"partitions", "--metrics", "", "--from", "2", "-h"}, Code: 0},
	})
}
