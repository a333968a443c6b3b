package checkpoints

import (
	"errors"
	"fmt"
)

// Code is a stable error code of the contract. The strings are part of the
// contract shared with the TypeScript store; never change them.
type Code string

// The error codes of the contract.
const (
	CodeStaleHead                Code = "SANDBOX_SNAPSHOT_STALE_HEAD"
	CodeParentMismatch           Code = "SANDBOX_SNAPSHOT_PARENT_MISMATCH"
	CodeDuplicateID              Code = "SANDBOX_SNAPSHOT_DUPLICATE_ID"
	CodeNotHead                  Code = "SANDBOX_SNAPSHOT_NOT_HEAD"
	CodeWriterConflict           Code = "SANDBOX_SNAPSHOT_WRITER_CONFLICT"
	CodeWriterLost               Code = "SANDBOX_SNAPSHOT_WRITER_LOST"
	CodeInvalidID                Code = "SANDBOX_SNAPSHOT_INVALID_ID"
	CodeInvalidEntry             Code = "SANDBOX_SNAPSHOT_INVALID_ENTRY"
	CodeCheckpointNotFound       Code = "SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND"
	CodeAtomicForkRequired       Code = "SANDBOX_SNAPSHOT_ATOMIC_FORK_REQUIRED"
	CodeForkSourceNotFound       Code = "SANDBOX_SNAPSHOT_FORK_SOURCE_NOT_FOUND"
	CodeForkSourceThreadMismatch Code = "SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH"
	CodeForkDestinationNotEmpty  Code = "SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY"
)

// Error is the one error type of the contract. Match a kind with errors.Is
// against the sentinels below (which compare by Code) or read Code with
// errors.As.
type Error struct {
	Code    Code
	Message string
	// Err is an optional underlying cause.
	Err error
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same Code, so that
// errors.Is(err, ErrStaleHead) holds for every stale-head error.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Errorf returns an *Error with code and a formatted message. Implementations
// use it so that every store words its errors alike.
func Errorf(code Code, format string, args ...any) error { return errorf(code, format, args...) }

// Sentinels, one per code. Compare with errors.Is.
var (
	ErrStaleHead                = &Error{Code: CodeStaleHead}
	ErrParentMismatch           = &Error{Code: CodeParentMismatch}
	ErrDuplicateID              = &Error{Code: CodeDuplicateID}
	ErrNotHead                  = &Error{Code: CodeNotHead}
	ErrWriterConflict           = &Error{Code: CodeWriterConflict}
	ErrWriterLost               = &Error{Code: CodeWriterLost}
	ErrInvalidID                = &Error{Code: CodeInvalidID}
	ErrInvalidEntry             = &Error{Code: CodeInvalidEntry}
	ErrCheckpointNotFound       = &Error{Code: CodeCheckpointNotFound}
	ErrAtomicForkRequired       = &Error{Code: CodeAtomicForkRequired}
	ErrForkSourceNotFound       = &Error{Code: CodeForkSourceNotFound}
	ErrForkSourceThreadMismatch = &Error{Code: CodeForkSourceThreadMismatch}
	ErrForkDestinationNotEmpty  = &Error{Code: CodeForkDestinationNotEmpty}
)

// ErrClosed is returned by every Store method called after Close. It is not a
// contract code.
var ErrClosed = errors.New("checkpoint store closed")

// ErrUnavailable is wrapped by a store's error when the store could not be
// reached or lost the connection: the server refused it, went down or reset
// it. A read may simply be tried again. A write may or may not have taken
// effect: try it again only when doing so twice is harmless (a checkpoint
// appended under a fixed id, then looked up by that id). It is not a
// contract code.
var ErrUnavailable = errors.New("checkpoint store unavailable")
