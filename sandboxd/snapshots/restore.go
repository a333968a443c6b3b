package snapshots

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"syscall"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/alineo-labs/alineo/checkpoints"
)

// WhiteoutMode says what Restore does with whiteout entries and opaque
// directories.
type WhiteoutMode int

const (
	// ApplyWhiteouts deletes each whiteout's path from dest and empties
	// existing opaque directories first: restoring an upper-dir snapshot onto
	// a copy of the image's lower layer reproduces the merged tree.
	ApplyWhiteouts WhiteoutMode = iota
	// KeepWhiteouts recreates whiteouts as 0/0 character devices and opaque
	// directories with their overlay xattr: restoring an upper dir as a new
	// upper dir over the same lower layer. It needs CAP_MKNOD (root).
	KeepWhiteouts
)

// RestoreOptions configure Restore. The zero value is valid.
type RestoreOptions struct {
	Whiteouts WhiteoutMode
	// IDs is the range of host ids the restored files are to be owned by
	// (see IDRange); the zero range restores the recorded ids as they are.
	IDs IDRange
}

// Restore recreates the tree described by entries under dest (created if
// missing; existing paths that entries name are replaced). Files are copied
// from blobs (never hard-linked; see the package doc) with their mode and
// mtime; owners are restored when running as root. It validates entries first
// (an entry with ".." or an absolute path gives checkpoints.ErrInvalidEntry and
// writes nothing) and never writes through a symlink or non-directory found on
// the way in dest (ErrUnsafePath).
func Restore(ctx context.Context, entries []checkpoints.Entry, blobs *BlobStore, dest string, opts RestoreOptions) error {
	if err := checkpoints.ValidateEntries(entries); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	for _, e := range entries {
		if e.Kind == checkpoints.KindFile && !ValidKey(e.BlobKey) {
			return fmt.Errorf("restore %s: %w: %q", e.Path, ErrInvalidKey, e.BlobKey)
		}
	}
	sorted := append([]checkpoints.Entry(nil), entries...)
	if opts.IDs.Base != 0 {
		sorted = shift(entries, opts.IDs.host)
	}
	// A path sorts before every path it prefixes, so parents come first.
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	r := &restorer{blobs: blobs, dest: dest, opts: opts, safe: map[string]bool{".": true}, root: os.Geteuid() == 0}
	release := blobs.holdFills()
	defer release()
	if err := r.tree(ctx, sorted); err != nil {
		return err
	}
	// Directory modes and mtimes last, deepest first: a read-only directory
	// must still take its children, and creating them moved its mtime.
	for i := len(sorted) - 1; i >= 0; i-- {
		if e := sorted[i]; e.Kind == checkpoints.KindDir {
			if err := r.attrs(filepath.Join(dest, filepath.FromSlash(e.Path)), e, true); err != nil {
				return &PathError{Op: "restore", Path: e.Path, Err: err}
			}
		}
	}
	return nil
}

// tree creates the entries in order, but for the contents of regular files,
// which several goroutines copy from the blob store meanwhile (a remote
// store downloads them). A file is a leaf that no later entry touches, and
// its parents exist before it is queued.
func (r *restorer) tree(ctx context.Context, sorted []checkpoints.Entry) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.blobs.cfg.Concurrency)
	var err error
	for _, e := range sorted {
		if err = gctx.Err(); err != nil {
			break
		}
		if e.Kind != checkpoints.KindFile {
			if err = r.entry(e); err != nil {
				err = &PathError{Op: "restore", Path: e.Path, Err: err}
				break
			}
			continue
		}
		if err = r.parent(e.Path); err == nil {
			_, err = removeExisting(filepath.Join(r.dest, filepath.FromSlash(e.Path)), false)
		}
		if err != nil {
			err = &PathError{Op: "restore", Path: e.Path, Err: err}
			break
		}
		g.Go(func() error {
			if err := r.file(gctx, e); err != nil {
				return &PathError{Op: "restore", Path: e.Path, Err: err}
			}
			return nil
		})
	}
	if err != nil {
		cancel()
	}
	if werr := g.Wait(); werr != nil && (err == nil || errors.Is(err, context.Canceled)) {
		err = werr // the first file that failed, rather than the cancellation it caused
	}
	return err
}

type restorer struct {
	blobs *BlobStore
	dest  string
	opts  RestoreOptions
	root  bool
	safe  map[string]bool // relative dirs known to be real directories
}

// parent makes sure every ancestor of rel inside dest is a real directory,
// creating missing ones, and never follows a symlink.
func (r *restorer) parent(rel string) error {
	dir := path.Dir(rel)
	if r.safe[dir] {
		return nil
	}
	if err := r.parent(dir); err != nil {
		return err
	}
	p := filepath.Join(r.dest, filepath.FromSlash(dir))
	info, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
	case err != nil:
		return err
	case !info.IsDir():
		return fmt.Errorf("%w: %s is a %v, not a directory", ErrUnsafePath, dir, info.Mode().Type())
	}
	r.safe[dir] = true
	return nil
}

