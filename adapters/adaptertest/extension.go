package adaptertest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// extensionSession is a session with extension events between its execs: at
// the sandbox level, at an exec's own step (as the TypeScript SDK's workflow
// layer writes step_start and step_complete), with an error, without a
// payload, with the largest payload, and with a checkpoint-like name that is
// not a checkpoint.
func extensionSession(name, id string) []events.Entry {
	ext := func(ts int64, step int, ev events.Event, payload string) events.Entry {
		e := events.Entry{Ts: ts, Name: name, SandboxID: id, StepIndex: step, Event: ev}
		if payload != "" {
			e.Payload = json.RawMessage(payload)
		}
		return e
	}
	failed := ext(T0+5, 2, "step_failed", `{"step":2}`)
	failed.Error = "exit 3"
	return []events.Entry{
		entry(T0, name, id, -1, events.SandboxCreated),
		ext(T0+1, -1, "run_started", `{"workflow":"build","image":"node:22"}`),
		ext(T0+1, 1, "step_start", `{"step":1}`),
		entry(T0+2, name, id, 1, events.ExecStarted),
		entry(T0+2, name, id, 1, events.ExecOutput),
		entry(T0+2, name, id, 1, events.ExecCompleted),
		ext(T0+2, 1, "step_complete", `{"step":1,"stdout":"ok\n"}`),
		ext(T0+3, 1, "checkpoint", `{"step":1}`),
		ext(T0+3, -1, "ext.permission_requested", `"a string payload"`),
		ext(T0+4, -1, "agent.turn-1.checkpoint", ""),
		ext(T0+4, -1, "snapshot", `null`),
		entry(T0+5, name, id, 2, events.ExecStarted),
		entry(T0+5, name, id, 2, events.ExecCompleted),
		failed,
		ext(T0+6, -1, "big", `"`+strings.Repeat("x", events.MaxExtensionPayload-2)+`"`),
		entry(T0+7, name, id, -1, events.SandboxClosed),
	}
}

// testExtensionEvents: extension events are stored and read back as
// appended, in order with the session's other events, one by one and in a
// batch; they count for nothing in the session's checkpoints.
func testExtensionEvents(t *testing.T, s adapters.Ledger) {
	one := extensionSession("wf", "sbx-ext-1")
	mustAppend(t, s, one...)
	sameEntries(t, mustRead(t, s, "wf", "sbx-ext-1"), one)
	batch := extensionSession("wf", "sbx-ext-2")
	if err := s.AppendBatch(ctx(t), batch); err != nil {
		t.Fatalf("AppendBatch: %v", err)
	}
	sameEntries(t, mustRead(t, s, "wf", "sbx-ext-2"), batch)
	if cps, err := s.ListCheckpoints(ctx(t), "wf", "sbx-ext-1"); err != nil || len(cps) != 0 {
		t.Fatalf("ListCheckpoints = %+v, %v; want none (checkpoint is an extension event)", cps, err)
	}
	if last, err := s.LastCheckpoint(ctx(t), "wf", "sbx-ext-1"); err != nil || last != nil {
		t.Fatalf("LastCheckpoint = %+v, %v; want none", last, err)
	}
}

// invalidExtensions are extension entries every store refuses, and the field
// its *events.ValidationError names.
var invalidExtensions = []struct {
	name  string
	edit  func(*events.Entry)
	field string
}{
	{"reserved namespace", func(e *events.Entry) { e.Event = "sandbox.renamed" }, "event"},
	{"reserved underscore form", func(e *events.Entry) { e.Event = "exec_killed" }, "event"},
	{"upper case", func(e *events.Entry) { e.Event = "Step_start" }, "event"},
	{"empty token", func(e *events.Entry) { e.Event = "step..start" }, "event"},
	{"wildcard", func(e *events.Entry) { e.Event = "step.*" }, "event"},
	{"name too long", func(e *events.Entry) { e.Event = events.Event(strings.Repeat("s", events.MaxEventName+1)) }, "event"},
	{"payload not json", func(e *events.Entry) { e.Payload = json.RawMessage(`{"step":`) }, "payload"},
	{"payload too large", func(e *events.Entry) {
		e.Payload = json.RawMessage(`"` + strings.Repeat("x", events.MaxExtensionPayload-1) + `"`)
	}, "payload"},
}

// testInvalidExtensionEvents: a malformed extension event is a
// *events.ValidationError wrapping ErrInvalidEntry, alone or in a batch, and
// nothing is written.
func testInvalidExtensionEvents(t *testing.T, s adapters.Ledger) {
	for _, tt := range invalidExtensions {
		t.Run(tt.name, func(t *testing.T) {
			e := events.Entry{Ts: T0, Name: "wf", SandboxID: "sbx-ext-bad", StepIndex: -1, Event: "step_start", Payload: json.RawMessage(`{}`)}
			tt.edit(&e)
			checkInvalid(t, s.Append(ctx(t), e), tt.field)
			batch := []events.Entry{entry(T0, "wf", "sbx-ext-bad", -1, events.SandboxCreated), e}
			checkInvalid(t, s.AppendBatch(ctx(t), batch), tt.field)
		})
	}
	if got := mustRead(t, s, "wf", "sbx-ext-bad"); len(got) != 0 {
		t.Fatalf("invalid extension events wrote %d rows, want 0", len(got))
	}
}

// testExtensionEventsDetails: extension events change no session's details:
// a step_complete is not an exec, a workflow_complete does not close it.
func testExtensionEventsDetails(t *testing.T, s adapters.Store) {
	es := extensionSession("wf", "sbx-ext-1")
	mustAppend(t, s, es[:len(es)-1]...) // not closed
	d, err := s.GetSandboxDetails(ctx(t), "wf", "sbx-ext-1")
	if err != nil || d == nil {
		t.Fatalf("GetSandboxDetails = %+v, %v", d, err)
	}
	if want := details("wf", "sbx-ext-1", T0, 2, 0); *d != want {
		t.Fatalf("details = %+v, want %+v", *d, want)
	}
	mustAppend(t, s, events.Entry{Ts: T0 + 8, Name: "wf", SandboxID: "sbx-ext-1", StepIndex: -1, Event: "workflow_complete"})
	if d, err := s.GetSandboxDetails(ctx(t), "wf", "sbx-ext-1"); err != nil || d == nil || d.Status != adapters.StatusRunning {
		t.Fatalf("GetSandboxDetails after workflow_complete = %+v, %v; want still running", d, err)
	}
}
