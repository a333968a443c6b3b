package alineo

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/opensandbox"
)

var (
	// ErrNotFound matches (errors.Is) every error of an unknown session,
	// sandbox, snapshot, checkpoint or environment: the *ClientError with
	// Status 404 of Resume, Connect, RestoreSnapshot and the rest, and
	// Environments.Get's.
	ErrNotFound = errors.New("alineo: not found")
	// ErrClosed is returned by every operation on a Sandbox after Close.
	ErrClosed = errors.New("alineo: sandbox closed")
	// ErrPaused is returned by command and file operations on a paused Sandbox.
	ErrPaused = errors.New("alineo: sandbox is paused; call Resume first")
	// ErrInvalidOptions is wrapped by every *OptionError.
	ErrInvalidOptions = errors.New("alineo: invalid options")
	// ErrReplayDiverged is wrapped by every *ReplayDivergedError.
	ErrReplayDiverged = errors.New("alineo: replay diverged from the recorded run")
	// ErrExecDone is returned by input to an interactive exec that has ended.
	ErrExecDone = errors.New("alineo: exec has ended")
	// ErrForkUnsupported is returned by Fork on a handle whose resources are
	// unknown (Connect without ConnectOptions.Resources).
	ErrForkUnsupported = errors.New("alineo: fork is not supported on this sandbox: its resources are unknown")
	// ErrCredentialNotFound is wrapped when a credential to patch is not bound
	// to the sandbox.
	ErrCredentialNotFound = errors.New("alineo: credential not found")
	// ErrNoCredentialResolver is wrapped by the *SandboxError of Client.Resume
	// when the session has bound credentials and ResumeOptions.ResolveCredential
	// is nil.
	ErrNoCredentialResolver = errors.New("alineo: no credential resolver")
	// ErrNoReadModel (adapters.ErrNoReadModel) is wrapped by the calls that
	// need a read model (listings, environments, Resume without
	// ResumeOptions.Name) on a client whose Adapter is only a ledger and
	// Options.ReadModel is nil.
	ErrNoReadModel = adapters.ErrNoReadModel
	// ErrImageNotFound, ErrImageUnauthorized and ErrImagePullFailed match the
	// error of Client.Sandbox when the image could not be had: the registry
	// has no such image, refused the credentials, or the pull failed
	// otherwise. From sandboxd it is a *SandboxError (Op "create") wrapping
	// the server's *APIError (404 IMAGE_NOT_FOUND, 424 IMAGE_UNAUTHORIZED or
	// IMAGE_PULL_FAILED), whose Message names the image, gives the
	// registry's answer and, for a name without a registry host, a hint; from
	// a server that answers the create and fails the sandbox after, a
	// *ClientError 500 wrapping an *opensandbox.StateError whose Reason and
	// Message say as much. Neither is worth retrying.
	ErrImageNotFound     = opensandbox.ErrImageNotFound
	ErrImageUnauthorized = opensandbox.ErrImageUnauthorized
	ErrImagePullFailed   = opensandbox.ErrImagePullFailed
)

// ReplayDivergedError is the error of an exec-like call on a resumed sandbox
// whose step is in the replay cache but whose kind or text differs from the
// recorded call's (compared by events.Fingerprint). Nothing is run or
// written. It wraps ErrReplayDiverged.
type ReplayDivergedError struct {
	SandboxID string
	Step      int
	Recorded  string // the recorded command or code
	Got       string // the command or code of this call
}

func (e *ReplayDivergedError) Error() string {
	return fmt.Sprintf("alineo: sandbox %s: replay diverged at step %d: recorded %q, got %q", e.SandboxID, e.Step, e.Recorded, e.Got)
}

// Unwrap returns ErrReplayDiverged.
func (e *ReplayDivergedError) Unwrap() error { return ErrReplayDiverged }

