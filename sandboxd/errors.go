package sandboxd

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/alineo-labs/alineo/sandboxd/internal/runtime"
)

var (
	// ErrNotFound reports an unknown sandbox id.
	ErrNotFound = errors.New("sandbox not found")
	// ErrConflict reports an operation the sandbox's current state does not allow.
	ErrConflict = errors.New("conflict with the sandbox state")
	// ErrInvalidRequest reports a request that fails validation.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrInvalidConfig reports a Config that Open refuses.
	ErrInvalidConfig = errors.New("invalid sandboxd config")
	// ErrClosed is returned by operations on a closed server.
	ErrClosed = errors.New("sandboxd closed")
	// ErrIsolationUnavailable reports that sandboxes cannot be isolated: no
	// usable OCI runtime (Config.Runtime), or one that cannot start. Config.NoIsolation
	// runs sandboxes without one, for development only.
	ErrIsolationUnavailable = runtime.ErrIsolationUnavailable
	// ErrDataDirInUse reports a data directory another running server holds.
	ErrDataDirInUse = errors.New("data directory in use by another sandboxd")
	// ErrImage reports an image that cannot be resolved or imported.
	ErrImage = errors.New("image unavailable")
	// ErrInitNotStatic reports a create whose image cannot run the sandbox
	// init: it is dynamically linked and the image lacks its interpreter or
	// libraries (see Config.InitBinary).
	ErrInitNotStatic = runtime.ErrInitNotStatic
	// ErrInitBinary reports a Config.InitBinary that is not a sandbox init
	// speaking this sandboxd's protocol (an older build, another program):
	// Start fails with it, saying why.
	ErrInitBinary = runtime.ErrInitBinary
	// ErrSnapshotNotFound reports an unknown snapshot id.
	ErrSnapshotNotFound = errors.New("snapshot not found")
)

// RequestError is a request that failed validation: Code is the machine code of
// the JSON error body, Field the offending field. It wraps ErrInvalidRequest.
type RequestError struct {
	Code    string
	Field   string
	Message string
	// Status is the HTTP status it is answered with; 0 means 400.
	Status int
}

func (e *RequestError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// Unwrap returns ErrInvalidRequest.
func (e *RequestError) Unwrap() error { return ErrInvalidRequest }

func invalid(code, field, format string, args ...any) *RequestError {
	return &RequestError{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// StateError is an operation refused in the sandbox's current state. It wraps
// ErrConflict.
type StateError struct {
	SandboxID string
	Op        string
	State     State
}

func (e *StateError) Error() string {
	return fmt.Sprintf("%s sandbox %s: not allowed in state %s", e.Op, e.SandboxID, e.State)
}

// Unwrap returns ErrConflict.
func (e *StateError) Unwrap() error { return ErrConflict }

// SnapshotStateError is a snapshot operation refused in the snapshot's current
// state (deleting or restoring one that is still Creating). It wraps
// ErrConflict.
type SnapshotStateError struct {
	SnapshotID string
	Op         string
	State      SnapshotState
}

func (e *SnapshotStateError) Error() string {
	return fmt.Sprintf("%s snapshot %s: not allowed in state %s", e.Op, e.SnapshotID, e.State)
}

// Unwrap returns ErrConflict.
func (e *SnapshotStateError) Unwrap() error { return ErrConflict }

// ImageError is a create whose image could not be had (its sandbox went
// Failed with reason Reason, and was forgotten): answered 404 with code
// IMAGE_NOT_FOUND when the registry has no such image, 424 (Failed
// Dependency) with IMAGE_UNAUTHORIZED or IMAGE_PULL_FAILED when it refused
// the credentials or the pull failed otherwise. Message names the image and
// gives the registry's answer and, for a name without a registry host, a
// hint. It wraps ErrImage.
type ImageError struct {
	Image   string
	Reason  string // ReasonImageNotFound, ReasonImageUnauthorized or ReasonImagePullFailed
	Message string
}

func (e *ImageError) Error() string { return e.Message }

// Unwrap returns ErrImage.
func (e *ImageError) Unwrap() error { return ErrImage }

// status is the HTTP status e is answered with.
func (e *ImageError) status() int {
	if e.Reason == ReasonImageNotFound {
		return http.StatusNotFound
	}
	return http.StatusFailedDependency
}

// OpError is a pause or resume the runtime failed to carry out; the sandbox is
// back in the state it was in. It is answered 500 with code
// SANDBOX_<OP>_FAILED, as the real server does.
type OpError struct {
	SandboxID string
	Op        string
	Err       error
}

func (e *OpError) Error() string {
	return fmt.Sprintf("%s sandbox %s: %v", e.Op, e.SandboxID, e.Err)
}

// Unwrap returns the runtime's error.
func (e *OpError) Unwrap() error { return e.Err }

// public returns msg, meant for a client, with the server's own directories
// (the data and run directories, which name the host's layout) written as
// <data> and <run>: a client learns what failed, not where the server keeps
// its files. The server's log keeps the whole error.
func (s *Server) public(msg string) string {
	for _, d := range []struct{ dir, name string }{{s.dataDir, "<data>"}, {s.runDir, "<run>"}} {
		if d.dir != "" && d.dir != "/" {
			msg = strings.ReplaceAll(msg, d.dir, d.name)
		}
	}
	return msg
}
