package events

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Extension events are the events other programs append to the same ledger:
// the TypeScript SDK's workflow layer (run_started, step_start,
// step_complete, step_failed, step_rolled_back, workflow_complete,
// workflow_failed, checkpoint, snapshot), an agent's permission requests and
// turn checkpoints ("The Agent SDK appends its own events ... to the same
// ledger", storage.md). Every store keeps them, the bus carries them under
// their own subject, the projector copies them, and the API, the CLI and the
// dashboard show them as generic events; replay skips them.
//
// An extension event's name is any name outside the reserved namespaces,
// written in one grammar:
//
//   - 1 to MaxEventName bytes;
//   - dot-separated tokens of lowercase ASCII letters, digits, '_' and '-',
//     none of them empty (so it is one or more NATS subject tokens and maps
//     to alineo.ledger.<sandboxId>.<name> and back);
//   - starting with a letter;
//   - not in a reserved namespace: sandbox, exec, egress and credential,
//     dotted (sandbox.x), in the TypeScript SDK's underscore form
//     (sandbox_x) or with a '-' (sandbox-x), nor one of those words alone.
//     Those namespaces are this module's and the TypeScript SDK's own
//     events (All and their aliases); a name in them that is not one of
//     them is refused, not taken for an extension.
//
// Its payload is absent or JSON of at most MaxExtensionPayload bytes; it has
// no payload type.
const (
	// MaxEventName is the longest extension event name, in bytes.
	MaxEventName = 64
	// MaxExtensionPayload is the largest payload of an extension event, in
	// bytes of JSON.
	MaxExtensionPayload = 64 << 10
)

// reservedNamespaces are the first words of this module's and the TypeScript
// SDK's event names: no extension event starts with one of them.
var reservedNamespaces = [...]string{"sandbox", "exec", "egress", "credential"}

// Extension reports whether ev is an extension event name: not Known, in the
// grammar above and outside the reserved namespaces.
func (ev Event) Extension() bool { return !ev.Known() && checkExtension(ev) == "" }

// Valid reports whether an entry of ev may be written: ev is Known or an
// Extension.
func (ev Event) Valid() bool { return ev.Known() || checkExtension(ev) == "" }

// CheckEvent returns nil when ev is Valid, else a *ValidationError (wrapping
// ErrInvalidEntry) for the field "event" saying what is wrong with the name.
func CheckEvent(ev Event) error {
	if ev.Known() {
		return nil
	}
	if r := checkExtension(ev); r != "" {
		return &ValidationError{Field: "event", Reason: r}
	}
	return nil
}

// checkExtension returns why ev is not an extension event name, "" when it is.
// It does not look at Known: a known name is in a reserved namespace, except
// checkpoint_created, which passes the grammar.
func checkExtension(ev Event) string {
	s := string(ev)
	switch {
	case s == "":
		return "is empty"
	case len(s) > MaxEventName:
		return fmt.Sprintf("event name of %d bytes is longer than %d", len(s), MaxEventName)
	case s[0] < 'a' || s[0] > 'z':
		return fmt.Sprintf("event name %q does not start with a lowercase letter", s)
	}
	prev := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '-':
		case c == '.':
			if prev == '.' || i == len(s)-1 {
				return fmt.Sprintf("event name %q has an empty dot-separated token", s)
			}
		default:
			return fmt.Sprintf("event name %q holds %q: want lowercase letters, digits, '_', '-' and '.'", s, rune(c))
		}
		prev = c
	}
	for _, ns := range reservedNamespaces {
		if rest, ok := strings.CutPrefix(s, ns); ok && (rest == "" || rest[0] == '.' || rest[0] == '_' || rest[0] == '-') {
			return fmt.Sprintf("unknown event %q: the namespace %q is reserved", s, ns)
		}
	}
	return ""
}

// checkExtensionPayload returns why p is not an extension event's payload,
// "" when it is: JSON of at most MaxExtensionPayload bytes. A nil payload is
// absent, and fine.
func checkExtensionPayload(p []byte) string {
	switch {
	case p == nil:
		return ""
	case len(p) > MaxExtensionPayload:
		return fmt.Sprintf("of %d bytes is larger than %d", len(p), MaxExtensionPayload)
	case !ValidJSON(p):
		return "is not valid JSON"
	}
	return ""
}

// NewExtension builds the entry of the extension event ev, for a program that
// appends to a ledger without a sandbox handle (adapters.Ledger.Append):
//
//	e, err := events.NewExtension(time.Now().UnixMilli(), "agent-7", "turns", events.SandboxLevel,
//		"ext.permission_requested", map[string]string{"tool": "bash"})
//	if err != nil {
//		return err // a *ValidationError: nothing was written
//	}
//	err = store.Append(ctx, e)
//
// payload is encoded as JSON; a json.RawMessage is taken as it is, nil is no
// payload. The entry is validated (Validate): a name that is not an extension
// event (a known event included: those are written by the SDK that owns them)
// or a payload that is not JSON of at most MaxExtensionPayload bytes is a
// *ValidationError wrapping ErrInvalidEntry.
func NewExtension(ts int64, name, sandboxID string, stepIndex int, ev Event, payload any) (Entry, error) {
	if ev.Known() {
		return Entry{}, &ValidationError{Field: "event", Reason: fmt.Sprintf("%q is not an extension event: the SDK that owns it writes it", string(ev))}
	}
	e := Entry{Ts: ts, Name: name, SandboxID: sandboxID, StepIndex: stepIndex, Event: ev}
	switch p := payload.(type) {
	case nil:
	case json.RawMessage:
		e.Payload = p
	default:
		b, err := json.Marshal(payload)
		if err != nil {
			return Entry{}, &ValidationError{Field: "payload", Reason: "does not encode as JSON", Err: err}
		}
		e.Payload = b
	}
	if err := Validate(e); err != nil {
		return Entry{}, err
	}
	return e, nil
}
