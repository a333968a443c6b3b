package main

import (
	"testing"

	"github.com/alineo-labs/alineo/internal/usage/usagetest"
)

// TestHelpAndUsageErrors: -h/--help exit 0 and list the subcommands; bad
// flags and arguments are usage errors (exit 2).
func TestHelpAndUsageErrors(t *testing.T) {
	usagetest.Check(t, run, []usagetest.Case{
		{Args: []string{"-h"}, Code: 0, Want: []string{"usage: sandboxd", "image", "-listen"}},
		{Args: []string{"--help"}, Code: 0, Want: []string{"image"}},
		{Args: []string{"help"}, Code: 0, Want: []string{"image"}},
		{Args: []string{"image", "import", "-h"}, Code: 0, Want: []string{"usage: sandboxd image import", "-data"}},
		{Args: []string{"--nope"}, Code: 2},
		{Args: []string{"extra"}, Code: 2},
		{Args: []string{"image"}, Code: 2},
		{Args: []string{"image", "import", "onlyname"}, Code: 2},
		{Args: []string{"--version"}, Code: 0, Want: []string{"sandboxd "}},
		{Args: []string{"version"}, Code: 0, Want: []string{"sandboxd "}},
		{Args: []string{"image", "ls", "--version"}, Code: 0, Want: []string{"sandboxd "}},
		{Args: []string{"--data", "d", "image", "import", "-h"}, Code: 0, Want: []string{"usage: sandboxd image import"}},
		{Args: []string{"--data", "d", "image", "import", "onlyname"}, Code: 2},
	})
}
