package images

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound reports an image (or one of its blobs) the registry does
	// not have, or one not in the store when no pull is allowed.
	ErrNotFound = errors.New("image not found")
	// ErrUnauthorized reports a registry that refused the credentials, or
	// wants some.
	ErrUnauthorized = errors.New("image pull unauthorized")
	// ErrPullFailed reports any other failure to get an image: an
	// unreachable registry, a blob whose digest does not match, a layer that
	// cannot be unpacked.
	ErrPullFailed = errors.New("image pull failed")
	// ErrInvalidReference reports an image name that is not a reference.
	ErrInvalidReference = errors.New("invalid image reference")
	// ErrInUse reports an image rm of an image a caller still uses.
	ErrInUse = errors.New("image in use")
)

// Error is a failed pull or lookup of Image. Err is the cause; Kind is
// ErrNotFound, ErrUnauthorized, ErrPullFailed or ErrInvalidReference, which
// Unwrap returns with Err.
type Error struct {
	Image string
	Kind  error
	Err   error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%v: %s: %v", e.Kind, e.Image, e.Err)
}

// Unwrap returns Kind and Err.
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Err} }
