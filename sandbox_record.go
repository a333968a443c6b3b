package alineo

import (
	"context"
	"time"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/spans"
)

// Record appends the extension event name with payload to the sandbox's
// session, and waits until it is written. It is how a program built on the
// SDK (an agent's permission requests and turn checkpoints, a workflow's
// steps) keeps its own events in the same ledger, as the TypeScript SDK's
// handle.emit does: the entry is sandbox-level (StepIndex -1), in order with
// the handle's other events (an exec's events emitted before the call come
// before it), under the handle's name and sandbox id.
//
// name must be an extension event name (events.Event.Extension): lowercase
// dot-separated tokens of letters, digits, '_' and '-', starting with a
// letter, at most 64 bytes, outside the sandbox, exec, egress and credential
// namespaces. payload is encoded as JSON (a json.RawMessage is taken as it
// is, nil records none) and must be at most events.MaxExtensionPayload bytes.
// Every store keeps the event, the bus carries it under its own subject,
// and the API, the CLI and the dashboard show it; replay skips it, so a
// resumed handle's steps are numbered as if it were not there, and a resumed
// handle records its own anew.
//
// Errors: a *events.ValidationError (wrapping events.ErrInvalidEntry) for a
// malformed name or payload, and nothing is written; ErrClosed after Close;
// *SandboxError when the ledger refused the entry.
func (s *Sandbox) Record(ctx context.Context, name string, payload any) (err error) {
	ctx, span := s.span(ctx, "sandbox.record", attrEvent.String(name))
	defer func() { spans.End(span, err) }()
	// Checked before anything is queued: an invalid entry is not written.
	e, err := events.NewExtension(time.Now().UnixMilli(), s.name, s.id, events.SandboxLevel, events.Event(name), payload)
	if err != nil {
		return err
	}
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := s.ledger.write(ctx, e.Event, events.SandboxLevel, e.Payload); err != nil {
		return &SandboxError{SandboxID: s.id, Op: "record " + name, Err: err}
	}
	return nil
}
