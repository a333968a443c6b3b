package events

import (
	"errors"
	"fmt"
)

// ErrInvalidEntry is wrapped by every validation error: errors.Is(err, ErrInvalidEntry).
var ErrInvalidEntry = errors.New("invalid ledger entry")

// ErrInvalidActor is wrapped by the ValidationError of an actor name that is
// too long, not valid UTF-8 or holds a control character.
var ErrInvalidActor = errors.New("invalid actor")

// ErrInvalidSubject is returned when a subject is not a ledger subject.
var ErrInvalidSubject = errors.New("invalid ledger subject")

// ErrInvalidHash is wrapped by the error of a chain hash that is not "" or
// "sha256:" and 64 lowercase hex digits.
var ErrInvalidHash = errors.New("invalid chain hash")

// ValidationError says which field of an Entry is wrong and why.
// It unwraps to ErrInvalidEntry and, where there is one, to the underlying cause.
type ValidationError struct {
	Field  string // "name", "sandboxId", "event", "payload", "payload.seq", "ts", ...
	Reason string
	Err    error // optional cause, e.g. a JSON syntax error
}

func (e *ValidationError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("invalid ledger entry: %s: %s: %v", e.Field, e.Reason, e.Err)
	}
	return fmt.Sprintf("invalid ledger entry: %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidEntry and the cause, if any.
func (e *ValidationError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidEntry, e.Err}
	}
	return []error{ErrInvalidEntry}
}
