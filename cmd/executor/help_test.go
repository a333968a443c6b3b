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
		{[]string{"-h"}, 0, []string{"usage: executor", "\n  run ", "\n  submit ", "\n  status ", "\n  work ", "\n  demo "}},
		{[]string{"--help"}, 0, []string{"work"}},
		{[]string{"help"}, 0, []string{"work"}},
		{[]string{"run", "-h"}, 0, []string{"usage: executor run", "-print-output"}},
		{[]string{"submit", "--help"}, 0, []string{"usage: executor submit"}},
		{[]string{"status", "-h"}, 0, []string{"usage: executor status", "-o"}},
		{[]string{"work", "-h"}, 0, []string{"usage: executor work", "-print-output", "-concurrency"}},
		{[]string{"demo", "-h"}, 0, []string{"usage: executor demo", "-hold"}},
		{nil, 2, nil},
		{[]string{"fly"}, 2, nil},
		{[]string{"run"}, 2, nil},
		{[]string{"work", "--nope"}, 2, nil},
		{[]string{"work", "--log-level", "loud"}, 2, nil},
		{[]string{"status", "-o", "yaml", "0123"}, 2, nil},
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

// TestOutputAlias: --print-output sets the switch; --output, its deprecated
// alias, does too and is noted for the warning run prints.
func TestOutputAlias(t *testing.T) {
	noenv := func(string) string { return "" }
	for _, tc := range []struct {
		args                   []string
		output, deprecatedUsed bool
	}{
		{nil, false, false},
		{[]string{"--print-output"}, true, false},
		{[]string{"--output"}, true, true},
		{[]string{"--output=false"}, false, true},
	} {
		fs, c := flags("work", noenv, &bytes.Buffer{})
		if err := usage.Parse(fs, tc.args, "", &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if c.output != tc.output || c.deprecatedOutput != tc.deprecatedUsed {
			t.Errorf("%q: output %v, deprecated %v; want %v, %v", tc.args, c.output, c.deprecatedOutput, tc.output, tc.deprecatedUsed)
		}
	}
	fs, c := flags("run", noenv, &bytes.Buffer{})
	if err := usage.Parse(fs, nil, "", &bytes.Buffer{}); err != nil || !c.output {
		t.Errorf("run prints the output by default: output %v, %v", c.output, err)
	}
}

func TestWaitEnterAndReopen(t *testing.T) {
	done := make(chan struct{})
	go func() { waitEnter(context.Background(), strings.NewReader("x\n")); close(done) }()
	<-done
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	waitEnter(ctx, blockingReader{}) // returns on ctx
	c := &config{natsDir: "d/nats", sqlite: "d/alineo.db"}
	if got, want := reopenCommand(c), "go run ./cmd/api --nats-dir d/nats --sqlite d/alineo.db"; got != want {
		t.Errorf("reopen = %q, want %q", got, want)
	}
	c = &config{nats: "nats://h:4222", postgres: "postgres://x"}
	if got, want := reopenCommand(c), "go run ./cmd/api --nats nats://h:4222 --postgres 'postgres://x'"; got != want {
		t.Errorf("reopen = %q, want %q", got, want)
	}
}

type blockingReader struct{}

func (blockingReader) Read([]byte) (int, error) { select {} }
