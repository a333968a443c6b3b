package images

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Bounds of Config.
const (
	// DefaultMaxLayerBytes bounds a layer's unpacked bytes. The largest
	// layers of common images (CUDA and PyTorch ones) unpack to 5 to 10 GB.
	DefaultMaxLayerBytes = 16 << 30
	// DefaultMaxImageBytes bounds an image's unpacked bytes, the sum of its
	// layers'. The largest common images unpack to about 20 GB.
	DefaultMaxImageBytes = 64 << 30
)

// A layer's unpacked bytes are what its tar stream decompresses to, plus the
// holes of its sparse files (which take no disk but would if a sandbox copied
// them up): a gzip bomb counts at its expanded size, a sparse file at its
// apparent size. They are counted as the layer is read, so unpacking stops at
// the bound, not after it.

// meter counts the unpacked bytes of one layer against the layer bound and,
// through image, those of its image. One goroutine uses it.
type meter struct {
	n      int64
	max    int64 // < 0: no bound
	digest string
	image  *imageBudget // nil: no image bound
}

// charge counts k more bytes; it fails with a *LimitError past a bound.
func (m *meter) charge(k int64) error {
	m.n += k
	if m.max >= 0 && m.n > m.max {
		return &LimitError{Scope: "layer", Digest: m.digest, Limit: m.max}
	}
	return m.image.charge(k)
}

// fits reports whether k more bytes stay within the layer bound.
func (m *meter) fits(k int64) error {
	if m.max >= 0 && (k > m.max || m.n+k > m.max) {
		return &LimitError{Scope: "layer", Digest: m.digest, Limit: m.max}
	}
	return nil
}

// imageBudget counts the unpacked bytes of one pull's layers, which unpack
// concurrently, against the image bound. A nil *imageBudget is no bound.
type imageBudget struct {
	max  int64 // < 0: no bound
	used atomic.Int64
}

func (b *imageBudget) charge(k int64) error {
	if b == nil {
		return nil
	}
	if n := b.used.Add(k); b.max >= 0 && n > b.max {
		return &LimitError{Scope: "image", Limit: b.max, image: b}
	}
	return nil
}

// meteredReader charges every byte read through it to m.
type meteredReader struct {
	r io.Reader
	m *meter
}

func (r *meteredReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		if cerr := r.m.charge(int64(n)); cerr != nil {
			return n, cerr
		}
	}
	return n, err
}

// unpackedXattr holds a stored layer's unpacked bytes (decimal) on its
// directory, for the image bound of later pulls that share the layer.
const unpackedXattr = "user.alineo.unpacked"

func setUnpacked(dir string, n int64) error {
	return unix.Setxattr(dir, unpackedXattr, []byte(strconv.FormatInt(n, 10)), 0)
}

// unpackedSize returns the unpacked bytes of the stored layer in dir: its
// record, or for a layer stored before there was one, the apparent size of
// its files (then recorded).
func unpackedSize(dir string) int64 {
	buf := make([]byte, 24)
	if k, err := unix.Getxattr(dir, unpackedXattr, buf); err == nil {
		if n, err := strconv.ParseInt(string(buf[:k]), 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	n := diskUsage(dir)
	_ = setUnpacked(dir, n) // failing (no user xattrs here), it is counted again next time
	return n
}

// sparseBlock is the granularity of holes: a block of zeros in a file's
// content is not written, leaving a hole.
const sparseBlock = 4096

var zeroBlock [sparseBlock]byte

// writeSparse copies r to the empty file f, leaving every aligned block of
// zeros a hole, and sets its size to size: a sparse entry (PAX or GNU), whose
// holes the tar reader reads back as zeros, takes on disk only its data. It
// returns the bytes copied.
func writeSparse(f *os.File, r io.Reader, size int64, buf []byte) (int64, error) {
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if werr := writeData(f, buf[:n], off); werr != nil {
				return off, werr
			}
			off += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return off, err
		}
	}
	if off != size {
		return off, io.ErrUnexpectedEOF
	}
	return off, f.Truncate(size)
}

// writeData writes the non-zero blocks of b at offset off of f, each run of
// them in one write.
func writeData(f *os.File, b []byte, off int64) error {
	start := -1 // of the current run of data blocks
	for i := 0; i < len(b); i += sparseBlock {
		blk := b[i:min(i+sparseBlock, len(b))]
		zero := bytes.Equal(blk, zeroBlock[:len(blk)])
		switch {
		case !zero && start < 0:
			start = i
		case zero && start >= 0:
			if _, err := f.WriteAt(b[start:i], off+int64(start)); err != nil {
				return err
			}
			start = -1
		}
	}
	if start >= 0 {
		_, err := f.WriteAt(b[start:], off+int64(start))
		return err
	}
	return nil
}
