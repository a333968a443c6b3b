package snapshots

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/s3blob" // s3:// (AWS and every S3-compatible store)
	"gocloud.dev/gcerrors"

	"github.com/alineo-labs/alineo/checkpoints"
)

var (
	_ checkpoints.BlobStore   = (*BlobStore)(nil)
	_ checkpoints.BlobStatter = (*BlobStore)(nil)
)

// BlobConfig configures a BlobStore. The zero value is valid.
type BlobConfig struct {
	// NoSync skips fsync of new blobs and their directories in a file://
	// store. Only for tests and benchmarks: a crash may then leave a blob
	// truncated under its key.
	NoSync bool
	// Now is the clock that judges whether an existing blob is fresh (see
	// RefreshAfter); time.Now when nil.
	Now func() time.Time
	// CacheDir is the local read cache of a remote store: blobs read from
	// the bucket are kept there, checked, for later restores on this host.
	// One BlobStore (one process) per directory. A folder under os.TempDir
	// named after the bucket URL when empty. A file:// store has no cache.
	CacheDir string
	// CacheBytes bounds the cache; the least recently used blobs are evicted
	// beyond it. DefaultCacheBytes when zero.
	CacheBytes int64
	// RefreshAfter: Put of content the store already holds writes it again
	// (a file:// store touches it) when the stored blob is older than this,
	// so that a garbage collector's grace period counts from the Put.
	// DefaultRefreshAfter when zero; negative means always. Keep it well
	// under the GC grace period (ManagerConfig.GCMinAge) minus the longest
	// capture.
	RefreshAfter time.Duration
	// Concurrency is how many blobs a restore reads, or a capture stores,
	// at once; DefaultConcurrency when zero.
	Concurrency int
}

// Defaults of BlobConfig.
const (
	DefaultCacheBytes   int64 = 4 << 30
	DefaultRefreshAfter       = 10 * time.Minute
	DefaultConcurrency        = 8
)

func (c BlobConfig) withDefaults() BlobConfig {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.RefreshAfter == 0 {
		c.RefreshAfter = DefaultRefreshAfter
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	return c
}

// BlobStore is a content-addressed blob store in a gocloud.dev/blob bucket:
// the blob with key k (the lowercase hex sha256 of its content) is the object
// sha256/k[:2]/k. In a file:// store, the default, that object is the file of
// the same path under the store's directory, as it always was. Every read is
// checked against the key: a blob whose content does not hash to its key gives
// a *CorruptBlobError. A remote store (s3://, gs://, azblob://) keeps what it
// reads in a local cache bounded in size. Several BlobStores, processes and
// hosts may share a bucket. Safe for concurrent use.
type BlobStore struct {
	bucket  *blob.Bucket
	s3      *s3Put // nil unless an S3 bucket takes small blobs in one request
	url     string // for messages, credentials elided
	dir     string // the folder of a file:// store; "" for a remote one
	cfg     BlobConfig
	scratch string // temp files of Put (spooled readers)

	cache  *cache    // remote stores only
	known  *knownSet // remote stores only: keys known to be stored
	behind *behind   // remote stores only: caches what restores downloaded

	closeOnce sync.Once
	closeErr  error

	written, read atomic.Int64 // BlobStats
}

// BlobStats counts a BlobStore's content bytes since it was opened.
type BlobStats struct {
	Written int64 // bytes of the blobs Put stored (a blob already stored is not written again)
	Read    int64 // bytes read from blobs (Open's readers, restores)
}

// Stats returns the bytes written and read so far. Safe for concurrent use.
func (b *BlobStore) Stats() BlobStats {
	return BlobStats{Written: b.written.Load(), Read: b.read.Load()}
}

// staleTemp is the age after which temp files left by a crash are removed.
const staleTemp = time.Hour

// OpenBlobStore opens (creating if needed) the file:// blob store in dir and
// removes temp files older than an hour that a crashed writer left behind.
func OpenBlobStore(dir string, cfg BlobConfig) (*BlobStore, error) {
	cfg = cfg.withDefaults()
	b := &BlobStore{dir: dir, cfg: cfg, url: "file://" + dir, scratch: filepath.Join(dir, "tmp")}
	for _, d := range []string{b.scratch, filepath.Join(dir, "sha256")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("open blob store: %w", err)
		}
	}
	removeStale(b.scratch, cfg.Now())
	bucket, err := fileblob.OpenBucket(dir, &fileblob.Options{
		Metadata: fileblob.MetadataDontWrite, NoTempDir: true, DirFileMode: 0o755,
	})
	if err != nil {
		return nil, fmt.Errorf("open blob store %s: %w", dir, err)
	}
	b.bucket = bucket
	return b, nil
}

