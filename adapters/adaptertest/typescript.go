package adaptertest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// TypeScriptFixture is what one of the ledgers the TypeScript SDK 0.2.0 wrote
// (testdata/typescript-sdk/ at the module's root) holds, as every store must read it:
// the listing, each session's details and checkpoints, the environments.
type TypeScriptFixture struct {
	// File is the fixture's path under the module's testdata/ (testenv.Fixture).
	File string
	// Details are the listed sessions, newest first.
	Details []adapters.SandboxDetails
	// Checkpoints are the checkpoints of the sessions that have any.
	Checkpoints map[events.Session][]adapters.CheckpointInfo
	// Unlisted are sessions with rows but no sandbox_created (a connect()
	// handle): never listed.
	Unlisted []events.Session
	// Environments are the environment records, newest first.
	Environments []adapters.EnvironmentRecord
}

const (
	tsRun       = "b871fc32-b1b6-4866-ae9f-12b80d442659"
	tsExtrasRun = "ca602c10-ae8e-41d2-aace-48b0325d9b7e"
	tsRunSbx    = "cc2cc19c704991b1b274f4ebd402822b"
	tsExtrasSbx = "c26f43da792fac856b23b0171411f148"
)

// TypeScriptSession is typescript-sdk/session.db: a run of 8 execs with a
// checkpoint, and the TypeScript SDK's own resume of it.
var TypeScriptSession = TypeScriptFixture{
	File: "typescript-sdk/session.db",
	Details: []adapters.SandboxDetails{
		{Name: "ts-run", SandboxID: "661e4c9f884a1b74194213d8ffb78ee4", Status: adapters.StatusCompleted,
			StartedAt: 1796114939773, CompletedAt: 1796114939787, ExecCount: 1, RunID: tsRun},
		{Name: "ts-run", SandboxID: tsRunSbx, Status: adapters.StatusCompleted,
			StartedAt: 1796114939494, CompletedAt: 1796114939670, ExecCount: 8, RunID: tsRun},
	},
	Checkpoints: map[events.Session][]adapters.CheckpointInfo{
		{Name: "ts-run", SandboxID: tsRunSbx}: {{SnapshotID: "snap-fdfb6afbaaa8651acbcf249671593f66", Tag: "t1", CreatedAt: 1796114939657}},
	},
}

// TypeScriptExtras is typescript-sdk/extras.db: pause and resume, execCode, a
// session and a PTY, tagged and untagged checkpoints, a fork, a restore, an
// environment build and two sandboxes spawned from it.
var TypeScriptExtras = TypeScriptFixture{
	File: "typescript-sdk/extras.db",
	Details: []adapters.SandboxDetails{
		{Name: "env-tsenv-9abdb466", SandboxID: "9abdb466dbae0a68094bb53ed63db935", Status: adapters.StatusCompleted,
			StartedAt: 1796115237678, CompletedAt: 1796115237698, RunID: "d43450b8-a6d6-4a9b-82c0-e79ca6b69dff"},
		{Name: "env-tsenv-9b42a592", SandboxID: "9b42a59290bab8690022c4ff2a24dae6", Status: adapters.StatusCompleted,
			StartedAt: 1796115237564, CompletedAt: 1796115237573, RunID: "09376fca-19f4-4316-8706-299851f06db3"},
		{Name: "env-tsenv-build", SandboxID: "f81af0ff5753bd64ba17c42a772b0f88", Status: adapters.StatusCompleted,
			StartedAt: 1796115237340, CompletedAt: 1796115237460, ExecCount: 1, RunID: "b60e28f9-584e-4912-bf54-d37ba5fb9b72"},
		{Name: "ts-restored", SandboxID: "e09329c8faa327f5fb968d638e643a26", Status: adapters.StatusCompleted,
			StartedAt: 1796115237224, CompletedAt: 1796115237231, RunID: "80858910-435d-4bd1-bec4-657f39c940a7"},
		{Name: "fork-ts-extras-a8ab7477", SandboxID: "a8ab7477e2f7aee047a2c33eb0946240", Status: adapters.StatusCompleted,
			StartedAt: 1796115236999, CompletedAt: 1796115237008, RunID: tsExtrasRun},
		// execs 1-5 and 7 completed; the PTY (6) never did.
		{Name: "ts-extras", SandboxID: tsExtrasSbx, Status: adapters.StatusCompleted,
			StartedAt: 1796115234678, CompletedAt: 1796115237236, ExecCount: 6, RunID: tsExtrasRun},
	},
	Checkpoints: map[events.Session][]adapters.CheckpointInfo{
		{Name: "ts-extras", SandboxID: tsExtrasSbx}: {
			{SnapshotID: "snap-3e1f61fc73750f7b8edc0b770adda321", Tag: "f1", CreatedAt: 1796115236890},
			{SnapshotID: "snap-a7a2a57963b30b799ec5e86f0f986c2d", CreatedAt: 1796115237110},
		},
		{Name: "env-tsenv-build", SandboxID: "f81af0ff5753bd64ba17c42a772b0f88"}: {
			{SnapshotID: "snap-2dc3e0f2726a82e82f12b40bcbb2c564", Tag: "env:tsenv", CreatedAt: 1796115237448},
		},
	},
	Unlisted: []events.Session{{Name: "ts-extras-connected", SandboxID: tsExtrasSbx}},
	Environments: []adapters.EnvironmentRecord{
		{Name: "tsenv", SnapshotID: "snap-2dc3e0f2726a82e82f12b40bcbb2c564", Image: "ubuntu:22.04", BuiltAt: 1796115237461},
	},
}

