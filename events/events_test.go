package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/alineo-labs/alineo/events"
)

func valid() events.Entry {
	return events.New(1764400000000, "ci-job", "sbx-a1", 1, events.ExecCompleted,
		events.ExecCompletedPayload{Seq: 1, ExitCode: 0})
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*events.Entry)
		field string // "" when valid
	}{
		{"valid", func(*events.Entry) {}, ""},
		{"nil payload", func(e *events.Entry) { e.Payload = nil }, ""},
		{"json null payload", func(e *events.Entry) { e.Payload = json.RawMessage("null") }, ""},
		{"sandbox level", func(e *events.Entry) { e.StepIndex = -1 }, ""},
		{"empty name", func(e *events.Entry) { e.Name = "" }, "name"},
		{"empty sandbox id", func(e *events.Entry) { e.SandboxID = "" }, "sandboxId"},
		{"empty event", func(e *events.Entry) { e.Event = "" }, "event"},
		{"unknown event", func(e *events.Entry) { e.Event = "exec_finished" }, "event"},
		{"zero ts", func(e *events.Entry) { e.Ts = 0 }, "ts"},
		{"negative ts", func(e *events.Entry) { e.Ts = -5 }, "ts"},
		{"step below -1", func(e *events.Entry) { e.StepIndex = -2 }, "stepIndex"},
		{"payload not json", func(e *events.Entry) { e.Payload = json.RawMessage("{oops") }, "payload"},
		{"payload wrong type", func(e *events.Entry) { e.Payload = json.RawMessage(`{"seq":"one"}`) }, "payload.seq"},
		{"payload not an object", func(e *events.Entry) { e.Payload = json.RawMessage(`[1,2]`) }, "payload"},
		{"actor", func(e *events.Entry) { e.Actor = "alice via executor-3" }, ""},
		{"actor unicode", func(e *events.Entry) { e.Actor = "zoë@hôte" }, ""},
		{"actor at limit", func(e *events.Entry) { e.Actor = strings.Repeat("a", events.MaxActorLen) }, ""},
		{"actor too long", func(e *events.Entry) { e.Actor = strings.Repeat("a", events.MaxActorLen+1) }, "actor"},
		{"actor not utf-8", func(e *events.Entry) { e.Actor = "al\xffice" }, "actor"},
		{"actor control", func(e *events.Entry) { e.Actor = "alice\nbob" }, "actor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := valid()
			tt.edit(&e)
			err := events.Validate(e)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			var ve *events.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate = %v, want *ValidationError", err)
			}
			if !errors.Is(err, events.ErrInvalidEntry) {
				t.Errorf("errors.Is(err, ErrInvalidEntry) = false for %v", err)
			}
			if got, want := ve.Field, tt.field; got != want {
				t.Errorf("Field = %q, want %q (%v)", got, want, err)
			}
			if got, want := errors.Is(err, events.ErrInvalidActor), tt.field == "actor"; got != want {
				t.Errorf("errors.Is(err, ErrInvalidActor) = %v, want %v", got, want)
			}
		})
	}
}

