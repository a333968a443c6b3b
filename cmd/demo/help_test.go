package main

import (
	"testing"

	"github.com/alineo-labs/alineo/internal/usage/usagetest"
)

// TestHelpAndUsageErrors: -h/--help exit 0 and list the subcommands; bad
// flags and arguments are usage errors (exit 2).
func TestHelpAndUsageErrors(t *testing.T) {
	usagetest.Check(t, run, []usagetest.Case{
		{Args: []string{"-h"}, Code: 0, Want: []string{"usage: demo", "-db"}},
		{Args: []string{"--help"}, Code: 0, Want: []string{"usage: demo"}},
		{Args: []string{"--nope"}, Code: 2},
		{Args: []string{"extra"}, Code: 2},
		{Args: []string{"--version"}, Code: 0, Want: []string{"demo "}},
	})
}
