package projections

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidConfig reports a Projector or Runtime that cannot run (no bus,
	// no store or handler, a bad filter or partition).
	ErrInvalidConfig = errors.New("invalid projector config")
	// ErrMismatch is wrapped by the *MismatchError Verify returns.
	ErrMismatch = errors.New("projections differ")
	// ErrUnknownProjection reports a name no projection was registered under.
	ErrUnknownProjection = errors.New("unknown projection")
)

// MismatchError is the first difference Verify found between two projections.
type MismatchError struct {
	// Where says what differs: "sessions", "details" or "entries".
	Where     string
	Name      string
	SandboxID string
	// Index is the position of the differing entry or session, -1 if none.
	Index int
	A, B  string // the two sides, rendered
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("projections differ in %s of %s/%s at %d: %s vs %s", e.Where, e.Name, e.SandboxID, e.Index, e.A, e.B)
}

// Unwrap returns ErrMismatch.
func (e *MismatchError) Unwrap() error { return ErrMismatch }