func TestEventNamesAreStable(t *testing.T) {
	want := []string{
		"sandbox.created", "exec.started", "exec.output", "exec.completed",
		"sandbox.checkpoint_created", "sandbox.paused", "sandbox.resumed",
		"egress.rule_added", "egress.rule_removed", "credential.bound",
		"credential.revoked", "sandbox.closed",
	}
	if got := len(events.All); got != len(want) {
		t.Fatalf("len(All) = %d, want %d", got, len(want))
	}
	for i, ev := range events.All {
		if string(ev) != want[i] {
			t.Errorf("All[%d] = %q, want %q", i, ev, want[i])
		}
		if !ev.Known() {
			t.Errorf("%q.Known() = false", ev)
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	branch := 2
	e := events.New(1764400002001, `agent "quoted"; DROP TABLE x;--`+"\nnew line 👋", "sbx-b2", 3,
		events.ExecStarted, events.ExecStartedPayload{Seq: 3, Kind: events.KindCommand, Cmd: "echo 'h\"é'",
			Fingerprint: events.Fingerprint(events.KindCommand, "echo 'h\"é'")})
	e.Branch = &branch
	e.Error = "boom"
	e.Actor = "alice via executor-3"
	b, err := events.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := events.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != e.Name || got.SandboxID != e.SandboxID || got.Ts != e.Ts || got.StepIndex != e.StepIndex ||
		got.Event != e.Event || got.Error != e.Error || got.Actor != e.Actor || got.Branch == nil || *got.Branch != branch ||
		!bytes.Equal(got.Payload, e.Payload) {
		t.Fatalf("round trip = %+v, want %+v", got, e)
	}
	var p events.ExecStartedPayload
	if err := got.Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.Text() != "echo 'h\"é'" {
		t.Errorf("Text() = %q", p.Text())
	}
}

func TestMarshalRejectsInvalid(t *testing.T) {
	e := valid()
	e.SandboxID = ""
	if _, err := events.Marshal(e); !errors.Is(err, events.ErrInvalidEntry) {
		t.Fatalf("Marshal = %v, want ErrInvalidEntry", err)
	}
}

func TestOutputBinarySafe(t *testing.T) {
	tests := [][]byte{
		[]byte("plain text\n"),
		[]byte("héllo 👋"),
		{0xff, 0xfe, 'a', 0x80, '\n', 0xc3},
		{},
		{0},
		[]byte("valid\x00with NUL"),
	}
	for _, in := range tests {
		p := events.NewOutput(7, events.Stderr, in)
		e := events.New(1, "n", "s", 7, events.ExecOutput, p)
		b, err := events.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		back, err := events.Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		var q events.ExecOutputPayload
		if err := back.Decode(&q); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(q.Bytes(), in) {
			t.Errorf("Bytes() = %q, want %q", q.Bytes(), in)
		}
		if !utf8.ValidString(q.Text) {
			t.Errorf("Text %q is not valid UTF-8", q.Text)
		}
		// Data carries the exact bytes of chunks that are not valid UTF-8 or hold
		// NUL (Postgres JSONB cannot store \u0000); Text never holds NUL.
		textual := utf8.Valid(in) && !bytes.ContainsRune(in, 0)
		if textual != (q.Data == nil) {
			t.Errorf("Data set = %v for input %q, want %v", q.Data != nil, in, !textual)
		}
		if strings.ContainsRune(q.Text, 0) {
			t.Errorf("Text %q holds NUL", q.Text)
		}
		if q.Seq != 7 || q.Type != events.Stderr {
			t.Errorf("payload = %+v", q)
		}
	}
}

func TestOutputReadsTypeScriptShape(t *testing.T) {
	// exec.output as the TypeScript SDK writes it: {seq, type, text}.
	var p events.ExecOutputPayload
	e := events.Entry{Ts: 1, Name: "n", SandboxID: "s", StepIndex: 1, Event: events.ExecOutput,
		Payload: json.RawMessage(`{"seq": 1, "type": "stdout", "text": "h\u00e9llo \ud83d\udc4b"}`)}
	if err := events.Validate(e); err != nil {
		t.Fatal(err)
	}
	if err := e.Decode(&p); err != nil {
		t.Fatal(err)
	}
	if got, want := string(p.Bytes()), "héllo 👋"; got != want {
		t.Errorf("Bytes() = %q, want %q", got, want)
	}
}

func TestFingerprint(t *testing.T) {
	a := events.Fingerprint(events.KindCommand, "ls")
	if a != events.Fingerprint(events.KindCommand, "ls") {
		t.Error("fingerprint not deterministic")
	}
	if a == events.Fingerprint(events.KindCode, "ls") || a == events.Fingerprint(events.KindCommand, "ls ") {
		t.Error("fingerprints collide")
	}
	if !strings.HasPrefix(a, "sha256:") || len(a) != len("sha256:")+64 {
		t.Errorf("fingerprint = %q", a)
	}
}

func TestSubjects(t *testing.T) {
	s, err := events.Subject(events.DefaultSubjectPrefix, "sbx-1", events.ExecOutput)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s, "alineo.ledger.sbx-1.exec.output"; got != want {
		t.Errorf("Subject = %q, want %q", got, want)
	}
	id, ev, err := events.ParseSubject(events.DefaultSubjectPrefix, s)
	if err != nil || id != "sbx-1" || ev != events.ExecOutput {
		t.Errorf("ParseSubject = %q, %q, %v", id, ev, err)
	}
	w, err := events.SandboxSubject("x.y", "abc")
	if err != nil || w != "x.y.abc.>" {
		t.Errorf("SandboxSubject = %q, %v", w, err)
	}
	for _, bad := range []string{"", "a.b", "a*", "a>", "a b"} {
		if _, err := events.Subject(events.DefaultSubjectPrefix, bad, events.ExecOutput); !errors.Is(err, events.ErrInvalidSubject) {
			t.Errorf("Subject(%q) err = %v, want ErrInvalidSubject", bad, err)
		}
	}
	if _, err := events.Subject(events.DefaultSubjectPrefix, "ok", "sandbox.nope"); !errors.Is(err, events.ErrInvalidSubject) {
		t.Errorf("unknown event err = %v", err)
	}
	for _, bad := range []string{"other.sbx.exec.output", "alineo.ledger.sbx", "alineo.ledger.sbx.Nope", "alineo.ledger.sbx.sandbox.nope", "alineo.ledger.sbx.a..b", "alineo.ledger..exec.output"} {
		if _, _, err := events.ParseSubject(events.DefaultSubjectPrefix, bad); !errors.Is(err, events.ErrInvalidSubject) {
			t.Errorf("ParseSubject(%q) err = %v, want ErrInvalidSubject", bad, err)
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	b, _ := events.Marshal(valid())
	f.Add(b)
	f.Add([]byte(`{"ts":1,"name":"n","sandboxId":"s","stepIndex":-1,"event":"sandbox.closed"}`))
	f.Add([]byte(`{"ts":1,"name":"n","sandboxId":"s","stepIndex":1,"event":"exec.output","payload":{"seq":1,"type":"stdout","text":"x","data":"/w=="}}`))
	f.Add([]byte(`null`))
	f.Add([]byte{0xff, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := events.Unmarshal(data)
		if err != nil {
			if !errors.Is(err, events.ErrInvalidEntry) {
				t.Fatalf("error %v does not wrap ErrInvalidEntry", err)
			}
			return
		}
		// A decoded entry is valid and re-encodes to something that decodes the same.
		b, err := events.Marshal(e)
		if err != nil {
			t.Fatalf("re-marshal of a decoded entry: %v", err)
		}
		e2, err := events.Unmarshal(b)
		if err != nil {
			t.Fatalf("decode of re-marshalled entry: %v", err)
		}
		if e2.Name != e.Name || e2.SandboxID != e.SandboxID || e2.Ts != e.Ts || e2.Event != e.Event {
			t.Fatalf("round trip changed entry: %+v vs %+v", e, e2)
		}
	})
}

func FuzzParseSubject(f *testing.F) {
	f.Add("alineo.ledger.sbx.exec.output")
	f.Add("alineo.ledger..")
	f.Fuzz(func(t *testing.T, s string) {
		id, ev, err := events.ParseSubject(events.DefaultSubjectPrefix, s)
		if err != nil {
			return
		}
		back, err := events.Subject(events.DefaultSubjectPrefix, id, ev)
		if err != nil || back != s {
			t.Fatalf("Subject(ParseSubject(%q)) = %q, %v", s, back, err)
		}
	})
}

// FuzzPayloadFastPath checks that Validate's fast checks of the common
// payloads give the verdict of a full decode into the payload type.
func FuzzPayloadFastPath(f *testing.F) {
	for _, s := range []string{
		`{"seq":1,"type":"stdout","text":"hi\n"}`, `{"seq":1,"type":"stdout","text":null}`,
		`{"seq":1,"type":"stdout","text":5}`, `{"seq":1,"text":"\u00e9","data":"/w=="}`,
		`{"seq":1,"data":"!!"}`, `{"seq":1.5}`, `{"Seq":1,"TEXT":"x"}`, `{"text":["a"]}`, `[]`, `"x"`,
		`{"seq":2,"exitCode":-1}`, `{"seq":3,"kind":"command","cmd":"ls \"a\"","fingerprint":"x"}`,
		`{"sandboxId":"s","runId":"r","resources":{"cpu":"1"}}`, `{"snapshotId":"x","name":"t\u00"}`,
	} {
		for which := range uint8(5) {
			f.Add([]byte(s), which)
		}
	}
	f.Fuzz(func(t *testing.T, payload []byte, which uint8) {
		types := []struct {
			ev events.Event
			p  func() any
		}{
			{events.ExecOutput, func() any { return new(events.ExecOutputPayload) }},
			{events.ExecStarted, func() any { return new(events.ExecStartedPayload) }},
			{events.ExecCompleted, func() any { return new(events.ExecCompletedPayload) }},
			{events.SandboxCreated, func() any { return new(events.SandboxCreatedPayload) }},
			{events.CheckpointCreated, func() any { return new(events.CheckpointCreatedPayload) }},
		}
		tt := types[int(which)%len(types)]
		e := events.Entry{Ts: 1, Name: "n", SandboxID: "s", StepIndex: 1, Event: tt.ev, Payload: payload}
		want := json.Unmarshal(payload, tt.p()) == nil
		if got := events.Validate(e) == nil; got != want {
			t.Fatalf("%s payload %q: Validate ok = %v, full decode ok = %v", tt.ev, payload, got, want)
		}
	})
}

func TestSandboxClosedFinal(t *testing.T) {
	for _, tc := range []struct {
		payload string
		want    bool
	}{
		{`{}`, true}, // written before outcomes were: a plain close
		{`{"reason":"taken over","by":"w2","job":"j"}`, true},
		{`{"outcome":"closed"}`, true},
		{`{"outcome":"expired"}`, true},
		{`{"reason":"taken over","outcome":"unreachable"}`, false},
	} {
		var p events.SandboxClosedPayload
		if err := json.Unmarshal([]byte(tc.payload), &p); err != nil {
			t.Fatal(err)
		}
		if got := p.Final(); got != tc.want {
			t.Errorf("%s: Final = %v, want %v", tc.payload, got, tc.want)
		}
	}
}