// OptionError reports a bad option or argument passed to the SDK: New,
// Client.Sandbox, Exec, ExecCode, Resume, Connect, Credentials, Egress and the rest.
// It wraps ErrInvalidOptions.
type OptionError struct {
	Field  string // e.g. "BaseURL", "Adapter", "Timeout"
	Reason string
}

func (e *OptionError) Error() string { return "alineo: invalid option " + e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalidOptions.
func (e *OptionError) Unwrap() error { return ErrInvalidOptions }

// CommandError is returned by a strict exec (the default) whose command exited
// with a non-zero code, or whose code raised an exception. exec.completed is
// already in the ledger when it is returned. Stdout and Stderr are set in the
// error of Exec.Wait.
type CommandError struct {
	ExitCode  int
	Command   string // the command or code, bound credential values redacted
	SandboxID string
	Stdout    string
	Stderr    string // an exception's traceback included
	// Exception is the exception the code raised (errors.As finds it too);
	// nil for a command.
	Exception *Exception
}

func (e *CommandError) Error() string {
	if e.Exception != nil {
		return fmt.Sprintf("alineo: sandbox %s: code raised %v (exit code %d): %s", e.SandboxID, e.Exception, e.ExitCode, e.Command)
	}
	return fmt.Sprintf("alineo: sandbox %s: command exited with code %d: %s", e.SandboxID, e.ExitCode, e.Command)
}

// Unwrap returns the exception, if any.
func (e *CommandError) Unwrap() error {
	if e.Exception == nil {
		return nil
	}
	return e.Exception
}

// SandboxError reports that an operation on a sandbox failed for a reason other
// than a command's exit code: the sandbox did not reach Running, a lifecycle call
// failed, or the ledger refused a write. Err is the cause.
type SandboxError struct {
	SandboxID string
	Op        string // "create", "wait running", "record sandbox.created", "pause", "resume", "close", ...
	Err       error
}

func (e *SandboxError) Error() string {
	if e.SandboxID == "" {
		return fmt.Sprintf("alineo: %s sandbox: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("alineo: sandbox %s: %s: %v", e.SandboxID, e.Op, e.Err)
}

func (e *SandboxError) Unwrap() error { return e.Err }

// ExecConnectionError reports that the connection to a sandbox's execd failed:
// it never became ready, or a command stream broke, stalled, carried garbage or
// ended before its terminal event. The events recorded up to then stay in the
// ledger; no exec.completed is written. Step is the exec's step index (0 when the
// failure was not in an exec).
type ExecConnectionError struct {
	SandboxID string
	Step      int
	Err       error
}

func (e *ExecConnectionError) Error() string {
	if e.Step > 0 {
		return fmt.Sprintf("alineo: sandbox %s: exec %d: execd connection: %v", e.SandboxID, e.Step, e.Err)
	}
	return fmt.Sprintf("alineo: sandbox %s: execd connection: %v", e.SandboxID, e.Err)
}

func (e *ExecConnectionError) Unwrap() error { return e.Err }

// ClientError is the TypeScript SDK's SandboxClientError: a client-level call failed with an
// HTTP-like status. 404: the session or sandbox is unknown (errors.Is(err, ErrNotFound)); 408: the sandbox did
// not reach Running in time; 409: the sandbox is in the wrong state; 500: the
// sandbox failed (Failed or Terminated while waiting).
type ClientError struct {
	Status    int
	SandboxID string
	Message   string
	Err       error
}

func (e *ClientError) Error() string {
	s := fmt.Sprintf("alineo: %d %s", e.Status, http.StatusText(e.Status))
	if e.SandboxID != "" {
		s += ": sandbox " + e.SandboxID
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *ClientError) Unwrap() error { return e.Err }

// Is reports whether target is ErrNotFound and e's Status is 404.
func (e *ClientError) Is(target error) bool {
	return target == ErrNotFound && e.Status == http.StatusNotFound
}

// APIError is a non-2xx answer of the OpenSandbox server (lifecycle or execd),
// as returned by the opensandbox client; errors of this package that come from
// the server wrap one, so errors.As finds it.
type APIError = opensandbox.APIError