// OpenBlobStoreURL opens the blob store at rawURL: a path or file:///path
// (OpenBlobStore), or a gocloud.dev/blob bucket URL such as
// s3://bucket?endpoint=http://host:9000&region=us-east-1&use_path_style=true,
// gs://bucket or azblob://container (a prefix=dir/ parameter keeps the blobs
// under dir/). Credentials come from each cloud's standard environment and
// configuration chain. It checks that the bucket answers; a URL that does not
// parse or a bucket that cannot be reached gives an error naming the URL with
// credentials elided, and the cause.
func OpenBlobStoreURL(ctx context.Context, rawURL string, cfg BlobConfig) (*BlobStore, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open blob store: %w: %w", ErrInvalidURL, redactErr(err))
	}
	switch u.Scheme {
	case "":
		return OpenBlobStore(rawURL, cfg)
	case "file":
		if u.Host != "" && u.Host != "localhost" || u.Path == "" || u.RawQuery != "" {
			return nil, fmt.Errorf("open blob store %s: %w: want file:///absolute/path", u.Redacted(), ErrInvalidURL)
		}
		return OpenBlobStore(filepath.FromSlash(u.Path), cfg)
	}
	cfg = cfg.withDefaults()
	hide := secrets(u)
	b := &BlobStore{cfg: cfg, url: hide.in(u.Redacted()), known: newKnownSet(knownKeys)}
	if u.Scheme == "s3" && !u.Query().Has("response_checksum_validation") {
		// Reads are checked against their sha256; the SDK's CRC of every
		// response would only cost time, and would report a corrupt object
		// as an untyped error.
		q := u.Query()
		q.Set("response_checksum_validation", "when_required")
		u.RawQuery = q.Encode()
	}
	if b.bucket, err = blob.OpenBucket(ctx, u.String()); err != nil {
		return nil, fmt.Errorf("open blob store %s: %w", b.url, hide.err(err))
	}
	if ok, err := b.bucket.IsAccessible(ctx); err != nil || !ok {
		_ = b.bucket.Close()
		if err == nil {
			err = errors.New("bucket does not exist")
		}
		return nil, fmt.Errorf("open blob store %s: %w: %w", b.url, ErrUnavailable, hide.err(err))
	}
	b.s3 = newS3Put(b.bucket, u)
	dir := cfg.CacheDir
	if dir == "" {
		sum := sha256.Sum256([]byte(b.url))
		dir = filepath.Join(os.TempDir(), "alineo-blob-cache-"+hex.EncodeToString(sum[:6]))
	}
	if b.cache, err = openCache(dir, cfg.CacheBytes, cfg.Now()); err != nil {
		_ = b.bucket.Close()
		return nil, fmt.Errorf("open blob store %s: %w", b.url, err)
	}
	b.scratch = b.cache.tmpDir()
	b.behind = startBehind(b.cache)
	return b, nil
}

// hidden is the secrets of a URL, kept out of messages.
type hidden []string

// secrets returns the passwords in u: its own and those of URLs in its
// query (an endpoint=http://user:password@host), as written and escaped.
func secrets(u *url.URL) hidden {
	var out hidden
	add := func(v *url.URL) {
		if p, ok := v.User.Password(); ok && p != "" {
			out = append(out, p, url.QueryEscape(p), url.PathEscape(p))
		}
	}
	add(u)
	for _, vs := range u.Query() {
		for _, v := range vs {
			if vu, err := url.Parse(v); err == nil && vu.User != nil {
				add(vu)
			}
		}
	}
	return out
}

// in returns s with every secret replaced by xxxxx.
func (h hidden) in(s string) string {
	for _, p := range h {
		s = strings.ReplaceAll(s, p, "xxxxx")
	}
	return s
}

