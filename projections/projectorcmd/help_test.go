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
	})
}