// TypeScriptWorkflow is typescript-sdk/workflow.db: two runs of the
// TypeScript SDK's workflow layer, whose own events (run_started,
// step_start, step_complete, checkpoint, snapshot, workflow_complete,
// step_failed, step_rolled_back, workflow_failed) are extension events here:
// they count for nothing in the details (a step_complete is not an exec, a
// checkpoint not a checkpoint_created).
var TypeScriptWorkflow = TypeScriptFixture{
	File: "typescript-sdk/workflow.db",
	Details: []adapters.SandboxDetails{
		{Name: "ts-workflow-failed", SandboxID: "d262cc564b7080ebdf9abc84d645497e", Status: adapters.StatusCompleted,
			StartedAt: 1796437554007, CompletedAt: 1796437554797, ExecCount: 2, RunID: "4d6ad76b-082d-442e-aa23-8c567aaae659"},
		{Name: "ts-workflow", SandboxID: "fd6e9bcdaaefe2306391d2d061b47fa4", Status: adapters.StatusCompleted,
			StartedAt: 1796437552785, CompletedAt: 1796437553331, ExecCount: 3, RunID: "e9f4ec58-eca6-4eec-ba1d-cdfe840be03d"},
	},
	Checkpoints: map[events.Session][]adapters.CheckpointInfo{
		{Name: "ts-workflow", SandboxID: "fd6e9bcdaaefe2306391d2d061b47fa4"}: {
			{SnapshotID: "snap-8d3efb89fb6d54cb41876402c42affd0", Tag: "wf1", CreatedAt: 1796437553060},
		},
	},
}

// CheckTypeScriptFixture checks that s, opened on a copy of f.File (or
// holding its rows), answers as f says: the listing and its filters, every
// session's details, checkpoints and last checkpoint, and the environments.
func CheckTypeScriptFixture(t *testing.T, s adapters.Store, f TypeScriptFixture) {
	t.Helper()
	c := ctx(t)
	all, err := s.ListAllSandboxDetails(c, adapters.ListOptions{})
	if err != nil {
		t.Fatalf("ListAllSandboxDetails: %v", err)
	}
	if !reflect.DeepEqual(all, f.Details) {
		t.Fatalf("ListAllSandboxDetails:\n got %+v\nwant %+v", all, f.Details)
	}
	for _, want := range f.Details {
		d, err := s.GetSandboxDetails(c, want.Name, want.SandboxID)
		if err != nil || d == nil || *d != want {
			t.Errorf("GetSandboxDetails(%s, %s) = %+v, %v; want %+v", want.Name, want.SandboxID, d, err, want)
		}
		byName, err := s.ListSandboxDetails(c, want.Name, adapters.ListOptions{SandboxID: want.SandboxID})
		if err != nil || len(byName) != 1 || byName[0] != want {
			t.Errorf("ListSandboxDetails(%s, sandbox %s) = %+v, %v", want.Name, want.SandboxID, byName, err)
		}
		byRun, err := s.ListAllSandboxDetails(c, adapters.ListOptions{RunID: want.RunID, Status: want.Status})
		if err != nil || !slices.Contains(byRun, want) {
			t.Errorf("ListAllSandboxDetails(run %s) = %+v, %v; want it to hold %s", want.RunID, byRun, err, want.SandboxID)
		}
		checkTypeScriptCheckpoints(t, s, want, f.Checkpoints[events.Session{Name: want.Name, SandboxID: want.SandboxID}])
	}
	for _, k := range f.Unlisted {
		if d, err := s.GetSandboxDetails(c, k.Name, k.SandboxID); err != nil || d != nil {
			t.Errorf("GetSandboxDetails(%s, %s) = %+v, %v; want none (no sandbox_created)", k.Name, k.SandboxID, d, err)
		}
		if es, err := s.ReadAll(c, k.Name, k.SandboxID); err != nil || len(es) == 0 {
			t.Errorf("ReadAll(%s, %s) = %d entries, %v; want its rows", k.Name, k.SandboxID, len(es), err)
		}
	}
	envs, err := s.ListEnvironments(c)
	if err != nil || len(envs) != len(f.Environments) || (len(envs) > 0 && !reflect.DeepEqual(envs, f.Environments)) {
		t.Errorf("ListEnvironments = %+v, %v; want %+v", envs, err, f.Environments)
	}
	for _, want := range f.Environments {
		if rec, err := s.GetEnvironment(c, want.Name); err != nil || rec == nil || *rec != want {
			t.Errorf("GetEnvironment(%s) = %+v, %v; want %+v", want.Name, rec, err, want)
		}
	}
}

