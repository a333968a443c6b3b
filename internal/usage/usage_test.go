package usage

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-h"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"--nope"}, 2},
		{[]string{"--n", "x"}, 2},
		{[]string{"--n", "3"}, 0},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.Int("n", 1, "a number")
		var out bytes.Buffer
		err := Parse(fs, tc.args, "usage: x [flags]", &out)
		if got := Code(err); got != tc.code {
			t.Errorf("%v: code %d (%v), want %d", tc.args, got, err, tc.code)
		}
		if errors.Is(err, flag.ErrHelp) && (!strings.Contains(out.String(), "usage: x") || !strings.Contains(out.String(), "-n int")) {
			t.Errorf("%v: help = %q, want the head and the flags", tc.args, out.String())
		}
		var ue *Error
		if errors.As(err, &ue) && !strings.Contains(ue.Usage, "-n int") {
			t.Errorf("%v: usage = %q, want the flags", tc.args, ue.Usage)
		}
	}
	if got := Code(fmt.Errorf("wrapped: %w", Errorf("u", "bad"))); got != 2 {
		t.Errorf("wrapped usage error: code %d, want 2", got)
	}
	if got := Code(errors.New("boom")); got != 1 {
		t.Errorf("other error: code %d, want 1", got)
	}
}
