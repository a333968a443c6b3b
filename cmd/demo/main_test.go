package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

func TestRun(t *testing.T) {
	db := filepath.Join(t.TempDir(), "alineo.db")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, []string{"-db", db}, os.Getenv, &out)
	if errors.Is(err, sandboxd.ErrIsolationUnavailable) {
		testenv.SkipOrFail(t, err.Error())
	}
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"step 1\nstep 2\nstep 3\n",
		"read /tmp/hello.txt: hello from the demo\n",
		"sandbox.created", "exec.started", "exec.output", "exec.completed", "sandbox.closed",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// created, started, three lines 200 ms apart, completed, closed.
	if !strings.Contains(got, ": 7 events") {
		t.Errorf("want 7 events in the ledger:\n%s", got)
	}
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("ledger file: %v", err)
	}
}

func TestRunBadFlag(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-nope"}, os.Getenv, &out); err == nil {
		t.Fatal("run with an unknown flag succeeded")
	}
}