// removeExisting removes whatever is at p unless keepDir and it is a real directory.
// It reports whether a directory was kept.
func removeExisting(p string, keepDir bool) (bool, error) {
	info, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if info.IsDir() {
		if keepDir {
			return true, nil
		}
		return false, os.RemoveAll(p)
	}
	return false, os.Remove(p)
}

func (r *restorer) entry(e checkpoints.Entry) error {
	if err := r.parent(e.Path); err != nil {
		return err
	}
	p := filepath.Join(r.dest, filepath.FromSlash(e.Path))
	switch e.Kind {
	case checkpoints.KindDir:
		// An opaque dir hides the lower layer: drop what dest has there.
		kept, err := removeExisting(p, !(e.Opaque && r.opts.Whiteouts == ApplyWhiteouts))
		if err != nil {
			return err
		}
		if !kept {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
		}
		r.safe[e.Path] = true
		if e.Opaque && r.opts.Whiteouts == KeepWhiteouts {
			if err := unix.Lsetxattr(p, opaqueXattrs[0], []byte("y"), 0); err != nil {
				return fmt.Errorf("mark opaque: %w", err)
			}
		}
		return nil // mode and mtime at the end
	case checkpoints.KindSymlink:
		if _, err := removeExisting(p, false); err != nil {
			return err
		}
		if err := os.Symlink(e.Target, p); err != nil {
			return err
		}
		if r.root {
			if err := os.Lchown(p, e.UID, e.GID); err != nil {
				return err
			}
		}
		if e.ModTime != 0 {
			return setTimes(p, e.ModTime)
		}
		return nil
	case checkpoints.KindWhiteout:
		if _, err := removeExisting(p, false); err != nil {
			return err
		}
		if r.opts.Whiteouts == KeepWhiteouts {
			if err := unix.Mknod(p, unix.S_IFCHR, 0); err != nil {
				return fmt.Errorf("make whiteout: %w", err)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown kind %q", e.Kind)
}

// file writes the regular file e (its parents exist, its path is free).
func (r *restorer) file(ctx context.Context, e checkpoints.Entry) error {
	p := filepath.Join(r.dest, filepath.FromSlash(e.Path))
	if err := r.copyBlob(ctx, p, e); err != nil {
		return err
	}
	return r.attrs(p, e, true)
}

func (r *restorer) copyBlob(ctx context.Context, p string, e checkpoints.Entry) error {
	dst, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600) // read: the cache is filled from it (copyTo)
	if err != nil {
		return err
	}
	if len(e.Holes) == 0 {
		var n int64
		n, err = r.blobs.copyTo(ctx, e.BlobKey, dst)
		if err == nil && n != e.Size {
			err = &CorruptBlobError{Key: e.BlobKey, Size: n, WantSize: e.Size}
		}
	} else {
		err = r.fillSparse(ctx, dst, e)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}

// fillSparse writes the sparse file entry e into dst from its blob, which
// holds e's data ranges one after the other (see fill).
func (r *restorer) fillSparse(ctx context.Context, dst *os.File, e checkpoints.Entry) error {
	src, err := r.blobs.Open(ctx, e.BlobKey) // checked against the key as it is read
	if err != nil {
		return err
	}
	defer src.Close()
	return fill(dst, src, e)
}

// fill writes file entry e's content to the empty file dst from its blob
// src: the data ranges at their offsets, leaving the holes unwritten. The
// copies use copy_file_range: a reflink where the filesystem can.
func fill(dst *os.File, src io.Reader, e checkpoints.Entry) error {
	var n int64
	for _, d := range dataRanges(e) {
		if _, err := dst.Seek(d.Offset, io.SeekStart); err != nil {
			return err
		}
		k, err := io.CopyN(dst, src, d.Length)
		n += k
		if errors.Is(err, io.EOF) {
			break // short blob: reported below
		}
		if err != nil {
			return err
		}
	}
	if n != e.DataSize() {
		return &CorruptBlobError{Key: e.BlobKey, Size: n, WantSize: e.DataSize()}
	}
	if k, err := io.CopyN(io.Discard, src, 1); k > 0 {
		return &CorruptBlobError{Key: e.BlobKey, Size: n + k, WantSize: e.DataSize()}
	} else if !errors.Is(err, io.EOF) {
		return err
	}
	return dst.Truncate(e.Size) // the trailing hole, if any
}

// attrs sets owner (as root), then mode (chown clears setuid), then mtime.
func (r *restorer) attrs(p string, e checkpoints.Entry, times bool) error {
	if r.root {
		if err := os.Lchown(p, e.UID, e.GID); err != nil {
			return err
		}
	}
	mode := fs.FileMode(e.Mode & 0o777)
	if e.Mode&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if e.Mode&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if e.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	if err := os.Chmod(p, mode); err != nil {
		return err
	}
	if times && e.ModTime != 0 {
		return setTimes(p, e.ModTime)
	}
	return nil
}

func setTimes(p string, mtime int64) error {
	ts := []unix.Timespec{unix.NsecToTimespec(mtime), unix.NsecToTimespec(mtime)}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}
