package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/events"
)

func TestExtensionNames(t *testing.T) {
	tests := []struct {
		ev        events.Event
		extension bool
	}{
		// The TypeScript SDK's workflow layer (LedgerEvent in packages/core/src/ledger.ts).
		{"run_started", true},
		{"step_start", true},
		{"step_complete", true},
		{"step_failed", true},
		{"step_rolled_back", true},
		{"workflow_complete", true},
		{"workflow_failed", true},
		{"checkpoint", true},
		{"snapshot", true},
		// An agent's own events, dotted.
		{"ext.permission_requested", true},
		{"agent.turn.checkpoint", true},
		{"a", true},
		{"a-b_c.d9", true},
		{"sandboxes.listed", true}, // a longer word than "sandbox"
		{"execution_started", true},
		{"checkpoint_deleted", true},
		{events.Event(strings.Repeat("a", events.MaxEventName)), true},
		// Known names are not extensions.
		{events.ExecStarted, false},
		{events.TSExecStart, false},
		{events.TSCheckpointCreated, false},
		// Reserved namespaces.
		{"sandbox", false},
		{"sandbox.renamed", false},
		{"sandbox_renamed", false},
		{"sandbox-renamed", false},
		{"exec.killed", false},
		{"exec_finished", false},
		{"egress.changed", false},
		{"egress_rule", false},
		{"credential.rotated", false},
		{"credential_bound", false},
		// Grammar.
		{"", false},
		{events.Event(strings.Repeat("a", events.MaxEventName+1)), false},
		{"Run_started", false},
		{"1step", false},
		{"_step", false},
		{".step", false},
		{"step.", false},
		{"step..start", false},
		{"step start", false},
		{"step*", false},
		{"step>", false},
		{"step/start", false},
		{"étape", false},
		{"step\n", false},
	}
	for _, tt := range tests {
		if got := tt.ev.Extension(); got != tt.extension {
			t.Errorf("Event(%q).Extension() = %v, want %v", tt.ev, got, tt.extension)
		}
		if got, want := tt.ev.Valid(), tt.extension || tt.ev.Known(); got != want {
			t.Errorf("Event(%q).Valid() = %v, want %v", tt.ev, got, want)
		}
		err := events.CheckEvent(tt.ev)
		if tt.ev.Valid() != (err == nil) {
			t.Errorf("CheckEvent(%q) = %v, want nil iff Valid", tt.ev, err)
		}
		var ve *events.ValidationError
		if err != nil && (!errors.As(err, &ve) || ve.Field != "event" || !errors.Is(err, events.ErrInvalidEntry)) {
			t.Errorf("CheckEvent(%q) = %v, want a *ValidationError of field event wrapping ErrInvalidEntry", tt.ev, err)
		}
	}
}

func TestValidateExtension(t *testing.T) {
	ok := events.New(1764400000000, "wf", "sbx-1", events.SandboxLevel, "step_complete", map[string]any{"step": 1})
	tests := []struct {
		name  string
		edit  func(*events.Entry)
		field string // "" when valid
	}{
		{"valid", func(*events.Entry) {}, ""},
		{"no payload", func(e *events.Entry) { e.Payload = nil }, ""},
		{"json null", func(e *events.Entry) { e.Payload = json.RawMessage("null") }, ""},
		{"a string", func(e *events.Entry) { e.Payload = json.RawMessage(`"x"`) }, ""},
		{"at the step of an exec", func(e *events.Entry) { e.StepIndex = 3 }, ""},
		{"with an error", func(e *events.Entry) { e.Error = "boom" }, ""},
		{"largest payload", func(e *events.Entry) {
			e.Payload = json.RawMessage(`"` + strings.Repeat("x", events.MaxExtensionPayload-2) + `"`)
		}, ""},
		{"payload too large", func(e *events.Entry) {
			e.Payload = json.RawMessage(`"` + strings.Repeat("x", events.MaxExtensionPayload-1) + `"`)
		}, "payload"},
		{"payload not json", func(e *events.Entry) { e.Payload = json.RawMessage(`{"step":`) }, "payload"},
		{"reserved name", func(e *events.Entry) { e.Event = "exec.killed" }, "event"},
		{"malformed name", func(e *events.Entry) { e.Event = "Step Complete" }, "event"},
		{"empty name", func(e *events.Entry) { e.Name = "" }, "name"},
		{"zero ts", func(e *events.Entry) { e.Ts = 0 }, "ts"},
		{"step below -1", func(e *events.Entry) { e.StepIndex = -2 }, "stepIndex"},
		{"with an actor", func(e *events.Entry) { e.Actor = "alice via executor-3" }, ""},
		{"actor with a control character", func(e *events.Entry) { e.Actor = "alice\n" }, "actor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := ok
			tt.edit(&e)
			err := events.Validate(e)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				if _, err := events.Marshal(e); err != nil {
					t.Fatalf("Marshal = %v", err)
				}
				return
			}
			var ve *events.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, events.ErrInvalidEntry) {
				t.Fatalf("Validate = %v, want *ValidationError wrapping ErrInvalidEntry", err)
			}
			if got, want := ve.Field, tt.field; got != want {
				t.Errorf("Field = %q, want %q (%v)", got, want, err)
			}
		})
	}
}

