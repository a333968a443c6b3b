package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/cmd/internal/usage"
)

// TestHelpAndUsageErrors: -h/--help exit 0 and list the subcommands; bad
// flags and arguments are usage errors (exit 2).
func TestHelpAndUsageErrors(t *testing.T) {
	noenv := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		code int
		want []string // in the help output
	}{
		{[]string{"-h"}, 0, []string{"usage: demo", "-db"}},
		{[]string{"--help"}, 0, []string{"usage: demo"}},
		{[]string{"--nope"}, 2, nil},
		{[]string{"extra"}, 2, nil},
	} {
		var out bytes.Buffer
		err := run(context.Background(), tc.args, noenv, &out)
		if got := usage.Code(err); got != tc.code {
			t.Errorf("run(%q): exit %d (%v), want %d", tc.args, got, err, tc.code)
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("run(%q) printed %q, want it to contain %q", tc.args, out.String(), w)
			}
		}
	}
}
