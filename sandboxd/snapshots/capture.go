package snapshots

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/alineo-labs/alineo/checkpoints"
)

// CaptureStats report what a capture did.
type CaptureStats struct {
	Files     int // regular files in the tree
	Dirs      int
	Symlinks  int
	Whiteouts int
	// Skipped counts sockets, FIFOs and devices other than whiteouts, which a
	// snapshot does not hold.
	Skipped int
	// Bytes is the total size of the tree's regular files.
	Bytes int64
	// ReusedFiles were unchanged since the previous checkpoint: not read.
	ReusedFiles int
	// HashedFiles and HashedBytes were read and hashed.
	HashedFiles int
	HashedBytes int64
	// StoredBlobs and StoredBytes are blobs the store did not hold before.
	StoredBlobs int
	StoredBytes int64
}

// RacyWindow: a file whose mtime is less than this before the previous
// checkpoint's CreatedAt is hashed again rather than re-used, because a write
// right after that capture may not have moved its (coarse-grained) mtime past
// CreatedAt. Captures and restores keep mtimes, so this only costs re-hashing
// files written just before a checkpoint.
const RacyWindow = 20 * time.Millisecond

// Overlay extended attributes that make an upper-dir entry depend on the
// lower layer in ways a snapshot cannot express: a metadata-only copy-up
// (metacopy=on) and a renamed directory (redirect_dir=on). Both are off by
// default; Capture fails with ErrUnsupportedOverlay when it finds one.
var dependentXattrs = []string{"trusted.overlay.metacopy", "trusted.overlay.redirect", "user.overlay.metacopy", "user.overlay.redirect"}

// Overlay extended attributes marking an opaque directory (the trusted
// namespace for mounts by root, the user namespace for "userxattr" mounts).
var opaqueXattrs = []string{"trusted.overlay.opaque", "user.overlay.opaque"}

// Capture walks the tree at root and returns its entries, parents before
// children, in lexical order, without root itself. Regular files become blobs
// in blobs; a file whose size, mtime and mode equal its entry in prev (which
// may be nil) and whose blob is still stored re-uses that blob without being
// read. Directories, symlinks (not followed) and overlay whiteouts (0/0
// character devices; opaque directories are marked) are recorded; sockets,
// FIFOs and other devices are skipped and counted. The tree must not change
// during the capture (sandboxd freezes the sandbox). A name that is not valid
// UTF-8 fails the capture with an error wrapping checkpoints.ErrInvalidEntry.
func Capture(ctx context.Context, root string, prev *checkpoints.Checkpoint, blobs *BlobStore) ([]checkpoints.Entry, CaptureStats, error) {
	c := &capturer{root: root, blobs: blobs, reuse: map[string]checkpoints.Entry{}}
	if prev != nil {
		c.racyAfter = prev.CreatedAt.Add(-RacyWindow).UnixNano()
		for _, e := range prev.Files {
			if e.Kind == checkpoints.KindFile {
				c.reuse[e.Path] = e
			}
		}
	}
	info, err := os.Lstat(root)
	if err != nil {
		return nil, c.st, fmt.Errorf("capture %s: %w", root, err)
	}
	if !info.IsDir() {
		return nil, c.st, fmt.Errorf("capture %s: not a directory", root)
	}
	visit := func(p string, d fs.DirEntry, err error) error { return c.visit(ctx, p, d, err) }
	if err := filepath.WalkDir(root, visit); err != nil {
		return nil, c.st, err
	}
	if err := checkpoints.ValidateEntries(c.entries); err != nil {
		return nil, c.st, fmt.Errorf("capture %s: %w", root, err)
	}
	return c.entries, c.st, nil
}

// capturer is one Capture's walk.
type capturer struct {
	root      string
	blobs     *BlobStore
	reuse     map[string]checkpoints.Entry // the previous checkpoint's files
	racyAfter int64
	st        CaptureStats
	entries   []checkpoints.Entry
}

