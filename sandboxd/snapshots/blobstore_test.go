package snapshots_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/memory"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
	"github.com/alineo-labs/alineo/testenv"
)

// s3Bucket is a bucket on a real S3 server (versitygw) for one test.
type s3Bucket struct {
	srv  *testenv.S3Server
	name string
}

func newS3Bucket(t *testing.T) *s3Bucket {
	t.Helper()
	srv := testenv.S3(t)
	name, err := srv.NewBucket()
	must(t, err)
	return &s3Bucket{srv: srv, name: name}
}

// open opens a BlobStore on the bucket with a cache of its own, as one host.
func (b *s3Bucket) open(t *testing.T, cfg snapshots.BlobConfig) *snapshots.BlobStore {
	t.Helper()
	return b.openURL(t, b.srv.URL(b.name), cfg)
}

// openURL is open with the bucket's URL as given (with a prefix, say).
func (b *s3Bucket) openURL(t *testing.T, url string, cfg snapshots.BlobConfig) *snapshots.BlobStore {
	t.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(t.TempDir(), "cache")
	}
	s, err := snapshots.OpenBlobStoreURL(context.Background(), url, cfg)
	if err != nil {
		t.Fatalf("OpenBlobStoreURL: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// objectPath is the file behind key's object on the server.
func (b *s3Bucket) objectPath(key string) string {
	return filepath.Join(b.srv.Dir(), b.name, "sha256", key[:2], key)
}

func keyOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// overwrite replaces the file at p (a stored blob) with data, behind the
// store's back.
func overwrite(t *testing.T, p string, data []byte) {
	t.Helper()
	must(t, os.Chmod(p, 0o644))
	must(t, os.WriteFile(p, data, 0o644))
}

// backend is one kind of blob store the same tests run against.
type backend struct {
	name string
	open func(t *testing.T) (*snapshots.BlobStore, func(key string) string)
}

var backends = []backend{
	{"file", func(t *testing.T) (*snapshots.BlobStore, func(string) string) {
		b := openBlobs(t)
		return b, func(key string) string { return filepath.Join(b.Dir(), "sha256", key[:2], key) }
	}},
	{"s3", func(t *testing.T) (*snapshots.BlobStore, func(string) string) {
		bk := newS3Bucket(t)
		return bk.open(t, snapshots.BlobConfig{}), bk.objectPath
	}},
	{"s3-prefix", func(t *testing.T) (*snapshots.BlobStore, func(string) string) {
		bk := newS3Bucket(t)
		b := bk.openURL(t, bk.srv.URL(bk.name)+"&prefix=hosts/a-1/", snapshots.BlobConfig{})
		return b, func(key string) string {
			return filepath.Join(bk.srv.Dir(), bk.name, "hosts", "a-1", "sha256", key[:2], key)
		}
	}},
}

// TestBlobStoreBackends runs the blob store's contract against file:// and
// against a real S3 server.
func TestBlobStoreBackends(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := t.Context()
			b, objectPath := be.open(t)
			data := bytes.Repeat([]byte("content-addressed "), 10_000)
			key, size, err := b.Put(ctx, bytes.NewReader(data))
			must(t, err)
			if key != keyOf(data) || size != int64(len(data)) {
				t.Fatalf("Put = %s, %d; want %s, %d", key, size, keyOf(data), len(data))
			}
			if k2, _, err := b.Put(ctx, bytes.NewReader(data)); err != nil || k2 != key {
				t.Fatalf("second Put = %s, %v", k2, err)
			}
			empty, _, err := b.Put(ctx, bytes.NewReader(nil))
			must(t, err)
			list, err := b.List(ctx)
			must(t, err)
			if len(list) != 2 || list[0].Key > list[1].Key {
				t.Fatalf("List = %+v, want 2 blobs sorted by key", list)
			}
			for _, k := range []string{key, empty} {
				r, err := b.Open(ctx, k)
				must(t, err)
				got, err := io.ReadAll(r)
				must(t, r.Close())
				if err != nil || keyOf(got) != k {
					t.Fatalf("Open(%s) read %d bytes hashing to %s, %v", k, len(got), keyOf(got), err)
				}
			}
			if has, err := b.Has(ctx, key); err != nil || !has {
				t.Fatalf("Has after Put = %v, %v", has, err)
			}
			info, err := b.Stat(ctx, key)
			if err != nil || info.Size != size {
				t.Fatalf("Stat = %+v, %v; want size %d", info, err, size)
			}
			must(t, b.Delete(ctx, key))
			must(t, b.Delete(ctx, key))
			if has, err := b.Has(ctx, key); err != nil || has {
				t.Fatalf("Has after Delete = %v, %v", has, err)
			}
			if _, err := b.Open(ctx, key); !errors.Is(err, snapshots.ErrBlobNotFound) {
				t.Fatalf("Open(deleted) err = %v, want ErrBlobNotFound", err)
			}
			if _, err := b.Stat(ctx, key); !errors.Is(err, snapshots.ErrBlobNotFound) {
				t.Fatalf("Stat(deleted) err = %v, want ErrBlobNotFound", err)
			}
			for _, bad := range []string{"", "../../etc/passwd", strings.Repeat("A", 64), strings.Repeat("a", 63)} {
				if _, err := b.Open(ctx, bad); !errors.Is(err, snapshots.ErrInvalidKey) {
					t.Errorf("Open(%q) err = %v, want ErrInvalidKey", bad, err)
				}
			}

			// A blob whose content no longer hashes to its key is refused
			// when read, with a typed error naming it.
			other := []byte("the right content")
			okey, _, err := b.Put(ctx, bytes.NewReader(other))
			must(t, err)
			overwrite(t, objectPath(okey), []byte("the wrong content"))
			r, err := b.Open(ctx, okey)
			if err == nil {
				_, err = io.ReadAll(r)
				r.Close()
			}
			var ce *snapshots.CorruptBlobError
			if !errors.As(err, &ce) || !errors.Is(err, snapshots.ErrCorruptBlob) || ce.Key != okey || ce.Got != keyOf([]byte("the wrong content")) {
				t.Fatalf("reading a corrupt blob: err = %v, want a CorruptBlobError for %s", err, okey)
			}
			// Putting the content again repairs it.
			if _, _, err := b.Put(ctx, bytes.NewReader(other)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestUploadChecksContent: an upload whose bytes no longer hash to the key
// they were hashed to (the file changed in between, or got shorter) fails
// with ErrCorruptBlob and stores nothing, on every path a blob takes: a
// file:// store, S3's one checked request (s3Put, also under a prefix and
// without its checksum header), and
// gocloud.dev/blob's writer (a blob over 16 MiB, or a prefix that s3blob
// escapes).
func TestUploadChecksContent(t *testing.T) {
	bk := newS3Bucket(t)
	url := bk.srv.URL(bk.name)
	stores := []struct {
		name   string
		b      *snapshots.BlobStore
		direct bool
		size   int
	}{
		{"file", openBlobs(t), false, 1 << 20},
		{"s3", bk.open(t, snapshots.BlobConfig{}), true, 1 << 20},
		{"s3-prefix", bk.openURL(t, url+"&prefix=hosts/a-1/", snapshots.BlobConfig{}), true, 1 << 20},
		{"s3-no-checksum-header", bk.openURL(t, url+"&request_checksum_calculation=when_required", snapshots.BlobConfig{}), true, 1 << 20},
		{"s3-large", bk.open(t, snapshots.BlobConfig{}), true, 16<<20 + 1},
		{"s3-escaped-prefix", bk.openURL(t, url+"&prefix=odd__dir/", snapshots.BlobConfig{}), false, 1 << 20},
	}
	dir := t.TempDir()
	for i, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			if got := snapshots.S3Put(st.b); got != st.direct {
				t.Fatalf("the store uploads in one checked request: %v, want %v", got, st.direct)
			}
			ctx := t.Context()
			data := bytes.Repeat([]byte{byte(i)}, st.size)
			copy(data, st.name)
			key := keyOf(data)
			p := filepath.Join(dir, st.name)
			must(t, os.WriteFile(p, data, 0o644))
			changed := bytes.Clone(data)
			changed[len(changed)/2] ^= 1
			cases := []struct {
				name    string
				content []byte
			}{
				{"changed", changed},
				{"shorter", data[:len(data)-1]},
			}
			for _, c := range cases {
				must(t, os.WriteFile(p, c.content, 0o644))
				f, err := os.Open(p)
				must(t, err)
				err = snapshots.Upload(st.b, ctx, key, int64(len(data)), f)
				f.Close()
				if !errors.Is(err, snapshots.ErrCorruptBlob) {
					t.Errorf("%s: upload err = %v, want ErrCorruptBlob", c.name, err)
				}
				if ok, err := st.b.Exists(ctx, key); err != nil || ok {
					t.Errorf("%s: Exists after a refused upload = %v, %v; want false", c.name, ok, err)
				}
			}
			must(t, os.WriteFile(p, data, 0o644))
			f, err := os.Open(p)
			must(t, err)
			defer f.Close()
			must(t, snapshots.Upload(st.b, ctx, key, int64(len(data)), f))
			r, err := st.b.Open(ctx, key)
			must(t, err)
			got, err := io.ReadAll(r)
			must(t, r.Close())
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes (%v), want the %d uploaded", len(got), err, len(data))
			}
		})
	}
}

