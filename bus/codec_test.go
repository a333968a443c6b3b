package bus

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/alineo-labs/alineo/events"
)

func codecSeeds() [][]byte {
	br := 2
	var seeds [][]byte
	for _, e := range []events.Entry{
		events.New(1764400000000, "job", "sbx-1", 3, events.ExecOutput, events.NewOutput(3, events.Stdout, []byte("hi\n\"there\"\x00\xff"))),
		{Ts: 5, Name: "line\nbreak\ttab é", SandboxID: "sbx-2'\"", StepIndex: -1, Branch: &br, Event: events.SandboxPaused, Error: "boom \\ <&>", Actor: "zoë via executor-3"},
		{Ts: 6, Name: "n", SandboxID: "s", Event: events.SandboxResumed, Actor: "alice@host"},
		{Ts: 7, Name: "n", SandboxID: "s", Event: events.SandboxClosed, Payload: json.RawMessage("null")},
		{Seq: 9, Ts: 7, Name: "n", SandboxID: "s", Event: events.ExecStarted, Payload: json.RawMessage(` { "seq" : 1 , "cmd":"a\\u0041"} `)},
		{Ts: 8, Name: "n", SandboxID: "s", Event: events.SandboxClosed, PrevHash: "sha256:00", Hash: "sha256:01"},
	} {
		b, _ := json.Marshal(e)
		seeds = append(seeds, b, appendEntry(nil, e))
	}
	return append(seeds, []byte(`{}`), []byte(`{"ts":1.5}`), []byte(`{"ts":-0,"branch":null}`),
		[]byte(`{"payload":[1,{"a":"\"}"}]}`), []byte(`{"Name":"x"}`), []byte(` {"ts":01}`), []byte(`{"payload":1 2}`),
		[]byte(`{"actor":null}`), []byte(`{"actor":"a\u00e9"}`), []byte(`{"Actor":"x"}`), []byte(`{"actor":"a","actor":"b"}`))
}

// FuzzDecodeEntry: whenever the fast decoder accepts input, encoding/json
// accepts it too and decodes the same entry.
func FuzzDecodeEntry(f *testing.F) {
	for _, s := range codecSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := decodeEntry(data)
		if !ok {
			return
		}
		var want events.Entry
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("fast decoder accepted %q, encoding/json: %v", data, err)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("decode %q:\nfast %+v\njson %+v", data, fast, want)
		}
		// Interned strings decode the same, the first time and the second.
		var in interner
		for range 2 {
			if got, ok := decodeEntryWith(data, &in); !ok || !reflect.DeepEqual(got, want) {
				t.Fatalf("interned decode %q = %+v, %v; want %+v", data, got, ok, want)
			}
		}
	})
}

// FuzzAppendEntry: appendEntry writes JSON that encoding/json decodes back to
// the entry (strings as encoding/json renders invalid UTF-8).
func FuzzAppendEntry(f *testing.F) {
	f.Add(int64(1), "job", "sbx", 2, "exec.output", `{"seq":1}`, "", true, "alice via executor-1")
	f.Add(int64(-5), "a\x00b\xffc", "\"\\", -1, "x", ``, "e\u2028", false, "zo\xffë\n")
	f.Fuzz(func(t *testing.T, ts int64, name, id string, step int, ev, payload, errText string, branch bool, actor string) {
		e := events.Entry{Ts: ts, Name: name, SandboxID: id, StepIndex: step, Event: events.Event(ev), Error: errText, Actor: actor}
		if branch {
			e.Branch = &step
			e.PrevHash, e.Hash = errText, name // any strings: the codec does not check them
		}
		if json.Valid([]byte(payload)) {
			e.Payload = json.RawMessage(payload)
		}
		b := appendEntry(nil, e)
		var got events.Entry
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("appendEntry wrote %q: %v", b, err)
		}
		fix := func(s string) string { // each invalid byte becomes U+FFFD, as encoding/json does
			var b strings.Builder
			for _, r := range s {
				b.WriteRune(r)
			}
			return b.String()
		}
		if !utf8.ValidString(name + id + ev + errText + actor) {
			e.Name, e.SandboxID, e.Event, e.Error, e.Actor = fix(e.Name), fix(e.SandboxID), events.Event(fix(string(e.Event))), fix(e.Error), fix(e.Actor)
			e.PrevHash, e.Hash = fix(e.PrevHash), fix(e.Hash)
		}
		if got.Ts != e.Ts || got.Name != e.Name || got.SandboxID != e.SandboxID || got.StepIndex != e.StepIndex ||
			got.Event != e.Event || got.Error != e.Error || got.Actor != e.Actor || string(got.Payload) != string(e.Payload) ||
			got.PrevHash != e.PrevHash || got.Hash != e.Hash ||
			(got.Branch == nil) != (e.Branch == nil) || (got.Branch != nil && *got.Branch != *e.Branch) {
			t.Fatalf("round trip of %+v through %q = %+v", e, b, got)
		}
		if fast, ok := decodeEntry(b); ok && !reflect.DeepEqual(fast, got) {
			t.Fatalf("fast decode of %q = %+v, want %+v", b, fast, got)
		}
	})
}
