package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/api/apitest"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/testenv"
)

// publishWorkflow publishes the TypeScript SDK's workflow.db, as written,
// and waits until it is projected.
func publishWorkflow(t *testing.T, e *apitest.Env) {
	t.Helper()
	src, err := sqlite.Open(testenv.Fixture(t, adaptertest.TypeScriptWorkflow.File), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx := context.Background()
	for _, d := range slices.Backward(adaptertest.TypeScriptWorkflow.Details) {
		es, err := src.ReadAll(ctx, d.Name, d.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Ledger.AppendBatch(ctx, es); err != nil {
			t.Fatal(err)
		}
		if err := e.Ledger.Sync(ctx, d.SandboxID); err != nil {
			t.Fatal(err)
		}
	}
	e.WaitProjected()
}

// TestExtensionEventsCLI: alineo sandboxes lists the TypeScript SDK's
// workflow runs, alineo events prints their workflow events with their
// payloads and errors (all of them, or those --event names), and alineo
// tail --event follows extension events.
func TestExtensionEventsCLI(t *testing.T) {
	e := apitest.New(t, token)
	getenv := envOf(e)
	publishWorkflow(t, e)
	failed := adaptertest.TypeScriptWorkflow.Details[0]
	ok := adaptertest.TypeScriptWorkflow.Details[1]

	out := runCLI(t, getenv, "sandboxes")
	if !strings.Contains(out, ok.SandboxID) || !strings.Contains(out, failed.SandboxID) {
		t.Fatalf("sandboxes:\n%s", out)
	}
	out = runCLI(t, getenv, "events", ok.Name, ok.SandboxID)
	for _, s := range []string{"run_started", "step_start", `{"step":1,"exitCode":0,"stdout":"build"}`, "snapshot", "workflow_complete", "$ echo build"} {
		if !strings.Contains(out, s) {
			t.Errorf("events lacks %s:\n%s", s, out)
		}
	}
	out = runCLI(t, getenv, "-o", "jsonl", "events", failed.Name, failed.SandboxID, "--event", "step_failed,workflow_failed")
	var got []events.Entry
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var en events.Entry
		if err := json.Unmarshal([]byte(line), &en); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, en)
	}
	if len(got) != 2 || got[0].Event != "step_failed" || got[1].Event != "workflow_failed" ||
		got[1].Error != "Command exited with code 3: exit 3" || string(got[1].Payload) != `{"failedStep":2}` {
		t.Fatalf("events --event step_failed,workflow_failed = %+v", got)
	}
	out = runCLI(t, getenv, "events", failed.Name, failed.SandboxID, "--event", "step_failed")
	if !strings.Contains(out, `{"step":2,"cmd":"exit 3","exitCode":3} error: Command exited with code 3`) {
		t.Errorf("events --event step_failed does not show the payload and the error:\n%s", out)
	}

	tail := testutil.Start(t, run, []string{"tail", "--from", "1", "--event", "step_complete"}, getenv)
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := strings.Count(tail.Out.String(), "step_complete"); n != 4 {
			return fmt.Errorf("tail printed %d step_complete, want 4: %s", n, tail.Out)
		}
		return nil
	})
	if strings.Contains(tail.Out.String(), "step_start") {
		t.Errorf("tail --event step_complete printed other events: %s", tail.Out)
	}
	if err := tail.Stop(t, 30*time.Second); err != nil {
		t.Errorf("tail ended with %v", err)
	}
	for _, bad := range []string{"exec.nope", "Step", "a..b"} {
		var buf bytes.Buffer
		if err := run(context.Background(), []string{"tail", "--event", bad}, getenv, &buf); err == nil {
			t.Errorf("tail --event %s succeeded", bad)
		}
		if err := run(context.Background(), []string{"events", ok.Name, ok.SandboxID, "--event", bad}, getenv, &buf); err == nil {
			t.Errorf("events --event %s succeeded", bad)
		}
	}
}