// TestCorruptBlobFailsRestore: a restore that meets a blob whose content
// does not hash to its key fails with ErrCorruptBlob naming the file, on
// both backends.
func TestCorruptBlobFailsRestore(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := t.Context()
			b, objectPath := be.open(t)
			m := snapshots.NewManager(newMemoryStore(), b, snapshots.ManagerConfig{})
			src := t.TempDir()
			write(t, src, "ok.txt", "fine", 0o644)
			write(t, src, "dir/bad.bin", "will be corrupted", 0o644)
			c, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src})
			must(t, err)
			var key string
			for _, e := range c.Files {
				if e.Path == "dir/bad.bin" {
					key = e.BlobKey
				}
			}
			overwrite(t, objectPath(key), []byte("will be CORRUPTED"))
			err = m.Restore(ctx, c.ID, filepath.Join(t.TempDir(), "dest"), snapshots.RestoreOptions{})
			var pe *snapshots.PathError
			var ce *snapshots.CorruptBlobError
			if !errors.Is(err, snapshots.ErrCorruptBlob) || !errors.As(err, &pe) || pe.Path != "dir/bad.bin" || !errors.As(err, &ce) || ce.Key != key {
				t.Fatalf("Restore err = %v, want a corrupt blob error naming dir/bad.bin", err)
			}
			if !strings.Contains(err.Error(), "dir/bad.bin") {
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
}

