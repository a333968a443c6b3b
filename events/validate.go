package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Validate checks e before it is written: a non-empty Name and SandboxID, a known
// Event or an extension event (see Event.Extension), Ts > 0, a StepIndex of at
// least -1, an Actor that ValidateActor accepts, and a Payload that is JSON
// and, for events with a payload type, decodes into that type; an extension
// event's payload is at most MaxExtensionPayload bytes. It returns a
// *ValidationError (wrapping ErrInvalidEntry) naming the first wrong field.
func Validate(e Entry) error {
	known := e.Event.Known()
	switch {
	case e.Name == "":
		return &ValidationError{Field: "name", Reason: "is empty"}
	case e.SandboxID == "":
		return &ValidationError{Field: "sandboxId", Reason: "is empty"}
	case e.Event == "":
		return &ValidationError{Field: "event", Reason: "is empty"}
	case !known && checkExtension(e.Event) != "":
		return CheckEvent(e.Event)
	case e.Ts <= 0:
		return &ValidationError{Field: "ts", Reason: fmt.Sprintf("must be > 0, got %d", e.Ts)}
	case e.StepIndex < SandboxLevel:
		return &ValidationError{Field: "stepIndex", Reason: fmt.Sprintf("must be >= -1, got %d", e.StepIndex)}
	}
	if err := ValidateActor(e.Actor); err != nil {
		return err
	}
	if !known { // an extension event
		if r := checkExtensionPayload(e.Payload); r != "" {
			return &ValidationError{Field: "payload", Reason: r}
		}
		return nil
	}
	if e.Payload == nil {
		return nil
	}
	ev := e.Event.Canonical()
	if payloadFits(ev, e.Payload) || ev == ExecOutput && outputFits(e.Payload) {
		return nil
	}
	p := payloadFor(ev)
	if p == nil {
		if !ValidJSON(e.Payload) {
			return &ValidationError{Field: "payload", Reason: "is not valid JSON"}
		}
		return nil
	}
	// One pass: Unmarshal rejects JSON that is not valid, so the payload is
	// parsed once.
	if err := json.Unmarshal(UnwrapPayload(e.Payload), p); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) || !json.Valid(e.Payload) {
			return &ValidationError{Field: "payload", Reason: "is not valid JSON", Err: err}
		}
		field := "payload"
		if te, ok := err.(*json.UnmarshalTypeError); ok && te.Field != "" {
			field = "payload." + te.Field
		}
		return &ValidationError{Field: field, Reason: "does not match " + string(e.Event), Err: err}
	}
	return nil
}

// MaxActorLen is the longest Entry.Actor, in bytes.
const MaxActorLen = 256

// ValidateActor checks an actor name: at most MaxActorLen bytes of valid
// UTF-8 without control characters. "" (unknown) is valid. It returns a
// *ValidationError for the field "actor" (wrapping ErrInvalidEntry and
// ErrInvalidActor).
func ValidateActor(actor string) error {
	switch {
	case len(actor) > MaxActorLen:
		return &ValidationError{Field: "actor", Reason: fmt.Sprintf("is %d bytes, more than %d", len(actor), MaxActorLen), Err: ErrInvalidActor}
	case !utf8.ValidString(actor):
		return &ValidationError{Field: "actor", Reason: "is not valid UTF-8", Err: ErrInvalidActor}
	case strings.ContainsFunc(actor, unicode.IsControl):
		return &ValidationError{Field: "actor", Reason: "holds a control character", Err: ErrInvalidActor}
	}
	return nil
}

// outputShape is ExecOutputPayload with the chunk's text and data only
// recorded by their JSON kind, so that checking an exec.output payload (every
// output chunk, up to hundreds of KiB each) does not unquote and copy the text.
type outputShape struct {
	Seq  int      `json:"seq"`
	Type Stream   `json:"type"`
	Text jsonKind `json:"text"`
	Data jsonKind `json:"data"`
}

// jsonKind records the first byte of a JSON value: '"' for a string, 'n' for null.
type jsonKind byte

func (k *jsonKind) UnmarshalJSON(b []byte) error {
	*k = jsonKind(b[0])
	return nil
}

// outputFits reports whether payload surely decodes into ExecOutputPayload:
// valid JSON, an object whose seq and type fit, a string or null text, and no
// data (data is base64 and goes through the full decoder). false means "not
// known": the caller decodes fully, which also gives the exact error.
func outputFits(payload []byte) bool {
	var o outputShape
	if json.Unmarshal(payload, &o) != nil {
		return false
	}
	return (o.Text == 0 || o.Text == '"' || o.Text == 'n') && (o.Data == 0 || o.Data == 'n')
}

// payloadFor returns a pointer to a zero payload of ev's type, or nil when ev has none.
func payloadFor(ev Event) any {
	switch ev {
	case SandboxCreated:
		return new(SandboxCreatedPayload)
	case ExecStarted:
		return new(ExecStartedPayload)
	case ExecOutput:
		return new(ExecOutputPayload)
	case ExecCompleted:
		return new(ExecCompletedPayload)
	case CheckpointCreated:
		return new(CheckpointCreatedPayload)
	case EgressRuleAdded, EgressRuleRemoved:
		return new(EgressRulePayload)
	case CredentialBound, CredentialRevoked:
		return new(CredentialPayload)
	}
	return nil
}