// visit records the entry at p (a filepath.WalkDirFunc but for ctx).
func (c *capturer) visit(ctx context.Context, p string, d fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if p == c.root {
		return nil
	}
	rel, err := filepath.Rel(c.root, p)
	if err != nil {
		return err
	}
	rel = filepath.ToSlash(rel)
	if err := checkpoints.ValidatePath(rel); err != nil {
		return &PathError{Op: "capture", Path: rel, Err: err}
	}
	info, err := d.Info()
	if err != nil {
		return &PathError{Op: "capture", Path: rel, Err: err}
	}
	e, sys := baseEntry(rel, info)
	if typ := info.Mode().Type(); typ == fs.ModeDir || typ == 0 {
		if name := dependentXattr(p); name != "" {
			return &PathError{Op: "capture", Path: rel, Err: fmt.Errorf("%w: has %s", ErrUnsupportedOverlay, name)}
		}
	}
	switch typ := info.Mode().Type(); {
	case typ == fs.ModeDir:
		e.Kind = checkpoints.KindDir
		e.Opaque = isOpaque(p)
		c.st.Dirs++
	case typ == 0:
		if err := c.file(ctx, p, &e, info); err != nil {
			return &PathError{Op: "capture", Path: rel, Err: err}
		}
	case typ == fs.ModeSymlink:
		target, err := os.Readlink(p)
		if err != nil {
			return &PathError{Op: "capture", Path: rel, Err: err}
		}
		e.Kind, e.Target, e.Mode = checkpoints.KindSymlink, target, 0
		c.st.Symlinks++
	case typ == fs.ModeDevice|fs.ModeCharDevice && sys != nil && sys.Rdev == 0:
		e = checkpoints.Entry{Path: rel, Kind: checkpoints.KindWhiteout}
		c.st.Whiteouts++
	default:
		c.st.Skipped++
		return nil
	}
	c.entries = append(c.entries, e)
	return nil
}

// baseEntry is the entry of info at rel with its mode, owner and mtime.
func baseEntry(rel string, info fs.FileInfo) (checkpoints.Entry, *syscall.Stat_t) {
	e := checkpoints.Entry{Path: rel, Mode: uint32(info.Mode().Perm())}
	if info.Mode()&fs.ModeSetuid != 0 {
		e.Mode |= 0o4000
	}
	if info.Mode()&fs.ModeSetgid != 0 {
		e.Mode |= 0o2000
	}
	if info.Mode()&fs.ModeSticky != 0 {
		e.Mode |= 0o1000
	}
	sys, _ := info.Sys().(*syscall.Stat_t)
	if sys != nil {
		e.UID, e.GID = int(sys.Uid), int(sys.Gid)
	}
	e.ModTime = info.ModTime().UnixNano()
	return e, sys
}

// file fills in the regular file e at p: the previous checkpoint's blob when
// the file is unchanged (and not racy), else a blob of its contents.
func (c *capturer) file(ctx context.Context, p string, e *checkpoints.Entry, info fs.FileInfo) error {
	e.Kind = checkpoints.KindFile
	e.Size = info.Size()
	c.st.Files++
	c.st.Bytes += e.Size
	if old, ok := c.reuse[e.Path]; ok && old.Size == e.Size && old.ModTime == e.ModTime && old.Mode == e.Mode && e.ModTime < c.racyAfter {
		if has, _ := c.blobs.Has(ctx, old.BlobKey); has {
			e.BlobKey = old.BlobKey
			c.st.ReusedFiles++
			return nil
		}
	}
	key, size, stored, err := storeFile(ctx, p, c.blobs)
	if err != nil {
		return err
	}
	e.BlobKey, e.Size = key, size
	c.st.HashedFiles++
	c.st.HashedBytes += size
	if stored {
		c.st.StoredBlobs++
		c.st.StoredBytes += size
	}
	return nil
}

func storeFile(ctx context.Context, p string, blobs *BlobStore) (string, int64, bool, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", 0, false, err
	}
	defer f.Close()
	return blobs.put(ctx, f)
}

func dependentXattr(p string) string {
	for _, name := range dependentXattrs {
		if _, err := unix.Lgetxattr(p, name, nil); err == nil {
			return name
		}
	}
	return ""
}

func isOpaque(p string) bool {
	buf := make([]byte, 8)
	for _, name := range opaqueXattrs {
		if n, err := unix.Lgetxattr(p, name, buf); err == nil && n == 1 && buf[0] == 'y' {
			return true
		}
	}
	return false
}
