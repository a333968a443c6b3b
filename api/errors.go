package api

import (
	"errors"

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
