package bus

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/alineo-labs/alineo/events"
)

// payloadType returns a pointer to a zero payload of ev's type, for the
// events payloadFields knows.
func payloadType(ev events.Event) any {
	switch ev {
	case events.ExecOutput:
		return new(events.ExecOutputPayload)
	case events.ExecStarted:
		return new(events.ExecStartedPayload)
	case events.ExecCompleted:
		return new(events.ExecCompletedPayload)
	case events.SandboxCreated:
		return new(events.SandboxCreatedPayload)
	case events.CheckpointCreated:
		return new(events.CheckpointCreatedPayload)
	}
	return nil
}

func TestPayloadFits(t *testing.T) {
	tests := []struct {
		ev      events.Event
		payload string
		want    bool
	}{
		{events.ExecOutput, `{"seq":1,"type":"stdout","text":"hi"}`, true},
		{events.ExecOutput, ` { "seq" : -0 , "text" : "a\"b\u00e9" } `, true},
		{events.ExecOutput, `{}`, true},
		{events.ExecOutput, `{"seq":1.5}`, false},
		{events.ExecOutput, `{"seq":1e2}`, false},
		{events.ExecOutput, `{"seq":"1"}`, false},
		{events.ExecOutput, `{"seq":99999999999999999999}`, false},
		{events.ExecOutput, `{"text":1}`, false},
		{events.ExecOutput, `{"text":null}`, false},
		{events.ExecOutput, `{"data":"aGk="}`, false}, // base64: left to encoding/json
		{events.ExecOutput, `{"Seq":1}`, false},       // case-folded match: left to encoding/json
		{events.ExecOutput, `{"other":1}`, false},
		{events.ExecOutput, `[1]`, false},
		{events.ExecOutput, `null`, false},
		{events.ExecCompleted, `{"seq":2,"exitCode":-1}`, true},
		{events.ExecCompleted, `{"seq":2,"exitCode":true}`, false},
		{events.ExecStarted, `{"seq":1,"kind":"command","cmd":"echo 1"}`, true},
		{events.SandboxCreated, `{"sandboxId":"s","runId":"r"}`, true},
		{events.SandboxCreated, `{"sandboxId":"s","resources":{"cpu":"1"}}`, false},
		{events.CheckpointCreated, `{"snapshotId":"x","name":"tag"}`, true},
		{events.SandboxClosed, `{}`, false}, // no payload type known here
	}
	for _, tt := range tests {
		if got := payloadFits(tt.ev, []byte(tt.payload)); got != tt.want {
			t.Errorf("payloadFits(%s, %s) = %v, want %v", tt.ev, tt.payload, got, tt.want)
		}
	}
}

// FuzzPayloadFits: whenever payloadFits accepts a payload, it is valid JSON
// and encoding/json decodes it into the event's payload type without error.
func FuzzPayloadFits(f *testing.F) {
	for _, s := range []string{`{"seq":1,"type":"stdout","text":"hi"}`, `{"seq":1,"exitCode":0}`,
		`{"sandboxId":"s","runId":"r"}`, `{"seq":-0,"text":"\ud800"}`, `{"seq":1,"seq":"x"}`} {
		for _, ev := range []events.Event{events.ExecOutput, events.ExecCompleted, events.ExecStarted,
			events.SandboxCreated, events.CheckpointCreated} {
			f.Add(string(ev), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, ev string, payload []byte) {
		if !payloadFits(events.Event(ev), payload) {
			return
		}
		if !json.Valid(payload) {
			t.Fatalf("payloadFits accepted %q, which is not valid JSON", payload)
		}
		p := payloadType(events.Event(ev))
		if p == nil {
			t.Fatalf("payloadFits accepted %q for %q, which has no payload type here", payload, ev)
		}
		if err := json.Unmarshal(payload, p); err != nil {
			t.Fatalf("payloadFits accepted %q for %s; encoding/json: %v", payload, ev, err)
		}
	})
}

// FuzzDecodeValidMsg: DecodeValidMsg agrees with DecodeMsg followed by
// events.Validate, on the entry and on whether it is an error.
func FuzzDecodeValidMsg(f *testing.F) {
	for _, e := range []events.Entry{
		events.New(1, "n", "sb", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte("out"))),
		events.New(1, "n", "sb", 1, events.ExecOutput, events.NewOutput(1, events.Stderr, []byte{0, 0xff})),
		events.New(1, "n", "sb", 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1}),
		events.New(1, "n", "sb", -1, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb", RunID: "r"}),
		events.New(1, "n", "sb", -1, events.SandboxClosed, nil),
	} {
		b, err := events.Marshal(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"ts":1,"name":"n","sandboxId":"s","stepIndex":1,"event":"exec.output","payload":{"seq":"x"}}`))
	f.Add([]byte(`{"ts":0,"name":"n","sandboxId":"s","stepIndex":1,"event":"exec.output","payload":{"seq":1}}`))
	f.Add([]byte(`{"ts":1,"name":"n","sandboxId":"s","stepIndex":-2,"event":"exec.completed","payload":{"seq":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, gotErr := DecodeValidMsg(data, 7)
		want, wantErr := DecodeMsg(data, 7)
		if wantErr == nil {
			if wantErr = events.Validate(want); wantErr != nil {
				want = events.Entry{}
			}
		}
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("DecodeValidMsg(%q) error %v; DecodeMsg+Validate error %v", data, gotErr, wantErr)
		}
		if gotErr != nil {
			if !errors.Is(gotErr, events.ErrInvalidEntry) {
				t.Fatalf("DecodeValidMsg(%q) error %v does not wrap ErrInvalidEntry", data, gotErr)
			}
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeValidMsg(%q) = %+v, want %+v", data, got, want)
		}
	})
}
