package audit

import "errors"

// ErrBroken is returned by Verify when a session's chain is broken; the
// Result says which sessions and where.
var ErrBroken = errors.New("audit: a hash chain is broken")

// ErrInvalidAnchor is wrapped by the error of an anchor file that does not parse.
var ErrInvalidAnchor = errors.New("audit: invalid anchor")
