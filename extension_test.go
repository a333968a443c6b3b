package alineo

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// shape is an entry's step and event, to compare a session's order.
type shape struct {
	step int
	ev   events.Event
}

// shapes returns the shapes of es, a run of output chunks as one (how a
// command's output is chunked is not the point).
func shapes(es []events.Entry) []shape {
	out := make([]shape, 0, len(es))
	for _, e := range es {
		s := shape{e.StepIndex, e.Event}
		if e.Event == events.ExecOutput && len(out) > 0 && out[len(out)-1] == s {
			continue
		}
		out = append(out, s)
	}
	return out
}

// TestRecord: Record appends sandbox-level extension events in order with the
// handle's other events, with the payload given.
func TestRecord(t *testing.T) {
	ctx := context.Background()
	f := newFakeServer(t)
	store := memory.New()
	c, err := New(Options{BaseURL: f.URL, Adapter: store})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "img", Name: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Record(ctx, "run_started", map[string]string{"workflow": "build"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, "echo a").Wait(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Record(ctx, "ext.permission_requested", json.RawMessage(`{"tool":"bash","allowed":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := sb.Record(ctx, "agent.turn-1.checkpoint", nil); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	es, err := store.ReadAll(ctx, "agent", sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	want := []shape{
		{-1, events.SandboxCreated}, {-1, "run_started"},
		{1, events.ExecStarted}, {1, events.ExecOutput}, {1, events.ExecCompleted},
		{-1, "ext.permission_requested"}, {-1, "agent.turn-1.checkpoint"}, {-1, events.SandboxClosed},
	}
	if got := shapes(es); !slices.Equal(got, want) {
		t.Fatalf("session = %v, want %v", got, want)
	}
	for i, p := range []string{`{"workflow":"build"}`, `{"tool":"bash","allowed":true}`, ""} {
		e := es[[]int{1, 5, 6}[i]]
		if string(e.Payload) != p {
			t.Errorf("%s payload = %q, want %q", e.Event, e.Payload, p)
		}
	}
	if err := sb.Record(ctx, "late", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Record after Close = %v, want ErrClosed", err)
	}
}

// TestRecordInvalid: a malformed name or payload is a *events.ValidationError
// and nothing is written.
func TestRecordInvalid(t *testing.T) {
	ctx := context.Background()
	f := newFakeServer(t)
	store := memory.New()
	c, err := New(Options{BaseURL: f.URL, Adapter: store})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "img", Name: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	before, err := store.ReadAll(ctx, "agent", sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, event string
		payload     any
		field       string
	}{
		{"reserved namespace", "exec.killed", nil, "event"},
		{"underscore form", "sandbox_renamed", nil, "event"},
		{"a known event", string(events.ExecCompleted), events.ExecCompletedPayload{Seq: 1}, "event"},
		{"upper case", "Step", nil, "event"},
		{"empty token", "step..x", nil, "event"},
		{"too long", strings.Repeat("s", events.MaxEventName+1), nil, "event"},
		{"not json", "step_complete", json.RawMessage(`{"step":`), "payload"},
		{"too large", "step_complete", strings.Repeat("x", events.MaxExtensionPayload), "payload"},
		{"does not encode", "step_complete", func() {}, "payload"},
	} {
		err := sb.Record(ctx, tc.event, tc.payload)
		var ve *events.ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, events.ErrInvalidEntry) || ve.Field != tc.field {
			t.Errorf("%s: Record = %v, want a *events.ValidationError of field %s", tc.name, err, tc.field)
		}
	}
	after, err := store.ReadAll(ctx, "agent", sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("%d entries written by invalid Records", len(after)-len(before))
	}
}

// TestResumeSkipsExtensionEvents: extension events between execs, at a
// sandbox level or at an exec's own step, neither break the replay nor count
// as steps; the resumed handle numbers on from the recorded execs.
func TestResumeSkipsExtensionEvents(t *testing.T) {
	ctx := context.Background()
	f := newFakeServer(t)
	f.snapState = "Ready"
	store := memory.New()
	c, err := New(Options{BaseURL: f.URL, Adapter: store})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "img", Name: "wf"})
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]string{}
	run := func(cmd string) {
		t.Helper()
		res, err := sb.Exec(ctx, cmd).Wait()
		if err != nil || res.Stdout == "" {
			t.Fatalf("exec %q = %+v, %v", cmd, res, err)
		}
		recorded[cmd] = res.Stdout
	}
	run("echo one")
	if err := sb.Record(ctx, "step_complete", map[string]int{"step": 1}); err != nil {
		t.Fatal(err)
	}
	// An extension event at an exec's step index, as the TypeScript SDK's
	// workflow layer writes them, from a bare ledger append.
	e, err := events.NewExtension(1, "wf", sb.ID(), 2, "step_start", map[string]int{"step": 2})
	if err != nil {
		t.Fatal(err)
	}
	e.Ts = 0
	if err := store.Append(ctx, e); !errors.Is(err, events.ErrInvalidEntry) {
		t.Fatalf("Append of ts 0 = %v, want ErrInvalidEntry", err)
	}
	e.Ts = 2
	if err := store.Append(ctx, e); err != nil {
		t.Fatal(err)
	}
	run("echo two")
	if _, err := sb.Checkpoint(ctx, "cp"); err != nil {
		t.Fatal(err)
	}
	if err := sb.Record(ctx, "snapshot", nil); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	re, err := c.Resume(ctx, sb.ID(), ResumeOptions{Name: "wf"})
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close(ctx)
	f.mu.Lock()
	sent := len(f.commands)
	f.mu.Unlock()
	for _, cmd := range []string{"echo one", "echo two"} {
		res, err := re.Exec(ctx, cmd).Wait()
		if err != nil || res.Stdout != recorded[cmd] {
			t.Fatalf("replay of %q = %+v, %v", cmd, res, err)
		}
	}
	if err := re.Record(ctx, "step_start", map[string]int{"step": 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := re.Exec(ctx, "echo three").Wait(); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	live := append([]string(nil), f.commands[sent:]...)
	f.mu.Unlock()
	if !slices.Equal(live, []string{"echo three"}) {
		t.Fatalf("commands sent after the resume = %q, want only the live step 3", live)
	}
	es, err := store.ReadAll(ctx, "wf", re.ID())
	if err != nil {
		t.Fatal(err)
	}
	want := []shape{{-1, events.SandboxCreated}, {-1, "step_start"}, {3, events.ExecStarted}, {3, events.ExecOutput}, {3, events.ExecCompleted}}
	if got := shapes(es); !slices.Equal(got, want) {
		t.Fatalf("resumed session = %v, want %v", got, want)
	}
}

// The TypeScript SDK's workflow.db (see testdata/README.md).
const (
	tsWorkflowSbx    = "fd6e9bcdaaefe2306391d2d061b47fa4"
	tsWorkflowFailed = "d262cc564b7080ebdf9abc84d645497e"
	tsWorkflowRunID  = "e9f4ec58-eca6-4eec-ba1d-cdfe840be03d"
)

// TestTypeScriptWorkflowLedger: the ledger the TypeScript SDK's workflow layer
// wrote lists and reads here with its workflow events kept as written, and
// its run resumes: execs 1 and 2 (before the checkpoint wf1) replay from the
// cache between the workflow's events, nothing reaches the sandbox, and the
// next exec runs live as step 3.
func TestTypeScriptWorkflowLedger(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(testenv.Fixture(t, adaptertest.TypeScriptWorkflow.File), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	f := newFakeServer(t)
	c, err := New(Options{BaseURL: f.URL, Adapter: store})
	if err != nil {
		t.Fatal(err)
	}
	all, err := c.Sandboxes().List(ctx, ListOptions{})
	if err != nil || len(all) != 2 {
		t.Fatalf("List = %+v, %v; want the workflow's two sessions", all, err)
	}
	byID := map[string]SandboxDetails{}
	for _, d := range all {
		byID[d.SandboxID] = d
	}
	if d := byID[tsWorkflowSbx]; d.Name != "ts-workflow" || d.ExecCount != 3 || d.Status != adapters.StatusCompleted || d.RunID != tsWorkflowRunID {
		t.Errorf("ts-workflow = %+v; want 3 execs, completed, run %s (the workflow's events count for nothing)", d, tsWorkflowRunID)
	}
	if d := byID[tsWorkflowFailed]; d.Name != "ts-workflow-failed" || d.ExecCount != 2 || d.Status != adapters.StatusCompleted {
		t.Errorf("ts-workflow-failed = %+v; want 2 execs, completed", d)
	}
	es, err := store.ReadAll(ctx, "ts-workflow", tsWorkflowSbx)
	if err != nil {
		t.Fatal(err)
	}
	var ext []shape
	for _, e := range es {
		if e.Event.Extension() {
			ext = append(ext, shape{e.StepIndex, e.Event})
		}
	}
	wantExt := []shape{{-1, "run_started"},
		{1, "step_start"}, {1, "step_complete"}, {1, "checkpoint"},
		{2, "step_start"}, {2, "step_complete"}, {2, "checkpoint"}, {-1, "snapshot"},
		{3, "step_start"}, {3, "step_complete"}, {3, "checkpoint"}, {-1, "workflow_complete"}}
	if len(es) != 35 || !slices.Equal(ext, wantExt) {
		t.Fatalf("ts-workflow: %d entries, extension events %v; want 35, %v", len(es), ext, wantExt)
	}
	failed, err := store.ReadAll(ctx, "ts-workflow-failed", tsWorkflowFailed)
	if err != nil {
		t.Fatal(err)
	}
	last := failed[len(failed)-1]
	if last.Event != "workflow_failed" || last.Error != "Command exited with code 3: exit 3" || string(last.Payload) != `{"failedStep":2}` {
		t.Errorf("last entry of ts-workflow-failed = %+v", last)
	}

	sb, err := c.Resume(ctx, tsWorkflowSbx, ResumeOptions{})
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	for _, want := range []tsStep{
		{"echo build > /tmp/out.txt; cat /tmp/out.txt", "build", "", 0},
		{`printf 'a\nb\n'; echo warn >&2`, "ab", "warn", 0},
	} {
		res, err := sb.Exec(ctx, want.cmd).Wait()
		if err != nil || res.Stdout != want.stdout || res.Stderr != want.stderr || res.ExitCode != want.exit {
			t.Errorf("replay of %q = %+v, %v; want %q, %q, exit %d", want.cmd, res, err, want.stdout, want.stderr, want.exit)
		}
	}
	if err := sb.Record(ctx, "step_start", map[string]int{"step": 3}); err != nil {
		t.Fatal(err)
	}
	const live = "cat /proc/sys/kernel/random/uuid"
	if res, err := sb.Exec(ctx, live).Wait(); err != nil || res.Stdout != live+"\n" {
		t.Fatalf("live exec 3 = %+v, %v", res, err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	cmds := append([]string(nil), f.commands...)
	f.mu.Unlock()
	if !slices.Equal(cmds, []string{live}) {
		t.Fatalf("commands sent to execd = %q, want only the live exec 3", cmds)
	}
	re, err := store.ReadAll(ctx, "ts-workflow", sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	want := []shape{{-1, events.SandboxCreated}, {-1, "step_start"}, {3, events.ExecStarted}, {3, events.ExecOutput},
		{3, events.ExecCompleted}, {-1, events.SandboxClosed}}
	if got := shapes(re); !slices.Equal(got, want) {
		t.Fatalf("resumed session = %v, want %v", got, want)
	}
}
