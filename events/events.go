package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Event is the name of a ledger event. The values are part of the storage format.
type Event string

// The event names of the storage format, shared with the TypeScript SDK. They are
// stable strings, never derived from Go names.
const (
	SandboxCreated    Event = "sandbox.created"
	ExecStarted       Event = "exec.started"
	ExecOutput        Event = "exec.output"
	ExecCompleted     Event = "exec.completed"
	CheckpointCreated Event = "sandbox.checkpoint_created"
	SandboxPaused     Event = "sandbox.paused"
	SandboxResumed    Event = "sandbox.resumed"
	EgressRuleAdded   Event = "egress.rule_added"
	EgressRuleRemoved Event = "egress.rule_removed"
	CredentialBound   Event = "credential.bound"
	CredentialRevoked Event = "credential.revoked"
	SandboxClosed     Event = "sandbox.closed"
)

// All lists every event name, in the order the TypeScript SDK's storage
// documentation lists them.
var All = []Event{
	SandboxCreated, ExecStarted, ExecOutput, ExecCompleted, CheckpointCreated,
	SandboxPaused, SandboxResumed, EgressRuleAdded, EgressRuleRemoved,
	CredentialBound, CredentialRevoked, SandboxClosed,
}

// Known reports whether ev is one of the event names in All, or the
// TypeScript SDK's alias of one (see Event.Canonical).
func (ev Event) Known() bool {
	switch ev.Canonical() {
	case SandboxCreated, ExecStarted, ExecOutput, ExecCompleted, CheckpointCreated,
		SandboxPaused, SandboxResumed, EgressRuleAdded, EgressRuleRemoved,
		CredentialBound, CredentialRevoked, SandboxClosed:
		return true
	}
	return false
}

// SandboxLevel is the StepIndex of events that belong to the sandbox rather than to an exec.
const SandboxLevel = -1

// Entry is one ledger entry. It is the Go form of the TypeScript SDK's LedgerEntry,
// plus Seq.
type Entry struct {
	// Seq is the entry's position in the ledger: the row id in a database, the
	// stream sequence on the bus. It is 0 on an entry that has not been stored yet
	// and is ignored by Append.
	Seq uint64 `json:"seq,omitempty"`
	// Ts is the time the event happened, in Unix milliseconds, taken when the
	// event was emitted, not when it was written.
	Ts int64 `json:"ts"`
	// Name is the sandbox (session) name; (Name, SandboxID) is the session key.
	Name      string `json:"name"`
	SandboxID string `json:"sandboxId"`
	// StepIndex is the exec's call number on its handle (1, 2, 3…) or SandboxLevel.
	StepIndex int `json:"stepIndex"`
	// Branch is the parallel branch index; nil when absent.
	Branch *int  `json:"branch,omitempty"`
	Event  Event `json:"event"`
	// Payload is the event's JSON payload; nil when absent (SQL NULL).
	// The JSON literal null is distinct from nil and round-trips as such.
	Payload json.RawMessage `json:"payload,omitempty"`
	Error   string          `json:"error,omitempty"`
	// Actor is who caused the entry: the SDK's Options.Actor (by default the
	// process's user@host), or for a job's entries "<submitter> via
	// <executor>". "" when unknown, as on every entry the TypeScript SDK
	// writes. At most MaxActorLen bytes of valid UTF-8 (Validate).
	Actor string `json:"actor,omitempty"`
	// Trace is the W3C trace context (a traceparent header value) of the span
	// the entry was written under, "" for none. The bus carries it in the
	// message's headers; the SQL stores do not keep it, and it is not part of
	// the entry's JSON.
	Trace string `json:"-"`
	// PrevHash is the Hash of the entry before this one in its session's
	// hash chain ("" for a chain's first entry, unless a fork's first entry,
	// which names its parent's head), and Hash is ChainHash(e, PrevHash):
	// "sha256:" and 64 hex digits. Both are "" on an entry that is not
	// chained (written by the TypeScript SDK, or not stored yet): the stores
	// set them as they append (see docs/architecture.md §4.10).
	PrevHash string `json:"prevHash,omitempty"`
	Hash     string `json:"hash,omitempty"`
}

// Session is the key of one sandbox session's ledger.
type Session struct {
	Name      string
	SandboxID string
}

// Session returns the entry's session key.
func (e Entry) Session() Session { return Session{Name: e.Name, SandboxID: e.SandboxID} }

// Decode unmarshals e.Payload into v. A nil payload leaves v untouched. A
// payload stored as a JSON string holding JSON (UnwrapPayload) decodes as the
// JSON it holds.
func (e Entry) Decode(v any) error {
	if len(e.Payload) == 0 {
		return nil
	}
	if err := json.Unmarshal(UnwrapPayload(e.Payload), v); err != nil {
		return &ValidationError{Field: "payload", Reason: "does not decode as " + string(e.Event), Err: err}
	}
	return nil
}

// New builds an entry whose payload is the JSON encoding of payload (nil for none).
// It panics only if payload cannot be encoded, which for the payload types of this
// package cannot happen.
func New(ts int64, name, sandboxID string, stepIndex int, ev Event, payload any) Entry {
	e := Entry{Ts: ts, Name: name, SandboxID: sandboxID, StepIndex: stepIndex, Event: ev}
	if payload != nil {
		b, err := json.Marshal(payload)
		if err != nil {
			panic("events: encode payload: " + err.Error())
		}
		e.Payload = b
	}
	return e
}

// ExecKind says whether an exec ran a shell command or code.
type ExecKind string

const (
	KindCommand ExecKind = "command"
	KindCode    ExecKind = "code"
)

// Fingerprint identifies an exec-like call by its kind and text, so that replay can
// tell a diverging call from the recorded one. It is "sha256:" plus 64 hex digits.
func Fingerprint(kind ExecKind, text string) string {
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(text))
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
