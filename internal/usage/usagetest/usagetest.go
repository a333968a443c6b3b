package usagetest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/internal/usage"
)

// Case is one command line: the exit code it must map to and what its
// output must contain.
type Case struct {
	Args []string
	Code int
	Want []string
}

// Run is a main package's run function.
type Run func(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error

// Check runs each case with an empty environment and fails t where the exit
// code or the output is not what the case says.
func Check(t *testing.T, run Run, cases []Case) {
	t.Helper()
	noenv := func(string) string { return "" }
	for _, tc := range cases {
		var out bytes.Buffer
		err := run(context.Background(), tc.Args, noenv, &out)
		if got := usage.Code(err); got != tc.Code {
			t.Errorf("run(%q): exit %d (%v), want %d", tc.Args, got, err, tc.Code)
		}
		for _, w := range tc.Want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("run(%q) printed %q, want it to contain %q", tc.Args, out.String(), w)
			}
		}
	}
}
