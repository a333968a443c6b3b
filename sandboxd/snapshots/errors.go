package snapshots

import (
	"errors"
	"fmt"

	"github.com/alineo-labs/alineo/checkpoints"
)

var (
	// ErrInvalidKey reports a blob key that is not a lowercase sha256 hex digest.
	ErrInvalidKey = errors.New("invalid blob key")
	// ErrBlobNotFound reports a blob key the store does not hold.
	ErrBlobNotFound = errors.New("blob not found")
	// ErrUnsafePath reports a restore that would write outside its destination
	// (through a symlink or a non-directory on the way). Manifests with ".."
	// or absolute paths are rejected earlier with checkpoints.ErrInvalidEntry.
	ErrUnsafePath = errors.New("unsafe restore path")
	// ErrUnsupportedOverlay reports an overlay upper dir written with
	// metacopy=on or redirect_dir=on, whose entries depend on the lower layer.
	ErrUnsupportedOverlay = errors.New("unsupported overlay feature (metacopy or redirect_dir)")
	// ErrCorruptBlob reports a blob whose content does not hash to its key,
	// or whose size differs from its manifest entry (see CorruptBlobError).
	// sandboxd answers a restore that fails with it SNAPSHOT_CORRUPT.
	ErrCorruptBlob = errors.New("corrupt blob")
	// ErrOverQuota reports a capture of a tree that takes more disk than
	// CaptureOptions.MaxBytes (see QuotaError).
	ErrOverQuota = errors.New("snapshot larger than the disk quota")
	// ErrInvalidURL reports a blob store URL that cannot be used.
	ErrInvalidURL = errors.New("invalid blob store URL")
	// ErrUnavailable reports a blob store that cannot be reached: at open,
	// or wrapped by an operation on a remote bucket whose connection was
	// refused, reset or timed out (see Unavailable).
	ErrUnavailable = errors.New("blob store unavailable")
)

// QuotaError is a capture over CaptureOptions.MaxBytes. It unwraps to
// ErrOverQuota.
type QuotaError struct {
	Limit int64 // bytes
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%v: the files take more than %d bytes of disk", ErrOverQuota, e.Limit)
}

// Unwrap returns ErrOverQuota.
func (e *QuotaError) Unwrap() error { return ErrOverQuota }

// CorruptBlobError reports a blob whose content does not match: it hashes
// to Got instead of its key, or it has Size bytes where the manifest says
// WantSize. A restore wraps it in a *PathError naming the file. It unwraps
// to ErrCorruptBlob.
type CorruptBlobError struct {
	Key string
	// Got is the sha256 of the content read ("" when only the size is wrong).
	Got string
	// Size is how many bytes were read; WantSize the manifest's (-1 when not
	// compared).
	Size, WantSize int64
}

func (e *CorruptBlobError) Error() string {
	if e.Got != "" && e.Got != e.Key {
		return fmt.Sprintf("corrupt blob %s: its %d bytes hash to %s", e.Key, e.Size, e.Got)
	}
	return fmt.Sprintf("corrupt blob %s: %d bytes, the manifest says %d", e.Key, e.Size, e.WantSize)
}

// Unwrap returns ErrCorruptBlob.
func (e *CorruptBlobError) Unwrap() error { return ErrCorruptBlob }

// ErrInvalidEntry is checkpoints.ErrInvalidEntry: a manifest entry is invalid
// (for instance a path with ".." or an absolute path).
var ErrInvalidEntry = checkpoints.ErrInvalidEntry

// PathError says which path of a capture or restore failed and why.
type PathError struct {
	Op   string // "capture" or "restore"
	Path string // relative to the root or destination
	Err  error
}

func (e *PathError) Error() string { return e.Op + " " + e.Path + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *PathError) Unwrap() error { return e.Err }

// Unavailable reports whether err says a store was out of reach, the blob
// store (ErrUnavailable) or the checkpoint store (checkpoints.ErrUnavailable):
// an outage that another try, later, may get past (see Manager.Retry).
func Unavailable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, checkpoints.ErrUnavailable)
}
