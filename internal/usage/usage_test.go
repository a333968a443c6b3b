package usage

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"runtime/debug"
	"slices"
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

// TestParseInterspersed: flags before, between and after the arguments
// parse alike; "--" makes the rest arguments; fs.Args() holds the arguments.
func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		n    int
		o    string
		pos  []string
	}{
		{[]string{"a", "b"}, 1, "", []string{"a", "b"}},
		{[]string{"--n", "3", "a", "b"}, 3, "", []string{"a", "b"}},
		{[]string{"a", "b", "--n", "3", "-o", "json"}, 3, "json", []string{"a", "b"}},
		{[]string{"a", "-o=json", "b", "-n", "4"}, 4, "json", []string{"a", "b"}},
		{[]string{"a", "--", "-n", "5"}, 1, "", []string{"a", "-n", "5"}},
		{[]string{"-", "-n", "2"}, 2, "", []string{"-"}},
		{nil, 1, "", nil},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		n := fs.Int("n", 1, "a number")
		o := fs.String("o", "", "a format")
		if err := Parse(fs, tc.args, "usage: x", &bytes.Buffer{}); err != nil {
			t.Errorf("Parse(%q) = %v", tc.args, err)
			continue
		}
		if *n != tc.n || *o != tc.o || !slices.Equal(fs.Args(), tc.pos) {
			t.Errorf("Parse(%q): n=%d o=%q args=%q, want n=%d o=%q args=%q", tc.args, *n, *o, fs.Args(), tc.n, tc.o, tc.pos)
		}
	}
}

// TestParseVersion: --version, anywhere among the arguments, prints the
// command's version and exits 0.
func TestParseVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"a", "-version"}} {
		fs := flag.NewFlagSet("tool sub", flag.ContinueOnError)
		var out bytes.Buffer
		err := Parse(fs, args, "usage: tool sub", &out)
		if got := Code(err); got != 0 || err == nil {
			t.Errorf("Parse(%q) = %v (code %d), want flag.ErrHelp", args, err, got)
		}
		if !strings.HasPrefix(out.String(), "tool ") {
			t.Errorf("Parse(%q) printed %q, want the version of tool", args, out.String())
		}
	}
}

func TestCommand(t *testing.T) {
	fs := flag.NewFlagSet("g", flag.ContinueOnError)
	fs.String("url", "", "")
	fs.Bool("f", false, "")
	for _, tc := range []struct {
		args []string
		cmd  string
		rest []string
	}{
		{[]string{"show", "a", "b"}, "show", []string{"a", "b"}},
		{[]string{"--url", "http://x", "show", "a"}, "show", []string{"--url", "http://x", "a"}},
		{[]string{"--url=http://x", "show"}, "show", []string{"--url=http://x"}},
		{[]string{"-f", "events", "a"}, "events", []string{"-f", "a"}},
		{[]string{"--unknown", "show"}, "show", []string{"--unknown"}},
		{[]string{"--url", "u", "--", "show", "x"}, "show", []string{"--url", "u", "x"}},
		{[]string{"--url", "u"}, "", []string{"--url", "u"}},
		{nil, "", nil},
	} {
		cmd, rest := Command(tc.args, fs)
		if cmd != tc.cmd || !slices.Equal(rest, tc.rest) {
			t.Errorf("Command(%q) = %q, %q; want %q, %q", tc.args, cmd, rest, tc.cmd, tc.rest)
		}
	}
}

func TestVersionOf(t *testing.T) {
	settings := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2025-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{GoVersion: "go1.25", Main: debug.Module{Path: ModulePath, Version: "v0.4.0"}, Settings: settings},
			"projector " + ModulePath + " v0.4.0 revision 0123abcd (2025-01-02T03:04:05Z) modified, go1.25"},
		{debug.BuildInfo{GoVersion: "go1.25", Main: debug.Module{Path: ModulePath}},
			"projector " + ModulePath + " (devel), go1.25"},
		{debug.BuildInfo{GoVersion: "go1.25", Main: debug.Module{Path: "example.com/mine", Version: "(devel)"},
			Deps: []*debug.Module{{Path: "golang.org/x/sync", Version: "v0.1.0"}, {Path: ModulePath, Version: "v0.4.0"}}},
			"projector example.com/mine (devel), " + ModulePath + " v0.4.0, go1.25"},
		{debug.BuildInfo{Main: debug.Module{Path: "example.com/mine"},
			Deps: []*debug.Module{{Path: ModulePath, Version: "v0.0.0-00010101000000-000000000000", Replace: &debug.Module{Path: "../alineo"}}}},
			"projector example.com/mine (devel), " + ModulePath + " v0.0.0-00010101000000-000000000000 => ../alineo"},
	} {
		if got := versionOf("projector", &tc.bi); got != tc.want {
			t.Errorf("versionOf = %q\nwant        %q", got, tc.want)
		}
	}
}