func TestExtensionSubjects(t *testing.T) {
	for _, ev := range []events.Event{"run_started", "ext.permission_requested", "agent.turn-1.checkpoint"} {
		s, err := events.Subject(events.DefaultSubjectPrefix, "sbx-1", ev)
		if err != nil {
			t.Fatalf("Subject(%q) = %v", ev, err)
		}
		if got, want := s, "alineo.ledger.sbx-1."+string(ev); got != want {
			t.Errorf("Subject = %q, want %q", got, want)
		}
		id, back, err := events.ParseSubject(events.DefaultSubjectPrefix, s)
		if err != nil || id != "sbx-1" || back != ev {
			t.Errorf("ParseSubject(%q) = %q, %q, %v; want sbx-1, %q", s, id, back, err, ev)
		}
	}
	for _, bad := range []events.Event{"exec.killed", "Step", "a..b", "a.*", "a.>"} {
		_, err := events.Subject(events.DefaultSubjectPrefix, "sbx-1", bad)
		if !errors.Is(err, events.ErrInvalidSubject) || !errors.Is(err, events.ErrInvalidEntry) {
			t.Errorf("Subject(%q) = %v, want ErrInvalidSubject and ErrInvalidEntry", bad, err)
		}
	}
}

// FuzzExtensionName checks the grammar against its definition, and that a
// name it takes is a valid entry's event and a subject that maps back.
func FuzzExtensionName(f *testing.F) {
	for _, s := range []string{"run_started", "ext.permission_requested", "sandbox.x", "exec_start",
		"checkpoint_created", "a..b", "A", "a.", "a b", "a*", "é", strings.Repeat("a", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ev := events.Event(s)
		ext := ev.Extension()
		if ext != byDefinition(s) && !ev.Known() {
			t.Fatalf("Extension(%q) = %v, want %v", s, ext, !ext)
		}
		if ext && ev.Known() {
			t.Fatalf("%q is both Known and an Extension", s)
		}
		e := events.Entry{Ts: 1, Name: "n", SandboxID: "sbx", StepIndex: -1, Event: ev, Payload: json.RawMessage(`{}`)}
		if err := events.Validate(e); (err == nil) != ev.Valid() {
			t.Fatalf("Validate(event %q) = %v, Valid = %v", s, err, ev.Valid())
		}
		if !ev.Valid() {
			return
		}
		subj, err := events.Subject(events.DefaultSubjectPrefix, "sbx", ev)
		if err != nil {
			t.Fatalf("Subject(%q) = %v", s, err)
		}
		if id, back, err := events.ParseSubject(events.DefaultSubjectPrefix, subj); err != nil || id != "sbx" || back != ev {
			t.Fatalf("ParseSubject(%q) = %q, %q, %v", subj, id, back, err)
		}
	})
}

// byDefinition is the extension grammar written another way: a regular
// language checked token by token.
func byDefinition(s string) bool {
	if len(s) == 0 || len(s) > events.MaxEventName || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || strings.Trim(tok, "abcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
			return false
		}
	}
	for _, ns := range []string{"sandbox", "exec", "egress", "credential"} {
		for _, sep := range []string{"", ".", "_", "-"} {
			if s == ns || (sep != "" && strings.HasPrefix(s, ns+sep)) {
				return false
			}
		}
	}
	return true
}
