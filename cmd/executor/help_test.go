package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/internal/usage"
	"github.com/alineo-labs/alineo/internal/usage/usagetest"
)

// TestHelpAndUsageErrors: -h/--help exit 0 and list the subcommands; bad
// flags and arguments are usage errors (exit 2).
func TestHelpAndUsageErrors(t *testing.T) {
	usagetest.Check(t, run, []usagetest.Case{
		{Args: []string{"-h"}, Code: 0, Want: []string{"usage: executor", "\n  run ", "\n  submit ", "\n  status ", "\n  work ", "\n  demo "}},
		{Args: []string{"--help"}, Code: 0, Want: []string{"work"}},
		{Args: []string{"help"}, Code: 0, Want: []string{"work"}},
		{Args: []string{"run", "-h"}, Code: 0, Want: []string{"usage: executor run", "-print-output"}},
		{Args: []string{"submit", "--help"}, Code: 0, Want: []string{"usage: executor submit"}},
		{Args: []string{"status", "-h"}, Code: 0, Want: []string{"usage: executor status", "-o"}},
		{Args: []string{"work", "-h"}, Code: 0, Want: []string{"usage: executor work", "-print-output", "-concurrency"}},
		{Args: []string{"demo", "-h"}, Code: 0, Want: []string{"usage: executor demo", "-hold"}},
		{Code: 2},
		{Args: []string{"fly"}, Code: 2},
		{Args: []string{"run"}, Code: 2},
		{Args: []string{"work", "--nope"}, Code: 2},
		{Args: []string{"work", "--log-level", "loud"}, Code: 2},
		{Args: []string{"work", "-h"}, Code: 0, Want: []string{"-sandbox-ttl", "-sandbox-renew"}},
		{Args: []string{"work", "--sandbox-ttl", "-1s"}, Code: 2},
		{Args: []string{"work", "--sandbox-ttl", "10s", "--sandbox-renew", "10s"}, Code: 2},
		{Args: []string{"work", "--ack-wait", "3s", "--sandbox-renew", "6s"}, Code: 2}, // the default TTL is 6 s
		{Args: []string{"status", "-o", "yaml", "0123"}, Code: 2},
		{Args: []string{"--version"}, Code: 0, Want: []string{"executor "}},
		{Args: []string{"work", "--version"}, Code: 0, Want: []string{"executor "}},
		{Args: []string{"--log-level", "info", "-h"}, Code: 0, Want: []string{"usage: executor"}},
	})
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