// err returns err with the secrets elided from its message.
func (h hidden) err(err error) error {
	if len(h) == 0 {
		return err
	}
	return &redactedError{err: err, msg: h.in(err.Error())}
}

// redactedError is an error whose message had secrets elided.
type redactedError struct {
	err error
	msg string
}

func (e *redactedError) Error() string { return e.msg }

// Unwrap returns the original error.
func (e *redactedError) Unwrap() error { return e.err }

// redactErr drops the URL from a url.Error, which would show credentials.
func redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Close finishes caching what restores downloaded, then closes the bucket.
// It is idempotent.
func (b *BlobStore) Close() error {
	b.closeOnce.Do(func() {
		if b.behind != nil {
			b.behind.close()
		}
		b.closeErr = b.bucket.Close()
	})
	return b.closeErr
}

// WaitCache returns once the blobs that restores so far downloaded straight
// into their destinations are in the local cache (a restore returns before
// they are: it writes each byte once before the sandbox may start, and the
// cache is filled right after). It does nothing for a file:// store.
func (b *BlobStore) WaitCache(ctx context.Context) error {
	if b.behind == nil {
		return nil
	}
	return b.behind.wait(ctx)
}

// Dir returns the folder of a file:// store, "" for a remote one.
func (b *BlobStore) Dir() string { return b.dir }

// URL returns the store's URL with credentials elided.
func (b *BlobStore) URL() string { return b.url }

// Remote reports whether the store is a remote bucket (not file://): one
// that other hosts may share, and whose garbage collection needs a grace
// period (see ManagerConfig.GCMinAge).
func (b *BlobStore) Remote() bool { return b.dir == "" }

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

// objectKey is the bucket key of blob key.
func objectKey(key string) string { return "sha256/" + key[:2] + "/" + key }

// blobKey returns the blob key of a bucket key, or "" when it is not a blob
// (a temp file of a file:// store, anything else in the bucket).
func blobKey(objKey string) string {
	rest, ok := strings.CutPrefix(objKey, "sha256/")
	if !ok || len(rest) != 3+2*sha256.Size || rest[2] != '/' {
		return ""
	}
	if k := rest[3:]; ValidKey(k) && k[:2] == rest[:2] {
		return k
	}
	return ""
}

func checkKey(key string) error {
	if !ValidKey(key) {
		return fmt.Errorf("%w: %q", ErrInvalidKey, key)
	}
	return nil
}

func notFound(err error) bool { return gcerrors.Code(err) == gcerrors.NotFound }

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
// is already present keeps the existing blob, written again (or touched) when
// it is older than BlobConfig.RefreshAfter so that GC's grace period counts
// from now. The blob is written whole or not at all.
func (b *BlobStore) Put(ctx context.Context, r io.Reader) (key string, size int64, err error) {
	key, size, _, err = b.put(ctx, r)
	return key, size, err
}

// put is Put that also reports whether the blob was new. A seekable file is
// read twice (to learn the key, then to upload it, checking it did not
// change); any other reader is spooled to a temp file first.
func (b *BlobStore) put(ctx context.Context, r io.Reader) (key string, size int64, stored bool, err error) {
	src, ok := r.(*os.File)
	if !ok {
		f, err := os.CreateTemp(b.scratch, "put-*")
		if err != nil {
			return "", 0, false, fmt.Errorf("put blob: %w", err)
		}
		defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
		if _, err := copyBuffer(struct{ io.Writer }{f}, ctxReader{ctx, r}); err != nil {
			return "", 0, false, fmt.Errorf("put blob: %w", err)
		}
		src = f
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return "", 0, false, fmt.Errorf("put blob: %w", err)
	}
	h := sha256.New()
	if size, err = copyBuffer(h, ctxReader{ctx, src}); err != nil {
		return "", 0, false, fmt.Errorf("put blob: %w", err)
	}
	key = hex.EncodeToString(h.Sum(nil))
	attrs, err := b.bucket.Attributes(ctx, objectKey(key))
	whole := err == nil && attrs.Size == size // an object of another size is corrupt: write it again
	switch {
	case whole && b.fresh(attrs.ModTime):
		b.remember(key)
		return key, size, false, nil
	case whole && b.dir != "": // a file:// blob is touched rather than written again
		now := b.cfg.Now()
		if err := os.Chtimes(b.filePath(key), now, now); err != nil {
			return "", 0, false, fmt.Errorf("put blob %s: %w", key, err)
		}
		return key, size, false, nil
	case err != nil && !notFound(err):
		return "", 0, false, fmt.Errorf("put blob %s in %s: %w", key, b.url, b.unreachable(err))
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return "", 0, false, fmt.Errorf("put blob: %w", err)
	}
	if err := b.upload(ctx, key, size, src); err != nil {
		return "", 0, false, err
	}
	b.written.Add(size)
	b.remember(key)
	return key, size, !whole, nil
}

