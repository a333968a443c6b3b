package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/alineo-labs/alineo/events"
)

// TestValidateMatchesEvents checks that validate gives events.Validate's
// verdict, including on payloads the fast path must hand back.
func TestValidateMatchesEvents(t *testing.T) {
	base := events.New(1, "n", "s", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte("hi\n")))
	payloads := []string{
		`{"seq":1,"type":"stdout","text":"hi"}`,
		`{"seq":"1","type":"stdout","text":"hi"}`,
		`{"seq":1,"type":"stdout","text":"bad \x01 control"}`,
		`{"seq":1,"type":"stdout","text":"bad \q escape"}`,
		`{"seq":1,"type":"stdout","text":"short \u12"}`,
		`{"seq":1,"type":"stdout","text":"hex \u12G4"}`,
		`{"seq":1,"type":"stdout","text":"fine \u00e9\n\"\\\/"}`,
		`{"seq":1,"type":"stdout","text":"unterminated}`,
		`{"seq":1,"type":"stdout","text":"end \`,
		`{"seq":1,"type":"stdout","text":"hi","data":"aGk="}`,
		`{"seq":1e3}`,
		`{"seq":1,}`,
		`{"seq":99999999999999999999}`,
		`[1]`,
		`null`,
		`{oops`,
	}
	for _, p := range payloads {
		e := base
		e.Payload = json.RawMessage(p)
		want, got := events.Validate(e), validate(e)
		if (want == nil) != (got == nil) || (want != nil && !errors.Is(got, events.ErrInvalidEntry)) {
			t.Errorf("payload %s: validate = %v, events.Validate = %v", p, got, want)
		}
	}
}

func FuzzValidateMatchesEvents(f *testing.F) {
	f.Add([]byte(`{"seq":1,"type":"stdout","text":"hi"}`), uint8(0))
	f.Add([]byte(`{"seq":2,"exitCode":-1}`), uint8(1))
	f.Add([]byte(`{"seq":3,"kind":"command","cmd":"ls","fingerprint":"x"}`), uint8(2))
	evs := []events.Event{events.ExecOutput, events.ExecCompleted, events.ExecStarted, events.SandboxCreated, events.CheckpointCreated}
	f.Fuzz(func(t *testing.T, payload []byte, which uint8) {
		e := events.Entry{Ts: 1, Name: "n", SandboxID: "s", StepIndex: 1, Event: evs[int(which)%len(evs)], Payload: payload}
		want, got := events.Validate(e), validate(e)
		if (want == nil) != (got == nil) {
			t.Fatalf("payload %q (%s): validate = %v, events.Validate = %v", payload, e.Event, got, want)
		}
	})
}

func BenchmarkValidate(b *testing.B) {
	e := events.New(1764400000000, "ci-job", "sbx-a1", 3, events.ExecOutput,
		events.NewOutput(3, events.Stdout, bytes.Repeat([]byte("0123456789abcdefghij"), 10)))
	b.Run("events.Validate", func(b *testing.B) {
		for range b.N {
			_ = events.Validate(e)
		}
	})
	b.Run("bus.validate", func(b *testing.B) {
		for range b.N {
			_ = validate(e)
		}
	})
}
