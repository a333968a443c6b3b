package snapshots_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"gocloud.dev/blob"
	"golang.org/x/sync/errgroup"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/sqlite"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
	"github.com/alineo-labs/alineo/testenv"
)

const (
	benchFiles    = 200
	benchFileSize = 1 << 20 // 200 MB in all
	benchRounds   = 5       // per b.N; the median ratio is reported
)

// workspace writes benchFiles files of random bytes under root, backdated so
// that a capture may re-use them, and returns a function that rewrites one
// of them (1 MB) with new random bytes.
func workspace(b *testing.B, root string) (change func()) {
	b.Helper()
	rng := rand.New(rand.NewChaCha8([32]byte{7}))
	buf := make([]byte, benchFileSize)
	fill := func(p string) {
		for i := 0; i < len(buf); i += 8 {
			v := rng.Uint64()
			for j := range 8 {
				buf[i+j] = byte(v >> (8 * j))
			}
		}
		must(b, os.MkdirAll(filepath.Dir(p), 0o755))
		must(b, os.WriteFile(p, buf, 0o644))
	}
	path := func(f int) string {
		return filepath.Join(root, fmt.Sprintf("pkg%02d", f%20), fmt.Sprintf("file%03d.bin", f))
	}
	for f := range benchFiles {
		fill(path(f))
	}
	backdate(b, root)
	n := 0
	return func() {
		n++
		p := path(n * 37 % benchFiles)
		fill(p)
		// An mtime of its own, well before the last checkpoint: no later
		// capture takes the file for one written during it (RacyWindow).
		old := time.Now().Add(-time.Hour).Add(time.Duration(n) * time.Millisecond)
		must(b, os.Chtimes(p, old, old))
	}
}