// copyBufs holds the buffers of copyBuffer. A restore copies hundreds of
// blobs, several at once; a fresh 1 MiB buffer for each had to be zeroed, a
// tenth of a cold restore's CPU beside the download and its hashing.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// copyBuffer is io.CopyBuffer through a pooled 1 MiB buffer (unused, as
// io.CopyBuffer's, when src is an io.WriterTo or dst an io.ReaderFrom: a
// caller hides those methods to have it used).
func copyBuffer(dst io.Writer, src io.Reader) (int64, error) {
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	return io.CopyBuffer(dst, src, *buf)
}

// fresh reports whether a blob written at t needs no refresh.
func (b *BlobStore) fresh(t time.Time) bool {
	return b.cfg.RefreshAfter > 0 && b.cfg.Now().Sub(t) < b.cfg.RefreshAfter
}

func (b *BlobStore) filePath(key string) string {
	return filepath.Join(b.dir, "sha256", key[:2], key)
}

// upload writes src (size bytes that hashed to key) as key's object,
// checking on the way that it still hashes to key; otherwise the write is
// aborted and nothing is stored. On S3 a blob of at most s3PutMax bytes goes
// up in one request that the server checks (s3Put).
func (b *BlobStore) upload(ctx context.Context, key string, size int64, src *os.File) error {
	if b.s3 != nil && size <= s3PutMax {
		if err := b.s3.put(ctx, key, size, src); err != nil {
			return fmt.Errorf("put blob %s in %s: %w", key, b.url, b.unreachable(err))
		}
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var tmp *os.File // the temp file of a file:// write
	w, err := b.bucket.NewWriter(wctx, objectKey(key), &blob.WriterOptions{
		ContentType: "application/octet-stream",
		BeforeWrite: func(as func(any) bool) error {
			as(&tmp)
			return nil
		},
	})
	if err != nil {
		return fmt.Errorf("put blob %s in %s: %w", key, b.url, b.unreachable(err))
	}
	h := sha256.New()
	// Not through w.ReadFrom, which would copy through a fresh 1 MiB buffer.
	n, err := copyBuffer(struct{ io.Writer }{w}, io.TeeReader(ctxReader{ctx, src}, h))
	if err == nil && (n != size || hex.EncodeToString(h.Sum(nil)) != key) {
		err = fmt.Errorf("%w: the content changed while it was stored", ErrCorruptBlob)
	}
	if err == nil && tmp != nil {
		err = b.finishFile(tmp)
	}
	if err != nil {
		cancel() // aborts the write: Close then stores nothing
		_ = w.Close()
		return fmt.Errorf("put blob %s in %s: %w", key, b.url, b.unreachable(err))
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("put blob %s in %s: %w", key, b.url, b.unreachable(err))
	}
	if tmp != nil && !b.cfg.NoSync {
		if err := syncDir(filepath.Dir(b.filePath(key))); err != nil {
			return fmt.Errorf("put blob %s: %w", key, err)
		}
	}
	return nil
}

// finishFile makes the temp file of a file:// blob read-only and durable
// before it is renamed to its key.
func (b *BlobStore) finishFile(f *os.File) error {
	if err := f.Chmod(0o444); err != nil {
		return err
	}
	if b.cfg.NoSync {
		return nil
	}
	return f.Sync()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// remember notes that key is stored, so that Has need not ask the bucket.
func (b *BlobStore) remember(key string) {
	if b.known != nil {
		b.known.add(key)
	}
}

// Open returns the blob's content for reading; the caller closes it. Reading
// it to the end checks the content against the key: a mismatch is a
// *CorruptBlobError (wrapping ErrCorruptBlob) from Read. A remote store
// serves it from its cache, downloading (and checking) it first when
// missing. A missing blob gives an error wrapping ErrBlobNotFound; any other
// failure names the key and the bucket.
func (b *BlobStore) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	r, err := b.open(ctx, key)
	if err != nil {
		return nil, err
	}
	return &countingReader{ReadCloser: r, n: &b.read}, nil
}

// countingReader adds the bytes read through it to n.
type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.ReadCloser.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// open is Open, its bytes not counted.
func (b *BlobStore) open(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if b.cache != nil {
		f, err := b.cache.open(ctx, key, b.download, nil)
		if !errors.Is(err, errTooBig) {
			return f, err
		}
	}
	r, err := b.bucket.NewReader(ctx, objectKey(key), nil)
	if err != nil {
		return nil, b.readErr(key, err)
	}
	return &verifier{r: r, key: key, h: sha256.New()}, nil
}

// holdFills keeps the cache from being filled until the returned function
// is called: a restore's files come first.
func (b *BlobStore) holdFills() (release func()) {
	if b.behind == nil {
		return func() {}
	}
	return b.behind.hold()
}

// copyTo writes key's content, checked, into dst (an empty file) and
// returns its size. A remote store copies a cached blob with
// copy_file_range; it downloads a missing one straight into dst and has it
// cached right after (see behind).
func (b *BlobStore) copyTo(ctx context.Context, key string, dst *os.File) (int64, error) {
	n, err := b.copyToUncounted(ctx, key, dst)
	b.read.Add(n)
	return n, err
}

// copyToUncounted is copyTo, its bytes not counted.
func (b *BlobStore) copyToUncounted(ctx context.Context, key string, dst *os.File) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	if b.cache == nil {
		r, err := b.open(ctx, key)
		if err != nil {
			return 0, err
		}
		defer r.Close()
		return copyBuffer(struct{ io.Writer }{dst}, ctxReader{ctx, r})
	}
	if b.cache.has(key) || b.cache.downloading(key) {
		f, err := b.cache.open(ctx, key, b.download, nil)
		if err == nil {
			defer f.Close()
			return io.Copy(dst, f)
		}
		if !errors.Is(err, errTooBig) {
			return 0, err
		}
	}
	n, err := b.fetch(ctx, key, dst)
	if err != nil {
		return 0, err
	}
	if n <= b.cache.max {
		if fd, err := unix.Dup(int(dst.Fd())); err == nil {
			b.behind.add(key, os.NewFile(uintptr(fd), dst.Name()), n)
		}
	}
	return n, nil
}

