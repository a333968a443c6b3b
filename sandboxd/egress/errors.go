package egress

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidPolicy reports a malformed policy, rule or target (API status 400).
	ErrInvalidPolicy = errors.New("invalid egress policy")
	// ErrTooManyRules reports a policy over Config.MaxRules (API status 413).
	ErrTooManyRules = errors.New("too many egress rules")
	// ErrInvalidVault reports a malformed credential-vault request (API status 400).
	ErrInvalidVault = errors.New("invalid credential vault request")
	// ErrNotFound reports a missing vault, credential or binding (API status 404).
	ErrNotFound = errors.New("not found")
	// ErrConflict reports an existing vault, credential or binding, or an
	// expectedRevision that does not match (API status 409).
	ErrConflict = errors.New("conflict")
	// ErrPrecondition reports a vault request on a proxy without the credential
	// proxy enabled or without an egress token (API status 412).
	ErrPrecondition = errors.New("credential proxy not enabled")
	// ErrDenied reports an outbound connection the policy does not allow.
	ErrDenied = errors.New("egress denied")
	// ErrClosed reports use of a closed Proxy.
	ErrClosed = errors.New("egress proxy closed")
)

// RuleError names the rule or target that is wrong. It unwraps to ErrInvalidPolicy.
type RuleError struct {
	Index  int    // position in the request, -1 for the default action
	Target string // as given
	Reason string
}

func (e *RuleError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("invalid egress policy: %s", e.Reason)
	}
	return fmt.Sprintf("invalid egress rule %d (target %q): %s", e.Index, e.Target, e.Reason)
}

// Unwrap returns ErrInvalidPolicy.
func (e *RuleError) Unwrap() error { return ErrInvalidPolicy }

// DeniedError is an outbound connection refused by the policy. It unwraps to ErrDenied.
type DeniedError struct {
	Host   string // as requested (name or IP)
	Port   string
	Reason string // e.g. "rule deny *.example.com", "default action deny"
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("egress to %s:%s denied by policy (%s)", e.Host, e.Port, e.Reason)
}

// Unwrap returns ErrDenied.
func (e *DeniedError) Unwrap() error { return ErrDenied }

// RevisionError is a vault patch whose expectedRevision is stale. It unwraps to ErrConflict.
type RevisionError struct {
	Expected, Actual int64
}

func (e *RevisionError) Error() string {
	return fmt.Sprintf("credential vault revision is %d, expected %d", e.Actual, e.Expected)
}

// Unwrap returns ErrConflict.
func (e *RevisionError) Unwrap() error { return ErrConflict }