// benchS3 starts an S3 server with one bucket and returns its URL.
func benchS3(b *testing.B) string {
	b.Helper()
	srv := testenv.S3(b)
	name, err := srv.NewBucket()
	must(b, err)
	return srv.URL(name)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkRestoreColdCacheS3 restores a 200 MB workspace (200 files of
// 1 MB) that another host snapshotted to S3, on a host whose cache is cold,
// against a raw download of the same 200 objects with the same client
// library (gocloud.dev/blob's s3blob, the same bucket options and the same
// number of downloads at once) into files. It reports raw/restore as the
// ratio (target ≥ 0.8) and, as a figure, the same restore again with the
// cache warm (the host that read the blobs before).
func BenchmarkRestoreColdCacheS3(b *testing.B) {
	ctx := context.Background()
	url := benchS3(b)
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	workspace(b, src)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "ckpt.db"), checkpoints.Options{})
	must(b, err)
	defer store.Close()
	writer, err := snapshots.OpenBlobStoreURL(ctx, url, snapshots.BlobConfig{CacheDir: filepath.Join(dir, "cache-writer")})
	must(b, err)
	defer writer.Close()
	c, _, err := snapshots.NewManager(store, writer, snapshots.ManagerConfig{}).Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "bench", Root: src})
	must(b, err)
	var keys []string
	for _, e := range c.Files {
		if e.Kind == checkpoints.KindFile {
			keys = append(keys, e.BlobKey)
		}
	}
	raw, err := blob.OpenBucket(ctx, url+"&response_checksum_validation=when_required")
	must(b, err)
	defer raw.Close()

	// rawDownload downloads every object into a fresh folder, as a client
	// of the bucket would without this package.
	rawDownload := func(out string) time.Duration {
		must(b, os.MkdirAll(out, 0o755))
		t0 := time.Now()
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(snapshots.DefaultConcurrency)
		for _, k := range keys {
			g.Go(func() error {
				rd, err := raw.NewReader(gctx, "sha256/"+k[:2]+"/"+k, nil)
				if err != nil {
					return err
				}
				defer rd.Close()
				f, err := os.Create(filepath.Join(out, k))
				if err != nil {
					return err
				}
				_, err = io.Copy(f, rd)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				return err
			})
		}
		must(b, g.Wait())
		return time.Since(t0)
	}
	var ratios []float64
	var rawMS, coldMS, warmMS float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r := range benchRounds {
			round := filepath.Join(dir, fmt.Sprintf("round-%d-%d", i, r))
			host, err := snapshots.OpenBlobStoreURL(ctx, url, snapshots.BlobConfig{CacheDir: filepath.Join(round, "cache")})
			must(b, err)
			m := snapshots.NewManager(store, host, snapshots.ManagerConfig{})
			cold := func() time.Duration {
				t0 := time.Now()
				must(b, m.Restore(ctx, c.ID, filepath.Join(round, "cold"), snapshots.RestoreOptions{}))
				return time.Since(t0)
			}
			// Each figure from a clean page cache state (syscall.Sync), in
			// alternating order: neither pays for the other's writeback.
			var rawD, coldD time.Duration
			b.StopTimer()
			syscall.Sync()
			b.StartTimer()
			if r%2 == 0 {
				rawD = rawDownload(filepath.Join(round, "raw"))
				b.StopTimer()
				syscall.Sync()
				b.StartTimer()
				coldD = cold()
			} else {
				coldD = cold()
				b.StopTimer()
				must(b, host.WaitCache(ctx))
				syscall.Sync()
				b.StartTimer()
				rawD = rawDownload(filepath.Join(round, "raw"))
			}
			b.StopTimer()
			must(b, host.WaitCache(ctx)) // the cache is filled after the cold restore returned
			syscall.Sync()
			b.StartTimer()
			t2 := time.Now()
			must(b, m.Restore(ctx, c.ID, filepath.Join(round, "warm"), snapshots.RestoreOptions{}))
			warmD := time.Since(t2)
			b.StopTimer()
			must(b, host.Close())
			must(b, os.RemoveAll(round))
			b.StartTimer()
			ratios = append(ratios, float64(rawD)/float64(coldD))
			rawMS, coldMS, warmMS = ms(rawD), ms(coldD), ms(warmD)
			b.Logf("raw download %v, cold restore %v, warm restore %v", rawD, coldD, warmD)
		}
	}
	b.ReportMetric(rawMS, "raw-ms")
	b.ReportMetric(coldMS, "cold-ms")
	b.ReportMetric(warmMS, "warm-ms")
	testenv.Target(b, "raw/cold-restore", median(ratios), 0.8, false)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkSecondCheckpointS3 takes a checkpoint after a 1 MB change in a
// 200 MB workspace with the blobs on S3, against the same with the blobs in
// a file:// directory (fsynced), both with a SQLite checkpoint store. It
// reports s3/file as the ratio (target ≤ 1.3).
func BenchmarkSecondCheckpointS3(b *testing.B) {
	ctx := context.Background()
	url := benchS3(b)
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	change := workspace(b, src)
	open := func(name string, blobs *snapshots.BlobStore) *snapshots.Manager {
		store, err := sqlite.Open(ctx, filepath.Join(dir, name+".db"), checkpoints.Options{})
		must(b, err)
		b.Cleanup(func() { _ = store.Close() })
		b.Cleanup(func() { _ = blobs.Close() })
		m := snapshots.NewManager(store, blobs, snapshots.ManagerConfig{})
		_, _, err = m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "bench", Root: src})
		must(b, err)
		return m
	}
	fileBlobs, err := snapshots.OpenBlobStore(filepath.Join(dir, "blobs"), snapshots.BlobConfig{})
	must(b, err)
	s3Blobs, err := snapshots.OpenBlobStoreURL(ctx, url, snapshots.BlobConfig{CacheDir: filepath.Join(dir, "cache")})
	must(b, err)
	file, s3 := open("file", fileBlobs), open("s3", s3Blobs)
	take := func(m *snapshots.Manager) time.Duration {
		t0 := time.Now()
		_, st, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "bench", Root: src})
		must(b, err)
		if st.HashedFiles != 1 || st.StoredBytes != benchFileSize {
			b.Fatalf("second checkpoint hashed %d files and stored %d bytes, want 1 file of 1 MB", st.HashedFiles, st.StoredBytes)
		}
		return time.Since(t0)
	}
	var ratios []float64
	var fileMS, s3MS float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r := range benchRounds * 3 {
			b.StopTimer()
			change()
			b.StartTimer()
			var fd, sd time.Duration
			if r%2 == 0 {
				fd, sd = take(file), take(s3)
			} else {
				sd, fd = take(s3), take(file)
			}
			ratios = append(ratios, float64(sd)/float64(fd))
			fileMS, s3MS = ms(fd), ms(sd)
		}
	}
	b.Logf("s3/file per round: %.2f", ratios)
	b.ReportMetric(fileMS, "file-ms")
	b.ReportMetric(s3MS, "s3-ms")
	testenv.Target(b, "s3/file", median(ratios), 1.3, true)
}