func (b *BlobStore) readErr(key string, err error) error {
	if notFound(err) {
		return fmt.Errorf("%w: %s in %s", ErrBlobNotFound, key, b.url)
	}
	return fmt.Errorf("read blob %s from %s: %w", key, b.url, b.unreachable(err))
}

// download copies key's object into w, checking it, for the cache. It
// returns errTooBig, writing nothing, for a blob larger than the cache.
func (b *BlobStore) download(ctx context.Context, key string, w io.Writer) (int64, error) {
	r, err := b.bucket.NewReader(ctx, objectKey(key), nil)
	if err != nil {
		return 0, b.readErr(key, err)
	}
	defer r.Close()
	if r.Size() > b.cache.max {
		return 0, errTooBig
	}
	return b.copyChecked(key, w, r)
}

// fetch copies key's object into w, checking it.
func (b *BlobStore) fetch(ctx context.Context, key string, w io.Writer) (int64, error) {
	r, err := b.bucket.NewReader(ctx, objectKey(key), nil)
	if err != nil {
		return 0, b.readErr(key, err)
	}
	defer r.Close()
	return b.copyChecked(key, w, r)
}

func (b *BlobStore) copyChecked(key string, w io.Writer, r io.ReadCloser) (int64, error) {
	v := &verifier{r: r, key: key, h: sha256.New()}
	n, err := copyBuffer(struct{ io.Writer }{w}, v)
	if err != nil {
		return 0, fmt.Errorf("read blob %s from %s: %w", key, b.url, err)
	}
	b.remember(key)
	return n, nil
}

