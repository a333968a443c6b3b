package events_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/alineo-labs/alineo/events"
)

func TestCanonical(t *testing.T) {
	pairs := map[events.Event]events.Event{
		events.TSSandboxCreated: events.SandboxCreated, events.TSExecStart: events.ExecStarted,
		events.TSExecEvent: events.ExecOutput, events.TSExecComplete: events.ExecCompleted,
		events.TSCheckpointCreated: events.CheckpointCreated, events.TSSandboxPaused: events.SandboxPaused,
		events.TSSandboxResumed: events.SandboxResumed, events.TSSandboxClosed: events.SandboxClosed,
	}
	for ts, dotted := range pairs {
		if got := ts.Canonical(); got != dotted {
			t.Errorf("%s.Canonical() = %s, want %s", ts, got, dotted)
		}
		if got := events.TypeScript.Name(dotted); got != ts {
			t.Errorf("TypeScript.Name(%s) = %s, want %s", dotted, got, ts)
		}
		if !ts.Known() || !ts.Is(dotted) || !dotted.Is(ts) {
			t.Errorf("%s: Known %v, Is(%s) %v", ts, ts.Known(), dotted, ts.Is(dotted))
		}
		if got := events.Names(dotted); !reflect.DeepEqual(got, []events.Event{dotted, ts}) {
			t.Errorf("Names(%s) = %v", dotted, got)
		}
	}
	for _, ev := range events.All {
		if ev.Canonical() != ev || events.Dotted.Name(ev) != ev {
			t.Errorf("%s is not its own canonical or dotted name", ev)
		}
	}
	for _, ev := range []events.Event{events.EgressRuleAdded, events.CredentialBound, "exec_finished", ""} {
		if events.TypeScript.Name(ev) != ev || ev.Canonical() != ev {
			t.Errorf("%q changed", ev)
		}
	}
	if events.Event("exec_finished").Known() {
		t.Error("exec_finished is known")
	}
}

func TestEncodeTypeScript(t *testing.T) {
	const ts = 1796000000000
	tests := []struct {
		in   events.Entry
		name events.Event
		want string // payload; "" for none
	}{
		{events.New(ts, "n", "s", 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Kind: events.KindCommand, Cmd: "ls",
			Fingerprint: events.Fingerprint(events.KindCommand, "ls")}), events.TSExecStart, `{"cmd":"ls","seq":1}`},
		{events.New(ts, "n", "s", 2, events.ExecStarted, events.ExecStartedPayload{Seq: 2, Kind: events.KindCode, Code: "print(1)"}),
			events.TSExecStart, `{"code":"print(1)","seq":2}`},
		{events.New(ts, "n", "s", 3, events.ExecStarted, events.ExecStartedPayload{Seq: 3, Kind: events.KindCommand}),
			events.TSExecStart, `{"cmd":"","seq":3}`},
		{events.New(ts, "n", "s", 1, events.ExecOutput, events.NewOutput(1, events.Stderr, []byte("a\nb\n"))),
			events.TSExecEvent, `{"seq":1,"type":"stderr","text":"a\nb\n","timestamp":1796000000000}`},
		{events.New(ts, "n", "s", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte{0xff, 'x'})),
			events.TSExecEvent, "{\"seq\":1,\"type\":\"stdout\",\"text\":\"\ufffdx\",\"timestamp\":1796000000000}"},
		{events.New(ts, "n", "s", 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1, ExitCode: 3}),
			events.TSExecComplete, `{"seq":1,"exitCode":3}`},
		{events.New(ts, "n", "s", -1, events.CheckpointCreated, events.CheckpointCreatedPayload{SnapshotID: "snap", Name: "t"}),
			events.TSCheckpointCreated, `{"snapshotId":"snap","name":"t"}`},
		{events.New(ts, "n", "s", -1, events.SandboxClosed, nil), events.TSSandboxClosed, ""},
		{events.New(ts, "n", "s", -1, events.EgressRuleAdded, events.EgressRulePayload{Action: events.Allow, Target: "x.com"}),
			events.EgressRuleAdded, `{"action":"allow","target":"x.com"}`},
	}
	for _, tt := range tests {
		got, err := events.TypeScript.Encode(tt.in)
		if err != nil {
			t.Fatalf("Encode(%s): %v", tt.in.Event, err)
		}
		if got.Event != tt.name || string(got.Payload) != tt.want {
			t.Errorf("Encode(%s) = %s %s, want %s %s", tt.in.Event, got.Event, got.Payload, tt.name, tt.want)
		}
		if err := events.Validate(got); err != nil {
			t.Errorf("Encode(%s) does not validate: %v", tt.in.Event, err)
		}
		if same, _ := events.Dotted.Encode(tt.in); !reflect.DeepEqual(same, tt.in) {
			t.Errorf("Dotted.Encode changed %s", tt.in.Event)
		}
	}
}

