package snapshots

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
)

var _ checkpoints.BlobStore = (*BlobStore)(nil)

// BlobConfig configures a BlobStore. The zero value is valid.
type BlobConfig struct {
	// NoSync skips fsync of new blobs and their directories. Only for tests
	// and benchmarks: a crash may then leave a blob truncated under its key.
	NoSync bool
	// Now is the clock used to mark re-put blobs fresh for GC; time.Now when nil.
	Now func() time.Time
}

// BlobStore is a content-addressed blob store in a directory: the blob with
// key k (the lowercase hex sha256 of its content) is the read-only file
// sha256/k[:2]/k. Several BlobStores and processes may share a directory.
// Safe for concurrent use.
type BlobStore struct {
	dir string
	cfg BlobConfig
}

// staleTemp is the age after which Open removes temp files left by a crash.
const staleTemp = time.Hour

// OpenBlobStore opens (creating if needed) the blob store in dir and removes
// temp files older than an hour that a crashed writer left behind.
func OpenBlobStore(dir string, cfg BlobConfig) (*BlobStore, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	b := &BlobStore{dir: dir, cfg: cfg}
	for _, d := range []string{b.tmpDir(), filepath.Join(dir, "sha256")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("open blob store: %w", err)
		}
	}
	ents, err := os.ReadDir(b.tmpDir())
	if err != nil {
		return nil, fmt.Errorf("open blob store: %w", err)
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && cfg.Now().Sub(info.ModTime()) > staleTemp {
			_ = os.Remove(filepath.Join(b.tmpDir(), e.Name()))
		}
	}
	return b, nil
}

// Dir returns the store's directory.
func (b *BlobStore) Dir() string { return b.dir }

func (b *BlobStore) tmpDir() string { return filepath.Join(b.dir, "tmp") }

// ValidKey reports whether key is a lowercase hex sha256 digest.
func ValidKey(key string) bool {
	if len(key) != sha256.Size*2 {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Path returns the file holding key's blob, or an error wrapping ErrInvalidKey.
func (b *BlobStore) Path(key string) (string, error) {
	if !ValidKey(key) {
		return "", fmt.Errorf("%w: %q", ErrInvalidKey, key)
	}
	return filepath.Join(b.dir, "sha256", key[:2], key), nil
}

// ctxReader stops a copy when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Put stores r's content and returns its key and size. Storing content that
// is already present keeps the existing blob (and marks it fresh for GC).
func (b *BlobStore) Put(ctx context.Context, r io.Reader) (key string, size int64, err error) {
	key, size, _, err = b.put(ctx, r)
	return key, size, err
}

// put is Put that also reports whether the blob was new.
func (b *BlobStore) put(ctx context.Context, r io.Reader) (key string, size int64, stored bool, err error) {
	f, err := os.CreateTemp(b.tmpDir(), "put-*")
	if err != nil {
		return "", 0, false, fmt.Errorf("put blob: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	h := sha256.New()
	buf := make([]byte, 256<<10)
	size, err = io.CopyBuffer(io.MultiWriter(f, h), ctxReader{ctx, r}, buf)
	if err != nil {
		return "", 0, false, fmt.Errorf("put blob: %w", err)
	}
	key = hex.EncodeToString(h.Sum(nil))
	final, _ := b.Path(key)
	if _, serr := os.Stat(final); serr == nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		now := b.cfg.Now()
		_ = os.Chtimes(final, now, now) // fresh again: GC's MinAge spares it
		return key, size, false, nil
	}
	if !b.cfg.NoSync {
		if err = f.Sync(); err != nil {
			return "", 0, false, fmt.Errorf("put blob: %w", err)
		}
	}
	if err = f.Chmod(0o444); err != nil {
		return "", 0, false, fmt.Errorf("put blob: %w", err)
	}
	if err = f.Close(); err != nil {
		return "", 0, false, fmt.Errorf("put blob: %w", err)
	}
	dir := filepath.Dir(final)
	if err = os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, false, fmt.Errorf("put blob: %w", err)
	}
	if err = os.Rename(tmp, final); err != nil {
		return "", 0, false, fmt.Errorf("put blob: %w", err)
	}
	if !b.cfg.NoSync {
		if err = syncDir(dir); err != nil {
			return "", 0, false, fmt.Errorf("put blob: %w", err)
		}
	}
	return key, size, true, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Open returns the blob's content for reading. The caller closes it. A
// missing blob gives an error wrapping ErrBlobNotFound.
func (b *BlobStore) Open(key string) (*os.File, error) {
	p, err := b.Path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrBlobNotFound, key)
	}
	return f, err
}

// Has reports whether the blob is stored.
func (b *BlobStore) Has(key string) (bool, error) {
	p, err := b.Path(key)
	if err != nil {
		return false, err
	}
	_, err = os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Delete removes the blob. A missing blob is not an error.
func (b *BlobStore) Delete(_ context.Context, key string) error {
	p, err := b.Path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete blob %s: %w", key, err)
	}
	return nil
}

// List returns every stored blob, sorted by key. Files that are not blobs are
// ignored.
func (b *BlobStore) List(ctx context.Context) ([]checkpoints.BlobInfo, error) {
	var out []checkpoints.BlobInfo
	root := filepath.Join(b.dir, "sha256")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != root {
				return nil // deleted while walking
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || !ValidKey(d.Name()) || !strings.HasPrefix(d.Name(), filepath.Base(filepath.Dir(p))) {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		out = append(out, checkpoints.BlobInfo{Key: d.Name(), ModTime: info.ModTime(), Size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list blobs: %w", err)
	}
	return out, nil
}
