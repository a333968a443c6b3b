package opensandbox

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Sentinel errors. An *APIError matches the one for its HTTP status with errors.Is.
var (
	ErrBadRequest          = errors.New("opensandbox: bad request")           // 400, 422
	ErrUnauthorized        = errors.New("opensandbox: unauthorized")          // 401
	ErrForbidden           = errors.New("opensandbox: forbidden")             // 403
	ErrNotFound            = errors.New("opensandbox: not found")             // 404
	ErrConflict            = errors.New("opensandbox: conflict")              // 409
	ErrPrecondition        = errors.New("opensandbox: precondition failed")   // 412
	ErrTooLarge            = errors.New("opensandbox: request too large")     // 413
	ErrRangeNotSatisfiable = errors.New("opensandbox: range not satisfiable") // 416
	ErrRateLimited         = errors.New("opensandbox: rate limited")          // 429
	ErrNotImplemented      = errors.New("opensandbox: not implemented")       // 501
	ErrUnavailable         = errors.New("opensandbox: service unavailable")   // 502, 503, 504
	ErrServer              = errors.New("opensandbox: server error")          // other 5xx

	// ErrInvalidRequest is returned before anything is sent when a request is invalid
	// on its face (empty command, timeout below the server minimum, bad port...).
	ErrInvalidRequest = errors.New("opensandbox: invalid request")
	// ErrStreamTruncated is wrapped by the *StreamError of a command stream that ended
	// before its terminal event (execution_complete or error).
	ErrStreamTruncated = errors.New("opensandbox: stream ended before its terminal event")
	// ErrMalformedStream is wrapped by the *StreamError of a stream whose bytes are not
	// the execd event format (bad JSON, oversized line, unknown framing).
	ErrMalformedStream = errors.New("opensandbox: malformed event stream")
	// ErrSandboxFailed is wrapped by the *StateError of WaitRunning when the sandbox
	// reaches Failed or Terminated.
	ErrSandboxFailed = errors.New("opensandbox: sandbox failed")
	// ErrSnapshotFailed is wrapped by the *StateError of WaitSnapshotReady when the
	// snapshot reaches Failed.
	ErrSnapshotFailed = errors.New("opensandbox: snapshot failed")
	// ErrImageNotFound, ErrImageUnauthorized and ErrImagePullFailed match the
	// error of a create whose image could not be had: the *APIError of a
	// server that answers the create so (sandboxd: 404 IMAGE_NOT_FOUND, 424
	// IMAGE_UNAUTHORIZED or IMAGE_PULL_FAILED), or the *StateError of a
	// sandbox that went Failed with that status reason. The message names the
	// image and gives the registry's answer.
	ErrImageNotFound     = errors.New("opensandbox: image not found")
	ErrImageUnauthorized = errors.New("opensandbox: image pull unauthorized")
	ErrImagePullFailed   = errors.New("opensandbox: image pull failed")
	// ErrNotReady is wrapped when a readiness wait (execd /ping) gives up.
	ErrNotReady = errors.New("opensandbox: not ready")
	// ErrClosed is returned by calls on a closed Execd or Egress client.
	ErrClosed = errors.New("opensandbox: client closed")
)

// APIError is a non-2xx HTTP response. Code and Message come from a
// {"code","message"} body; for other bodies (execd's {"error":...}, egress plain
// text, FastAPI 422 details) Code is the HTTP status text and Message the raw body
// (truncated to 4 KiB).
type APIError struct {
	Status     int           // HTTP status code
	Code       string        // machine code, e.g. "DOCKER::SANDBOX_NOT_FOUND"
	Message    string        // human-readable message
	RequestID  string        // X-Request-ID response header, if any
	Method     string        // request method
	URL        string        // request URL without the query string
	RetryAfter time.Duration // parsed Retry-After header, 0 if absent
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	s := fmt.Sprintf("opensandbox: %s %s: %d %s: %s", e.Method, e.URL, e.Status, e.Code, msg)
	if e.RequestID != "" {
		s += " (request id " + e.RequestID + ")"
	}
	return s
}

