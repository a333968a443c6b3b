package api

import (
	"errors"
	"fmt"

	"github.com/alineo-labs/alineo/api/wire"
)

// ErrInvalidConfig reports a Config that cannot work.
var ErrInvalidConfig = errors.New("invalid api config")

// Error is the JSON body of every error answer (defined in package wire,
// which the client shares).
type Error = wire.Error

// Error codes.
const (
	CodeBadRequest   = wire.CodeBadRequest
	CodeInvalidSpec  = wire.CodeInvalidSpec
	CodeUnauthorized = wire.CodeUnauthorized
	CodeForbidden    = wire.CodeForbidden
	// CodeUnsupportedMedia answers a write whose body is not application/json.
	CodeUnsupportedMedia = wire.CodeUnsupportedMedia
	CodeNotFound         = wire.CodeNotFound
	CodeConflict         = wire.CodeConflict
	CodeUnavailable      = wire.CodeUnavailable
	CodeInternal         = wire.CodeInternal
)

// ErrInvalidTokens is wrapped by every error of ParseTokens.
var ErrInvalidTokens = errors.New("invalid token file")

// TokenFileError says which line of a token file is wrong and why. It never
// holds a token nor a hash.
type TokenFileError struct {
	Line   int
	Reason string
	Err    error // optional cause, e.g. a read error
}

func (e *TokenFileError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("invalid token file: line %d: %s: %v", e.Line, e.Reason, e.Err)
	}
	return fmt.Sprintf("invalid token file: line %d: %s", e.Line, e.Reason)
}

// Unwrap returns ErrInvalidTokens and the cause, if any.
func (e *TokenFileError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidTokens, e.Err}
	}
	return []error{ErrInvalidTokens}
}
