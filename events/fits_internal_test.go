package events

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestPayloadFits(t *testing.T) {
	tests := []struct {
		ev      Event
		payload string
		want    bool
	}{
		{ExecOutput, `{"seq":1,"type":"stdout","text":"hi"}`, true},
		{ExecOutput, ` { "seq" : -0 , "text" : "a\"b\u00e9" } `, true},
		{ExecOutput, `{}`, true},
		{ExecOutput, `{"seq":1.5}`, false},
		{ExecOutput, `{"seq":1e2}`, false},
		{ExecOutput, `{"seq":"1"}`, false},
		{ExecOutput, `{"seq":99999999999999999999}`, false},
		{ExecOutput, `{"text":1}`, false},
		{ExecOutput, `{"text":null}`, false},
		{ExecOutput, `{"data":"aGk="}`, true},
		{ExecOutput, `{"seq":1,"text":"\ufffd","data":"AA=="}`, true},
		{ExecOutput, `{"data":""}`, true},
		{ExecOutput, `{"data":"aGlh"}`, true},
		{ExecOutput, `{"data":"aGk"}`, false},      // unpadded
		{ExecOutput, `{"data":"a==="}`, false},     // too much padding
		{ExecOutput, `{"data":"aGk=aGk="}`, false}, // padding inside
		{ExecOutput, `{"data":"aG=="}`, true},
		{ExecOutput, `{"data":"aGk=`, false},
		{ExecOutput, `{"data":"aGk="`, false},
		{ExecOutput, `{"data":"a\/k="}`, false}, // an escape: left to encoding/json
		{ExecOutput, `{"data":"-_k="}`, false},  // URL alphabet
		{ExecOutput, `{"data":null}`, false},
		{ExecOutput, `{"data":1}`, false},
		{ExecOutput, `{"seq":01}`, false},
		{ExecOutput, `{"seq":-}`, false},
		{ExecOutput, `{"seq":123456789012345678}`, true},
		{ExecOutput, `{"text":"bad \q escape"}`, false},
		{ExecOutput, `{"text":"short \u12"}`, false},
		{ExecOutput, `{"text":"tab	raw"}`, false},
		{ExecOutput, `{"text":"unterminated}`, false},
		{ExecOutput, `{"text":"x"} trailing`, false},
		{ExecOutput, `{"Seq":1}`, false}, // case-folded match: left to encoding/json
		{ExecOutput, `{"other":1}`, false},
		{ExecOutput, `[1]`, false},
		{ExecOutput, `null`, false},
		{ExecCompleted, `{"seq":2,"exitCode":-1}`, true},
		{ExecCompleted, `{"seq":2,"exitCode":true}`, false},
		{ExecStarted, `{"seq":1,"kind":"command","cmd":"echo 1"}`, true},
		{SandboxCreated, `{"sandboxId":"s","runId":"r"}`, true},
		{SandboxCreated, `{"sandboxId":"s","resources":{"cpu":"1"}}`, false},
		{CheckpointCreated, `{"snapshotId":"x","name":"tag"}`, true},
		{SandboxClosed, `{}`, false}, // no payload type known here
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
		`{"sandboxId":"s","runId":"r"}`, `{"seq":-0,"text":"\ud800"}`, `{"seq":1,"seq":"x"}`,
		`{"seq":1,"data":"aGk="}`, `{"data":"aG=="}`, `{"data":"a\nGk="}`} {
		for _, ev := range []Event{ExecOutput, ExecCompleted, ExecStarted,
			SandboxCreated, CheckpointCreated} {
			f.Add(string(ev), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, ev string, payload []byte) {
		if !payloadFits(Event(ev), payload) {
			return
		}
		if !json.Valid(payload) {
			t.Fatalf("payloadFits accepted %q, which is not valid JSON", payload)
		}
		p := payloadFor(Event(ev))
		if p == nil {
			t.Fatalf("payloadFits accepted %q for %q, which has no payload type here", payload, ev)
		}
		if err := json.Unmarshal(payload, p); err != nil {
			t.Fatalf("payloadFits accepted %q for %s; encoding/json: %v", payload, ev, err)
		}
	})
}

func TestValidJSON(t *testing.T) {
	for _, s := range []string{
		`{}`, ` [ ] `, `{"a":[1,-0,0.5,1e9,-2.5E-3,true,false,null,"x\u00e9\n"]}`, `"only"`, `12`, `-0`,
		`{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `1e`, `+1`, `-`, `tru`, `nul`, `"\x"`, "\"a\tb\"", "\"a\x01\"",
		`{"a" 1}`, `{1:2}`, `[1 2]`, ``, ` `, `{} {}`, `"\ud800"`, "\"\xff\"",
		strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
		strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	} {
		if got, want := ValidJSON([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("ValidJSON(%.40q) = %v, json.Valid = %v", s, got, want)
		}
	}
}

// FuzzValidJSON: ValidJSON answers as json.Valid on any input.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e3,true,null,"x"]}`, `[{"k":"\u00e9"}]`, `-0.0E+1`, `"\ud800"`, `{"a":}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := ValidJSON(b), json.Valid(b); got != want {
			t.Fatalf("ValidJSON(%q) = %v, json.Valid = %v", b, got, want)
		}
	})
}

func TestJSONValueLen(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		okay bool
	}{
		{`{"a":1},"next":2}`, 7, true},
		{` [1, "]"] tail`, 9, true},
		{`"x\"y",`, 6, true},
		{`12}`, 2, true},
		{`nullx`, 4, true},
		{`{"a":}`, 0, false},
		{``, 0, false},
	} {
		n, ok := JSONValueLen([]byte(tt.in))
		if n != tt.n || ok != tt.okay {
			t.Errorf("JSONValueLen(%q) = %d, %v; want %d, %v", tt.in, n, ok, tt.n, tt.okay)
		}
		if ok && !ValidJSON([]byte(tt.in)[:n]) {
			t.Errorf("JSONValueLen(%q): %q is not valid", tt.in, tt.in[:n])
		}
	}
}
