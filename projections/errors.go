package projections

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrInvalidConfig reports a Projector or Runtime that cannot run (no bus,
	// no store or handler, a bad filter or partition).
	ErrInvalidConfig = errors.New("invalid projector config")
	// ErrMismatch is wrapped by the *MismatchError Verify returns.
	ErrMismatch = errors.New("projections differ")
	// ErrUnknownProjection reports a name no projection was registered under.
	ErrUnknownProjection = errors.New("unknown projection")
	// ErrOffsetTable is wrapped by the *OffsetTableError of an offset table
	// of another shape than (key, seq).
	ErrOffsetTable = errors.New("offset table of another shape")
)

// OffsetTableError is an SQLHandler's offset table that exists with other
// columns than (key, seq): another table of that name, such as the product's
// alineo_projection_offsets (consumer, offset). It unwraps to ErrOffsetTable
// and ErrInvalidConfig: a Runtime stops on it instead of retrying.
type OffsetTableError struct {
	Table   string
	Columns []string // the table's columns, lower case
}

func (e *OffsetTableError) Error() string {
	return fmt.Sprintf("offset table %s has the columns (%s), not (key, seq): it is another table of that name; "+
		"leave SQLHandler.OffsetTable empty for the projection's own (<name>_offsets), or name another",
		e.Table, strings.Join(e.Columns, ", "))
}

// Unwrap returns ErrOffsetTable and ErrInvalidConfig.
func (e *OffsetTableError) Unwrap() []error { return []error{ErrOffsetTable, ErrInvalidConfig} }

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
