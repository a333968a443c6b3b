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
	// ErrTooLarge reports a layer or an image that unpacks to more bytes than
	// Config.MaxLayerBytes or Config.MaxImageBytes allow. The pull fails with
	// an *Error of Kind ErrPullFailed whose cause is a *LimitError.
	ErrTooLarge = errors.New("image too large")
)

// LimitError is a layer or image over its bound of unpacked bytes (see
// Config.MaxLayerBytes). It unwraps to ErrTooLarge.
type LimitError struct {
	Scope  string // "layer" or "image"
	Digest string // the layer's, for Scope "layer"
	Limit  int64  // bytes

	image *imageBudget // the pull whose image bound it was
}

func (e *LimitError) Error() string {
	if e.Scope == "layer" {
		return fmt.Sprintf("%v: layer %s unpacks to more than %d bytes (the layer bound)", ErrTooLarge, e.Digest, e.Limit)
	}
	return fmt.Sprintf("%v: its layers unpack to more than %d bytes (the image bound)", ErrTooLarge, e.Limit)
}

// Unwrap returns ErrTooLarge.
func (e *LimitError) Unwrap() error { return ErrTooLarge }

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