// verifier hashes what is read through it and, at EOF, returns a
// *CorruptBlobError instead of io.EOF when the content does not hash to key.
type verifier struct {
	r   io.ReadCloser
	key string
	h   hash.Hash
	n   int64
	err error // sticky result once EOF was seen
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if errors.Is(err, io.EOF) {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.key {
			v.err = &CorruptBlobError{Key: v.key, Got: got, Size: v.n}
			return n, v.err
		}
		v.err = io.EOF
	}
	return n, err
}

func (v *verifier) Close() error { return v.r.Close() }

// Has reports whether the blob is stored. A remote store answers from what
// it put or read itself, else asks the bucket.
func (b *BlobStore) Has(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	if b.known != nil && (b.known.has(key) || b.cache.has(key)) {
		return true, nil
	}
	return b.Exists(ctx, key)
}

// Exists asks the bucket whether the blob is stored, whatever this store
// remembers.
func (b *BlobStore) Exists(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	ok, err := b.bucket.Exists(ctx, objectKey(key))
	if err != nil {
		return false, fmt.Errorf("stat blob %s in %s: %w", key, b.url, b.unreachable(err))
	}
	if ok {
		b.remember(key)
	} else if b.known != nil {
		b.known.remove(key)
	}
	return ok, nil
}

// Stat returns the blob's info (checkpoints.BlobStatter: GC checks a
// candidate again right before deleting it). A missing blob gives an error
// wrapping ErrBlobNotFound.
func (b *BlobStore) Stat(ctx context.Context, key string) (checkpoints.BlobInfo, error) {
	if err := checkKey(key); err != nil {
		return checkpoints.BlobInfo{}, err
	}
	a, err := b.bucket.Attributes(ctx, objectKey(key))
	if notFound(err) {
		return checkpoints.BlobInfo{}, fmt.Errorf("%w: %s in %s", ErrBlobNotFound, key, b.url)
	}
	if err != nil {
		return checkpoints.BlobInfo{}, fmt.Errorf("stat blob %s in %s: %w", key, b.url, b.unreachable(err))
	}
	return checkpoints.BlobInfo{Key: key, ModTime: a.ModTime, Size: a.Size}, nil
}

// Delete removes the blob (and this host's cached copy). A missing blob is
// not an error.
func (b *BlobStore) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if b.known != nil {
		b.known.remove(key)
		b.cache.remove(key)
	}
	if err := b.bucket.Delete(ctx, objectKey(key)); err != nil && !notFound(err) {
		return fmt.Errorf("delete blob %s from %s: %w", key, b.url, b.unreachable(err))
	}
	return nil
}

// List returns every stored blob, sorted by key. Objects that are not blobs
// are ignored; in a file:// store, temp files older than an hour that a
// crashed writer left are removed on the way.
func (b *BlobStore) List(ctx context.Context) ([]checkpoints.BlobInfo, error) {
	var out []checkpoints.BlobInfo
	it := b.bucket.List(&blob.ListOptions{Prefix: "sha256/"})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("list blobs in %s: %w", b.url, b.unreachable(err))
		}
		k := blobKey(obj.Key)
		if k == "" {
			if b.dir != "" && strings.HasSuffix(obj.Key, ".tmp") && b.cfg.Now().Sub(obj.ModTime) > staleTemp {
				_ = os.Remove(filepath.Join(b.dir, filepath.FromSlash(obj.Key)))
			}
			continue
		}
		out = append(out, checkpoints.BlobInfo{Key: k, ModTime: obj.ModTime, Size: obj.Size})
	}
	return out, nil
}

// unreachable wraps err, from an operation on a remote bucket, with
// ErrUnavailable when it says the bucket could not be reached: the
// connection was refused, reset or timed out, or the server said to slow
// down. Content errors and the caller's cancellation stay as they are.
func (b *BlobStore) unreachable(err error) error {
	if err == nil || !b.Remote() || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrCorruptBlob) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || gcerrors.Code(err) == gcerrors.ResourceExhausted {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// removeStale removes the files in dir older than staleTemp.
func removeStale(dir string, now time.Time) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > staleTemp {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