func TestUnwrapPayload(t *testing.T) {
	tests := map[string]string{
		`{"a":1}`:                  `{"a":1}`,
		`"{\"snapshotId\":\"s\"}"`: `{"snapshotId":"s"}`,
		`" [1, 2] "`:               `[1, 2]`,
		`"plain text"`:             `"plain text"`,
		`"{not json"`:              `"{not json"`,
		`"\"{\\\"a\\\":1}\""`:      `"\"{\\\"a\\\":1}\""`, // decoded once only
		`null`:                     `null`,
		`""`:                       `""`,
		`"`:                        `"`,
	}
	for in, want := range tests {
		if got := string(events.UnwrapPayload(json.RawMessage(in))); got != want {
			t.Errorf("UnwrapPayload(%s) = %s, want %s", in, got, want)
		}
	}
	e := events.Entry{Event: events.CheckpointCreated, Payload: json.RawMessage(`"{\"snapshotId\":\"snap-1\",\"name\":\"t1\"}"`)}
	var p events.CheckpointCreatedPayload
	if err := e.Decode(&p); err != nil || p.SnapshotID != "snap-1" || p.Name != "t1" {
		t.Fatalf("Decode of a JSONB-string payload = %+v, %v", p, err)
	}
	e.Ts, e.Name, e.SandboxID, e.StepIndex = 1, "n", "s", -1
	if err := events.Validate(e); err != nil {
		t.Fatalf("Validate of a JSONB-string payload: %v", err)
	}
}

func TestOutputStream(t *testing.T) {
	for in, want := range map[string]bool{
		`{"seq":1,"type":"stdout","text":"a"}`:                     true,
		`{"seq":1,"type":"stderr","text":"a"}`:                     true,
		`{"seq":1,"type":"init","text":"x"}`:                       false,
		`{"seq":1,"type":"error","error":{"evalue":"3"}}`:          false,
		`{"seq":1,"type":"execution_complete","execution_time":3}`: false,
		`"{\"seq\":1,\"type\":\"stdout\",\"text\":\"a\"}"`:         true,
		`oops`: false,
	} {
		if _, got := events.OutputStream(json.RawMessage(in)); got != want {
			t.Errorf("OutputStream(%s) = %v, want %v", in, got, want)
		}
	}
}

func TestParseVocabulary(t *testing.T) {
	for in, want := range map[string]events.Vocabulary{"": events.Dotted, "dotted": events.Dotted, "TypeScript": events.TypeScript, "ts": events.TypeScript} {
		if got, err := events.ParseVocabulary(in); err != nil || got != want {
			t.Errorf("ParseVocabulary(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := events.ParseVocabulary("kebab"); err == nil {
		t.Error("ParseVocabulary(kebab) succeeded")
	}
	if events.TypeScript.String() != "typescript" || events.Dotted.String() != "dotted" {
		t.Error("String")
	}
}

// FuzzUnwrapPayload: whatever the input, UnwrapPayload never panics, returns
// the input or valid JSON, and is idempotent on what it returns from a string.
func FuzzUnwrapPayload(f *testing.F) {
	f.Add([]byte(`"{\"a\":1}"`))
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte(`"x"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got := events.UnwrapPayload(b)
		if string(got) != string(b) && !json.Valid(got) {
			t.Fatalf("UnwrapPayload(%q) = %q, not valid JSON", b, got)
		}
	})
}

// FuzzEncodeTypeScript: any entry that validates encodes into one that
// validates, under its TypeScript name.
func FuzzEncodeTypeScript(f *testing.F) {
	f.Add("exec.started", []byte(`{"seq":1,"cmd":"ls"}`))
	f.Add("exec.output", []byte(`{"seq":1,"type":"stdout","text":"a","data":"/w=="}`))
	f.Add("sandbox.closed", []byte(nil))
	f.Fuzz(func(t *testing.T, ev string, payload []byte) {
		e := events.Entry{Ts: 1, Name: "n", SandboxID: "s", StepIndex: 1, Event: events.Event(ev)}
		if payload != nil {
			e.Payload = payload
		}
		if events.Validate(e) != nil {
			return
		}
		got, err := events.TypeScript.Encode(e)
		if err != nil {
			t.Fatalf("Encode(%s %s): %v", ev, payload, err)
		}
		if err := events.Validate(got); err != nil {
			t.Fatalf("Encode(%s %s) = %s %s, does not validate: %v", ev, payload, got.Event, got.Payload, err)
		}
		if got.Event != events.TypeScript.Name(e.Event) {
			t.Fatalf("name = %s", got.Event)
		}
	})
}
