package snapshots

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
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
	// Bytes is the total (apparent) size of the tree's regular files.
	Bytes int64
	// AllocatedBytes is the disk the tree takes, as CaptureOptions.MaxBytes
	// counts it.
	AllocatedBytes int64
	// SparseFiles have holes, which are neither read nor stored.
	SparseFiles int
	// ReusedFiles were unchanged since the previous checkpoint: not read.
	ReusedFiles int
	// HashedFiles and HashedBytes were read and hashed (their data, not
	// their holes).
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

// CaptureOptions configure Capture. The zero value is valid: no bound.
type CaptureOptions struct {
	// MaxBytes bounds the disk the captured tree takes (sandboxd: the
	// sandbox's disk quota, which a restore must fit in): the blocks
	// allocated to its entries, or a file's data bytes when they are more,
	// and a file of several names once per name, since a restore writes each
	// as a file. Past it, Capture fails with an error wrapping a *QuotaError
	// before it reads the file that passes it. Zero or less: no bound.
	MaxBytes int64
}

// Holes of a file shorter than minHole are stored as the zeros they read as,
// which bounds the holes of an entry (checkpoints.MaxHoles) and their cost
// in the manifest. minHole doubles for a file with more holes than that.
const minHole = 64 << 10

// Capture walks the tree at root and returns its entries, parents before
// children, in lexical order, without root itself. Regular files become blobs
// in blobs; a file whose size, mtime and mode equal its entry in prev (which
// may be nil) and whose blob is still stored re-uses that blob without being
// read. Directories, symlinks (not followed) and overlay whiteouts (0/0
// character devices; opaque directories are marked) are recorded; sockets,
// FIFOs and other devices are skipped and counted. The tree must not change
// during the capture (sandboxd freezes the sandbox). A name that is not valid
// UTF-8 fails the capture with an error wrapping checkpoints.ErrInvalidEntry.
//
// A sparse file's holes (found with SEEK_DATA and SEEK_HOLE; those of at
// least 64 KiB) are recorded in its entry and neither read nor stored: its
// blob holds its data ranges only, so a 3 GiB file of a few kilobytes of data
// costs a few kilobytes. Past opts.MaxBytes the capture fails (*QuotaError).
//
// The blobs are stored while the walk goes on, BlobConfig.Concurrency at
// once (a blob larger than 16 MiB alone); the first failure stops the walk
// and the other stores, and is Capture's error.
func Capture(ctx context.Context, root string, prev *checkpoints.Checkpoint, blobs *BlobStore, opts CaptureOptions) ([]checkpoints.Entry, CaptureStats, error) {
	c := &capturer{root: root, blobs: blobs, max: opts.MaxBytes, reuse: map[string]checkpoints.Entry{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.g, ctx = errgroup.WithContext(ctx)
	c.sem = semaphore.NewWeighted(int64(blobs.cfg.Concurrency))
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
	werr := filepath.WalkDir(root, visit)
	stopped := ctx.Err() != nil // by a failed store, or the caller
	if werr != nil {
		cancel() // stops the stores under way
	}
	if err := c.g.Wait(); err != nil && (werr == nil || stopped) {
		return nil, c.st, err
	}
	if werr != nil {
		return nil, c.st, werr
	}
	// Two files of the same content stored at once may both have found
	// the blob missing: it is one new blob all the same.
	fresh := map[string]bool{}
	for _, s := range c.stored {
		e := &c.entries[s.index]
		e.BlobKey = s.key
		if len(e.Holes) == 0 {
			e.Size = s.size
		}
		c.st.HashedFiles++
		c.st.HashedBytes += s.size
		if s.isNew && !fresh[s.key] {
			fresh[s.key] = true
			c.st.StoredBlobs++
			c.st.StoredBytes += s.size
		}
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
	max       int64                        // CaptureOptions.MaxBytes
	reuse     map[string]checkpoints.Entry // the previous checkpoint's files
	racyAfter int64
	entries   []checkpoints.Entry
	// g stores the blobs of the files the walk opened while the walk goes
	// on, BlobConfig.Concurrency at once: sem holds a unit for each, all of
	// them for a blob larger than s3PutMax, which an S3 store uploads in
	// parts, several at once, each part in memory.
	g   *errgroup.Group
	sem *semaphore.Weighted
	st  CaptureStats
	mu  sync.Mutex
	// stored are the blobs g stored, each for its entry in entries.
	stored []storedBlob // guarded by mu
}

// storedBlob is the blob stored for entries[index]: its key and size, and
// whether the store did not hold it before.
type storedBlob struct {
	index int
	key   string
	size  int64
	isNew bool
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
		if err := c.charge(allocated(sys)); err != nil {
			return &PathError{Op: "capture", Path: rel, Err: err}
		}
	case typ == 0:
		if err := c.file(ctx, p, &e, info, sys); err != nil {
			return &PathError{Op: "capture", Path: rel, Err: err}
		}
	case typ == fs.ModeSymlink:
		target, err := os.Readlink(p)
		if err != nil {
			return &PathError{Op: "capture", Path: rel, Err: err}
		}
		e.Kind, e.Target, e.Mode = checkpoints.KindSymlink, target, 0
		c.st.Symlinks++
		if err := c.charge(allocated(sys)); err != nil {
			return &PathError{Op: "capture", Path: rel, Err: err}
		}
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

// charge counts n more bytes of disk against the bound.
func (c *capturer) charge(n int64) error {
	c.st.AllocatedBytes += n
	if c.max > 0 && c.st.AllocatedBytes > c.max {
		return &QuotaError{Limit: c.max}
	}
	return nil
}

// allocated is the disk taken by the inode of sys (nil: unknown, 0).
func allocated(sys *syscall.Stat_t) int64 {
	if sys == nil {
		return 0
	}
	return sys.Blocks * 512
}

// file fills in the regular file e at p: the previous checkpoint's blob and
// holes when the file is unchanged (and not racy), else its holes, and has
// g store its data as a blob (Capture fills in its key). It charges the
// file's disk before reading it.
func (c *capturer) file(ctx context.Context, p string, e *checkpoints.Entry, info fs.FileInfo, sys *syscall.Stat_t) error {
	e.Kind = checkpoints.KindFile
	e.Size = info.Size()
	c.st.Files++
	c.st.Bytes += e.Size
	if old, ok := c.reuse[e.Path]; ok && old.Size == e.Size && old.ModTime == e.ModTime && old.Mode == e.Mode && e.ModTime < c.racyAfter {
		if has, _ := c.blobs.Has(ctx, old.BlobKey); has {
			if err := c.charge(max(allocated(sys), old.DataSize())); err != nil {
				return err
			}
			e.BlobKey, e.Holes = old.BlobKey, old.Holes
			c.count(e)
			c.st.ReusedFiles++
			return nil
		}
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	holes, err := findHoles(f, e.Size)
	if err == nil {
		e.Holes = holes
		err = c.charge(max(allocated(sys), e.DataSize()))
	}
	if err != nil {
		f.Close()
		return err
	}
	c.count(e)
	units := int64(1)
	if e.DataSize() > s3PutMax {
		units = int64(c.blobs.cfg.Concurrency)
	}
	if err := c.sem.Acquire(ctx, units); err != nil {
		f.Close()
		return err
	}
	// Stored by g, for the entry visit appends next; f is g's to close.
	index, entry := len(c.entries), *e
	c.g.Go(func() error {
		defer c.sem.Release(units)
		defer f.Close()
		if err := c.store(ctx, index, f, entry); err != nil {
			return &PathError{Op: "capture", Path: entry.Path, Err: err}
		}
		return nil
	})
	return nil
}

// store stores the data of the file e, open as f, as the blob of
// entries[index].
func (c *capturer) store(ctx context.Context, index int, f *os.File, e checkpoints.Entry) error {
	var r io.Reader = f
	if len(e.Holes) > 0 {
		r = dataReader(f, e)
	}
	key, size, stored, err := c.blobs.put(ctx, r)
	if err != nil {
		return err
	}
	if len(e.Holes) > 0 && size != e.DataSize() {
		return fmt.Errorf("sparse file changed during the capture: read %d data bytes, want %d", size, e.DataSize())
	}
	c.mu.Lock()
	c.stored = append(c.stored, storedBlob{index, key, size, stored})
	c.mu.Unlock()
	return nil
}

// count counts e among the sparse files if it has holes.
func (c *capturer) count(e *checkpoints.Entry) {
	if len(e.Holes) > 0 {
		c.st.SparseFiles++
	}
}

// findHoles returns the holes of at least minHole bytes of f, of size bytes,
// found with SEEK_DATA and SEEK_HOLE (a filesystem without them reports
// none), at most checkpoints.MaxHoles of them; it leaves f's offset at 0.
func findHoles(f *os.File, size int64) ([]checkpoints.Extent, error) {
	fd := int(f.Fd())
	var holes []checkpoints.Extent
	least := int64(minHole)
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO): // no data after off
			data = size
		case errors.Is(err, unix.EINVAL): // no SEEK_DATA here
			return nil, rewind(f)
		case err != nil:
			return nil, fmt.Errorf("find holes: %w", err)
		}
		data = min(data, size)
		if data-off >= least {
			holes = append(holes, checkpoints.Extent{Offset: off, Length: data - off})
			for len(holes) > checkpoints.MaxHoles {
				least *= 2
				holes = slices.DeleteFunc(holes, func(h checkpoints.Extent) bool { return h.Length < least })
			}
		}
		if data >= size {
			break
		}
		if off, err = unix.Seek(fd, data, unix.SEEK_HOLE); err != nil {
			return nil, fmt.Errorf("find holes: %w", err)
		}
		if off <= data { // not a hole after data: trust none
			return nil, rewind(f)
		}
	}
	return holes, rewind(f)
}

func rewind(f *os.File) error {
	_, err := f.Seek(0, io.SeekStart)
	return err
}

// dataRanges returns the ranges of file entry e that are not holes.
func dataRanges(e checkpoints.Entry) []checkpoints.Extent {
	var out []checkpoints.Extent
	var off int64
	for _, h := range e.Holes {
		if h.Offset > off {
			out = append(out, checkpoints.Extent{Offset: off, Length: h.Offset - off})
		}
		off = h.Offset + h.Length
	}
	if off < e.Size {
		out = append(out, checkpoints.Extent{Offset: off, Length: e.Size - off})
	}
	return out
}

// dataReader reads the data ranges of f (file entry e), one after the other.
func dataReader(f *os.File, e checkpoints.Entry) io.Reader {
	var rs []io.Reader
	for _, d := range dataRanges(e) {
		rs = append(rs, io.NewSectionReader(f, d.Offset, d.Length))
	}
	return io.MultiReader(rs...)
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