// checkTypeScriptCheckpoints checks one fixture session's checkpoints and
// last checkpoint.
func checkTypeScriptCheckpoints(t *testing.T, s adapters.Store, want adapters.SandboxDetails, wantCps []adapters.CheckpointInfo) {
	t.Helper()
	c := ctx(t)
	cps, err := s.ListCheckpoints(c, want.Name, want.SandboxID)
	if err != nil || len(cps) != len(wantCps) || (len(cps) > 0 && !reflect.DeepEqual(cps, wantCps)) {
		t.Errorf("ListCheckpoints(%s, %s) = %+v, %v; want %+v", want.Name, want.SandboxID, cps, err, wantCps)
	}
	last, err := s.LastCheckpoint(c, want.Name, want.SandboxID)
	switch {
	case err != nil:
		t.Errorf("LastCheckpoint(%s, %s): %v", want.Name, want.SandboxID, err)
	case len(wantCps) == 0 && last != nil:
		t.Errorf("LastCheckpoint(%s, %s) = %+v, want none", want.Name, want.SandboxID, last)
	case len(wantCps) > 0:
		var p events.CheckpointCreatedPayload
		if last == nil || last.Decode(&p) != nil || p.SnapshotID != wantCps[len(wantCps)-1].SnapshotID {
			t.Errorf("LastCheckpoint(%s, %s) = %+v (%+v), want snapshot %s", want.Name, want.SandboxID, last, p, wantCps[len(wantCps)-1].SnapshotID)
		}
	}
}

// TypeScriptRows returns a session as the TypeScript SDK 0.2.0 writes it,
// names and payloads: sandbox_created {sandboxId, resources, runId}, execs
// exec_start {cmd, seq}, exec_event init, stdout and execution_complete,
// exec_complete {exitCode, seq}, a checkpoint_created tagged "t1" after the
// first exec, and sandbox_closed when closed. Tests insert them as another
// process would, past the store.
func TypeScriptRows(name, id, runID string, ts int64, execs int, closed bool) []events.Entry {
	raw := func(v any) json.RawMessage {
		b, _ := json.Marshal(v)
		return b
	}
	es := []events.Entry{{Ts: ts, Name: name, SandboxID: id, StepIndex: -1, Event: events.TSSandboxCreated,
		Payload: raw(map[string]any{"sandboxId": id, "resources": map[string]string{"cpu": "500m", "memory": "512Mi"}, "runId": runID})}}
	for i := 1; i <= execs; i++ {
		ts++
		add := func(ev events.Event, p any) {
			es = append(es, events.Entry{Ts: ts, Name: name, SandboxID: id, StepIndex: i, Event: ev, Payload: raw(p)})
		}
		add(events.TSExecStart, map[string]any{"cmd": fmt.Sprintf("echo %d", i), "seq": i})
		add(events.TSExecEvent, map[string]any{"seq": i, "type": "init", "text": "0ba063a4", "timestamp": ts})
		add(events.TSExecEvent, map[string]any{"seq": i, "type": "stdout", "text": fmt.Sprint(i), "timestamp": ts})
		add(events.TSExecEvent, map[string]any{"seq": i, "type": "execution_complete", "execution_time": 3, "timestamp": ts})
		add(events.TSExecComplete, map[string]any{"exitCode": 0, "seq": i})
		if i == 1 {
			es = append(es, events.Entry{Ts: ts, Name: name, SandboxID: id, StepIndex: -1, Event: events.TSCheckpointCreated,
				Payload: raw(map[string]any{"snapshotId": "snap-" + id, "name": "t1"})})
		}
	}
	if closed {
		es = append(es, events.Entry{Ts: ts + 1, Name: name, SandboxID: id, StepIndex: -1, Event: events.TSSandboxClosed})
	}
	return es
}