// TestOpenBlobStoreURLErrors: bad URLs fail at open with the URL, without
// its credentials, and the cause.
func TestOpenBlobStoreURLErrors(t *testing.T) {
	ctx := t.Context()
	cases := []struct {
		name, url string
		want      error // nil: any error
	}{
		{"not a url", "s3://bucket?endpoint=%zz", nil},
		{"file with host", "file://host/tmp/x", snapshots.ErrInvalidURL},
		{"unknown scheme", "ftp://secretuser:hunter2@host/x", nil},
		{"unreachable", "s3://bucket?endpoint=http://secretuser:hunter2@127.0.0.1:1&region=us-east-1&use_path_style=true", snapshots.ErrUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("AWS_ACCESS_KEY_ID", "k")
			t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
			t.Setenv("AWS_MAX_ATTEMPTS", "1")
			_, err := snapshots.OpenBlobStoreURL(ctx, tc.url, snapshots.BlobConfig{CacheDir: t.TempDir()})
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("OpenBlobStoreURL(%s) err = %v, want %v", tc.url, err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error shows the password: %v", err)
			}
		})
	}
}

// TestCacheBounded reads more blobs than the cache holds: it keeps the most
// recently read within its bound, and serves them while S3 is down.
func TestCacheBounded(t *testing.T) {
	ctx := t.Context()
	bk := newS3Bucket(t)
	const size, n = 100 << 10, 6
	writer := bk.open(t, snapshots.BlobConfig{})
	var keys []string
	for i := range n {
		k, _, err := writer.Put(ctx, bytes.NewReader(bytes.Repeat([]byte{byte('a' + i)}, size)))
		must(t, err)
		keys = append(keys, k)
	}
	cacheDir := filepath.Join(t.TempDir(), "cache")
	limit := int64(3*size + size/2)
	reader := bk.open(t, snapshots.BlobConfig{CacheDir: cacheDir, CacheBytes: limit})
	read := func(k string) error {
		r, err := reader.Open(ctx, k)
		if err != nil {
			return err
		}
		defer r.Close()
		got, err := io.ReadAll(r)
		if err == nil && keyOf(got) != k {
			err = errors.New("wrong content")
		}
		return err
	}
	for _, k := range keys {
		must(t, read(k))
		if got := dirBytes(t, cacheDir); got > limit {
			t.Fatalf("cache holds %d bytes, more than its bound %d", got, limit)
		}
	}
	must(t, read(keys[3])) // most recently used again: keys 4, 5, 3
	must(t, bk.srv.Stop())
	for _, k := range keys[3:] {
		if err := read(k); err != nil {
			t.Fatalf("cached blob %s while S3 is down: %v", k[:8], err)
		}
	}
	if err := read(keys[0]); err == nil {
		t.Fatal("an evicted blob was read while S3 is down")
	}
	must(t, bk.srv.Start())
}

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	}))
	return n
}

// allBlobsWhole checks that every object under the bucket's sha256/ prefix
// is a whole blob: its content hashes to its key.
func allBlobsWhole(t *testing.T, b *snapshots.BlobStore) int {
	t.Helper()
	list, err := b.List(t.Context())
	must(t, err)
	for _, info := range list {
		r, err := b.Open(t.Context(), info.Key)
		if err == nil {
			_, err = io.Copy(io.Discard, r)
			r.Close()
		}
		if err != nil {
			t.Fatalf("blob %s: %v", info.Key, err)
		}
	}
	return len(list)
}

func newMemoryStore() checkpoints.Store { return memory.New(checkpoints.Options{}) }
