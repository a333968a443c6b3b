package api

import (
	"errors"
	"fmt"
)

// ErrInvalidConfig reports a Config that cannot work.
var ErrInvalidConfig = errors.New("invalid api config")

// Error is the JSON body of every error answer.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the offending input (a query parameter, a path segment or a
	// job spec path), when there is one.
	Field string `json:"field,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// Error codes.
const (
	CodeBadRequest   = "bad_request"
	CodeInvalidSpec  = "invalid_spec"
	CodeUnauthorized = "unauthorized"
	CodeForbidden    = "forbidden"
	// CodeUnsupportedMedia answers a write whose body is not application/json.
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeNotFound         = "not_found"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal"
)
