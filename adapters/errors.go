package adapters

import (
	"errors"

	"github.com/alineo-labs/alineo/events"
)

var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("store closed")
	// ErrInvalidEntry is events.ErrInvalidEntry: an entry failed validation and nothing was written.
	ErrInvalidEntry = events.ErrInvalidEntry
	// ErrConflict reports a write that collides with an existing row.
	ErrConflict = errors.New("conflict")
	// ErrNotFound reports a missing row where one is required.
	ErrNotFound = errors.New("not found")
	// ErrFenced is returned to a writer that lost its right to write a sandbox's ledger.
	ErrFenced = errors.New("writer fenced")
	// ErrNoReadModel is returned where a ReadModel is needed (listings,
	// environment records) and only a Ledger is configured.
	ErrNoReadModel = errors.New("no read model configured")
	// ErrUnavailable wraps errors from a backend that cannot be reached (a database
	// that is down, a broken connection). The same store works again once it is back.
	ErrUnavailable = errors.New("storage unavailable")
	// ErrRescan is returned by Scanner.ScanAll when it could not hand a
	// session's entries as ReadAll returns them (out of order, or lost as
	// they were read): read the session with ReadAll.
	ErrRescan = errors.New("scan cannot give what ReadAll would: read again with ReadAll")
)