// Unwrap returns the sentinel for e's status (ErrNotFound for 404, ...) and,
// for a code that names an image failure (IMAGE_NOT_FOUND,
// IMAGE_UNAUTHORIZED, IMAGE_PULL_FAILED, with or without a "PREFIX::"),
// ErrImageNotFound, ErrImageUnauthorized or ErrImagePullFailed: sandboxd
// answers a create whose image cannot be had so.
func (e *APIError) Unwrap() []error {
	var errs []error
	if s := statusSentinel(e.Status); s != nil {
		errs = append(errs, s)
	}
	if s := imageSentinel(e.Code); s != nil {
		errs = append(errs, s)
	}
	return errs
}

// imageSentinel returns the image sentinel of an error code or a status
// reason (IMAGE_NOT_FOUND, or PREFIX::IMAGE_NOT_FOUND), or nil.
func imageSentinel(code string) error {
	if i := strings.LastIndex(code, "::"); i >= 0 {
		code = code[i+2:]
	}
	switch code {
	case ReasonImageNotFound:
		return ErrImageNotFound
	case ReasonImageUnauthorized:
		return ErrImageUnauthorized
	case ReasonImagePullFailed:
		return ErrImagePullFailed
	}
	return nil
}

func statusSentinel(status int) error {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return ErrBadRequest
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusForbidden:
		return ErrForbidden
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict:
		return ErrConflict
	case http.StatusPreconditionFailed:
		return ErrPrecondition
	case http.StatusRequestEntityTooLarge:
		return ErrTooLarge
	case http.StatusRequestedRangeNotSatisfiable:
		return ErrRangeNotSatisfiable
	case http.StatusTooManyRequests:
		return ErrRateLimited
	case http.StatusNotImplemented:
		return ErrNotImplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return ErrUnavailable
	}
	if status >= 500 {
		return ErrServer
	}
	return nil
}

// StreamError is a command stream that failed: it ended before its terminal event,
// carried bytes that are not events, or its connection failed. Err is
// ErrStreamTruncated, ErrMalformedStream, or the transport/context error.
type StreamError struct {
	Op     string // "command", "code", "session run", "metrics watch"
	ID     string // command or context id from the init event, if seen
	Events int    // events parsed before the failure
	Detail string // what was wrong, e.g. `invalid JSON at byte 12: "{oops"`
	Err    error
}

func (e *StreamError) Error() string {
	s := "opensandbox: " + e.Op + " stream"
	if e.ID != "" {
		s += " " + e.ID
	}
	s += fmt.Sprintf(" after %d events: %v", e.Events, e.Err)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *StreamError) Unwrap() error { return e.Err }

// Status reasons of a sandbox whose image could not be had.
const (
	ReasonImageNotFound     = "IMAGE_NOT_FOUND"
	ReasonImageUnauthorized = "IMAGE_UNAUTHORIZED"
	ReasonImagePullFailed   = "IMAGE_PULL_FAILED"
)

// StateError reports that a wait ended because the resource reached a terminal state
// other than the one waited for. Err is ErrSandboxFailed or ErrSnapshotFailed; a
// sandbox Failed with an image reason also matches ErrImageNotFound,
// ErrImageUnauthorized or ErrImagePullFailed.
type StateError struct {
	Kind    string // "sandbox" or "snapshot"
	ID      string
	State   string // e.g. "Failed", "Terminated"
	Reason  string // e.g. "runtime_error"
	Message string
	Err     error
}

func (e *StateError) Error() string {
	s := fmt.Sprintf("opensandbox: %s %s is %s", e.Kind, e.ID, e.State)
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap returns Err and, for an image reason, the image sentinel.
func (e *StateError) Unwrap() []error {
	if s := imageSentinel(e.Reason); s != nil {
		return []error{e.Err, s}
	}
	return []error{e.Err}
}
