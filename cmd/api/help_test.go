package main

import (
	"testing"

	"github.com/alineo-labs/alineo/internal/usage/usagetest"
)

// TestHelpAndUsageErrors: -h/--help exit 0 and list the subcommands; bad
// flags and arguments are usage errors (exit 2).
func TestHelpAndUsageErrors(t *testing.T) {
	usagetest.Check(t, run, []usagetest.Case{
		{Args: []string{"-h"}, Code: 0, Want: []string{"usage: api", "-listen"}},
		{Args: []string{"--help"}, Code: 0, Want: []string{"usage: api"}},
		{Args: []string{"--nope"}, Code: 2},
		{Args: []string{"extra"}, Code: 2},
		{Args: []string{"--version"}, Code: 0, Want: []string{"api "}},
	})
}