// typeScriptFields are the payload fields the TypeScript SDK 0.2.0 writes,
// per event; an event absent here has no payload.
var typeScriptFields = map[events.Event][]string{
	events.TSSandboxCreated:    {"sandboxId", "resources", "runId", "resumedFrom", "snapshotId", "forkedFrom", "fromSnapshot", "fromEnvironment"},
	events.TSExecStart:         {"cmd", "code", "seq", "interactive", "cwd", "env", "sessionId"},
	events.TSExecEvent:         {"seq", "type", "text", "timestamp", "error", "execution_time"},
	events.TSExecComplete:      {"exitCode", "seq"},
	events.TSCheckpointCreated: {"snapshotId", "name"},
}

// StoredRow is one row of alineo_events as stored: its event name and raw payload.
type StoredRow struct {
	Event   string
	Payload []byte // nil for SQL NULL
}

// CheckTypeScriptVocabulary checks rows a store configured with
// events.TypeScript wrote: only the TypeScript SDK's names (for the events it
// has) and only its payload fields.
func CheckTypeScriptVocabulary(t *testing.T, rows []StoredRow) {
	t.Helper()
	if len(rows) == 0 {
		t.Fatal("no rows")
	}
	for i, r := range rows {
		ev := events.Event(r.Event)
		if ev.Canonical() == ev && events.TypeScript.Name(ev) != ev {
			t.Errorf("row %d: event %q, want its TypeScript name %q", i, r.Event, events.TypeScript.Name(ev))
			continue
		}
		fields, ok := typeScriptFields[ev]
		if !ok {
			if r.Payload != nil && string(r.Payload) != "null" && events.TypeScript.Name(ev.Canonical()) != ev.Canonical() {
				t.Errorf("row %d (%s): payload %s, want none", i, r.Event, r.Payload)
			}
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(r.Payload, &m); err != nil {
			t.Errorf("row %d (%s): payload %s is not a JSON object: %v", i, r.Event, r.Payload, err)
			continue
		}
		for k := range m {
			if !slices.Contains(fields, k) {
				t.Errorf("row %d (%s): payload field %q, which the TypeScript SDK does not write (payload %s)", i, r.Event, k, r.Payload)
			}
		}
	}
}

// GoRows returns a session as this module's SDK writes it in the dotted
// vocabulary: sandbox.created, execs with exec.started {seq, kind, cmd,
// fingerprint}, exec.output (the second exec's output not valid UTF-8) and
// exec.completed, a checkpoint tagged "t1" after the first exec, a pause and a
// resume, and sandbox.closed when closed.
func GoRows(name, id, runID string, ts int64, execs int, closed bool) []events.Entry {
	es := []events.Entry{events.New(ts, name, id, -1, events.SandboxCreated,
		events.SandboxCreatedPayload{SandboxID: id, RunID: runID, Resources: map[string]string{"cpu": "1", "memory": "1Gi"}})}
	for i := 1; i <= execs; i++ {
		ts++
		cmd := fmt.Sprintf("printf %d", i)
		out := []byte(fmt.Sprintf("%d\n", i))
		if i == 2 {
			out = []byte{0xff, 'x', 0}
		}
		es = append(es,
			events.New(ts, name, id, i, events.ExecStarted, events.ExecStartedPayload{Seq: i, Kind: events.KindCommand, Cmd: cmd,
				Fingerprint: events.Fingerprint(events.KindCommand, cmd)}),
			events.New(ts, name, id, i, events.ExecOutput, events.NewOutput(i, events.Stdout, out)),
			events.New(ts, name, id, i, events.ExecCompleted, events.ExecCompletedPayload{Seq: i, ExitCode: i % 2}))
		if i == 1 {
			es = append(es, events.New(ts, name, id, -1, events.CheckpointCreated, events.CheckpointCreatedPayload{SnapshotID: "snap-" + id, Name: "t1"}),
				events.New(ts, name, id, -1, events.SandboxPaused, nil), events.New(ts, name, id, -1, events.SandboxResumed, nil))
		}
	}
	if closed {
		es = append(es, events.New(ts+1, name, id, -1, events.SandboxClosed, nil))
	}
	// Our SDK stamps every entry with its actor: a column the TypeScript
	// SDK's queries, naming theirs, neither write nor read.
	for i := range es {
		es[i].Actor = "go-writer@host"
	}
	return es
}
