package wire

import (
	"fmt"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
)

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

// SandboxList is the answer of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []adapters.SandboxDetails `json:"sandboxes"`
	// NextBefore is the before value of the next page; 0 when this page is the last.
	NextBefore int64 `json:"nextBefore,omitempty"`
}

// EventPage is the answer of GET /v1/sandboxes/{name}/{id}/events.
type EventPage struct {
	Events []events.Entry `json:"events"`
	// NextAfter is the after value of the next page; 0 when this page is the last.
	NextAfter uint64 `json:"nextAfter,omitempty"`
}

// JobList is the answer of GET /v1/jobs.
type JobList struct {
	Jobs []jobs.Status `json:"jobs"`
}
