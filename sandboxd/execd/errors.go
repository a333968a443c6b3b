package execd

import (
	"errors"
	"fmt"
	"net/http"
)

// Sentinel errors. Handlers wrap them in *APIError, which carries the HTTP status and the execd
// machine code sent to the client.
var (
	// ErrClosed is returned for every request after Close.
	ErrClosed = errors.New("execd: server closed")
	// ErrNotFound means a file, command, session or context does not exist.
	ErrNotFound = errors.New("execd: not found")
	// ErrInvalid means the request was malformed or named something unusable.
	ErrInvalid = errors.New("execd: invalid request")
	// ErrSymlinkLoop means resolving a path followed too many symbolic links.
	ErrSymlinkLoop = errors.New("execd: too many levels of symbolic links")
	// ErrUnsupported means the feature exists in the OpenSandbox API but not in this server.
	ErrUnsupported = errors.New("execd: not supported")
	// ErrUnauthorized means the access token was missing or wrong.
	ErrUnauthorized = errors.New("execd: unauthorized")
)

// Execd error codes sent in the JSON error body {code, message}.
const (
	CodeInvalidRequestBody  = "INVALID_REQUEST_BODY"
	CodeMissingQuery        = "MISSING_QUERY"
	CodeRuntimeError        = "RUNTIME_ERROR"
	CodeInvalidFile         = "INVALID_FILE"
	CodeInvalidFileContent  = "INVALID_FILE_CONTENT"
	CodeInvalidFileMetadata = "INVALID_FILE_METADATA"
	CodeFileNotFound        = "FILE_NOT_FOUND"
	CodeUnknown             = "UNKNOWN"
	CodeContextNotFound     = "CONTEXT_NOT_FOUND"
	CodeNotSupported        = "NOT_SUPPORTED"
	CodeUnauthorized        = "UNAUTHORIZED"
	CodeNotFound            = "NOT_FOUND"
	CodeUnavailable         = "UNAVAILABLE"
)

// APIError is an error answered to the client as status Status with body {code, message}.
type APIError struct {
	Status  int
	Code    string
	Message string
	Err     error // the sentinel or cause; may be nil
}

func (e *APIError) Error() string {
	return fmt.Sprintf("execd %d %s: %s", e.Status, e.Code, e.Message)
}

func (e *APIError) Unwrap() error { return e.Err }

func apiErr(status int, code string, err error, format string, args ...any) *APIError {
	return &APIError{Status: status, Code: code, Message: fmt.Sprintf(format, args...), Err: err}
}

func badRequest(code, format string, args ...any) *APIError {
	return apiErr(http.StatusBadRequest, code, ErrInvalid, format, args...)
}

func fileNotFound(path string) *APIError {
	return apiErr(http.StatusNotFound, CodeFileNotFound, ErrNotFound, "file not found: %s", path)
}

func runtimeError(err error, format string, args ...any) *APIError {
	return apiErr(http.StatusInternalServerError, CodeRuntimeError, err, format, args...)
}

func notSupported(feature string) *APIError {
	return apiErr(http.StatusNotImplemented, CodeNotSupported, ErrUnsupported,
		"%s is not supported by the sandboxd execd", feature)
}