// BenchmarkFirstCheckpointS3 takes the first checkpoint of a 200 MB
// workspace (200 files of 1 MB) into an empty S3 bucket, against a raw
// upload of the same 200 files with the same client library (gocloud.dev/
// blob's s3blob) into another empty bucket, DefaultConcurrency at once. It
// reports raw/capture as the ratio (target ≥ 0.8): a capture reads each file
// twice (its key is its hash) and asks whether the bucket holds it first.
func BenchmarkFirstCheckpointS3(b *testing.B) {
	ctx := context.Background()
	srv := testenv.S3(b)
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	workspace(b, src)
	var files []string
	must(b, filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, p)
		}
		return err
	}))
	store, err := sqlite.Open(ctx, filepath.Join(dir, "ckpt.db"), checkpoints.Options{})
	must(b, err)
	defer store.Close()
	bucket := func() string {
		name, err := srv.NewBucket()
		must(b, err)
		return srv.URL(name)
	}
	rawUpload := func() time.Duration {
		raw, err := blob.OpenBucket(ctx, bucket())
		must(b, err)
		defer raw.Close()
		t0 := time.Now()
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(snapshots.DefaultConcurrency)
		for i, p := range files {
			g.Go(func() error {
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				defer f.Close()
				w, err := raw.NewWriter(gctx, fmt.Sprint("raw/", i), nil)
				if err != nil {
					return err
				}
				if _, err := io.Copy(w, f); err != nil {
					_ = w.Close()
					return err
				}
				return w.Close()
			})
		}
		must(b, g.Wait())
		return time.Since(t0)
	}
	capture := func(round int) time.Duration {
		blobs, err := snapshots.OpenBlobStoreURL(ctx, bucket(), snapshots.BlobConfig{CacheDir: filepath.Join(dir, fmt.Sprint("cache-", round))})
		must(b, err)
		defer blobs.Close()
		t0 := time.Now()
		_, st, err := snapshots.NewManager(store, blobs, snapshots.ManagerConfig{}).Snapshot(ctx, snapshots.SnapshotInput{ThreadID: fmt.Sprint("bench-", round), Root: src})
		took := time.Since(t0)
		must(b, err)
		if st.StoredBlobs != benchFiles {
			b.Fatalf("first checkpoint stored %d blobs, want %d", st.StoredBlobs, benchFiles)
		}
		return took
	}
	var ratios []float64
	var rawMS, captureMS float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r := range benchRounds {
			var rd, cd time.Duration
			if r%2 == 0 {
				rd, cd = rawUpload(), capture(i*benchRounds+r)
			} else {
				cd, rd = capture(i*benchRounds+r), rawUpload()
			}
			ratios = append(ratios, float64(rd)/float64(cd))
			rawMS, captureMS = ms(rd), ms(cd)
			b.Logf("raw upload %v, first checkpoint %v", rd, cd)
		}
	}
	b.ReportMetric(rawMS, "raw-ms")
	b.ReportMetric(captureMS, "capture-ms")
	testenv.Target(b, "raw/capture", median(ratios), 0.8, false)
}
