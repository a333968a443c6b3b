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
	// CodeConflict answers a write the resource's state does not allow (a
	// settled job canceled, a running job retried).
	CodeConflict    = "conflict"
	CodeUnavailable = "unavailable"
	CodeInternal    = "internal"
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

// ExecutorList is the answer of GET /v1/executors: the workers of the jobs
// queue, those with a presence record first (by id), then those only a
// running job's status names.
type ExecutorList struct {
	Executors []Executor `json:"executors"`
	// Now is when the server judged the workers' states (Unix ms).
	Now int64 `json:"now"`
}

// Executor is a worker of the jobs queue: its presence record (only ID set
// when it has none), its state and the jobs it runs.
type Executor struct {
	jobs.WorkerInfo
	State ExecutorState `json:"state"`
	// Jobs are the statuses of the jobs it runs: those its record names and
	// the running ones whose status names it.
	Jobs []jobs.Status `json:"jobs"`
}

// ExecutorState says whether a worker is there.
type ExecutorState string

// Executor states.
const (
	// ExecutorLive: it heartbeat within three of its periods.
	ExecutorLive ExecutorState = "live"
	// ExecutorDraining: live, and asked to stop: it takes no new job.
	ExecutorDraining ExecutorState = "draining"
	// ExecutorSilent: it missed three heartbeats; presumably dead (its jobs
	// are delivered again once their leases lapse).
	ExecutorSilent ExecutorState = "silent"
	// ExecutorUnknown: a running job's status names it, but it has no
	// presence record (it died long ago, or runs a version without one).
	ExecutorUnknown ExecutorState = "unknown"
)
