package snapshots_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/sqlite"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
)

// BenchmarkSecondCheckpoint checkpoints a 200 MB workspace (200 files of 1 MB
// of random bytes), changes one file (1 MB) and checkpoints again, with the
// SQLite store and fsynced blobs. It reports the second checkpoint's stored
// bytes and time as ratios to the first (targets: ≤ 0.05 and ≤ 0.2).
func BenchmarkSecondCheckpoint(b *testing.B) {
	const files, size = 200, 1 << 20
	ctx := context.Background()
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	buf := make([]byte, size)
	fill := func(p string) {
		for i := 0; i < size; i += 8 {
			v := rng.Uint64()
			for j := 0; j < 8; j++ {
				buf[i+j] = byte(v >> (8 * j))
			}
		}
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	var bytesRatio, timeRatio, firstMS, secondMS float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := b.TempDir()
		root := filepath.Join(dir, "workspace")
		for f := 0; f < files; f++ {
			p := filepath.Join(root, fmt.Sprintf("pkg%02d", f%20), fmt.Sprintf("file%03d.bin", f))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
			fill(p)
		}
		store, err := sqlite.Open(ctx, filepath.Join(dir, "ckpt.db"), checkpoints.Options{})
		if err != nil {
			b.Fatal(err)
		}
		blobs, err := snapshots.OpenBlobStore(filepath.Join(dir, "blobs"), snapshots.BlobConfig{})
		if err != nil {
			b.Fatal(err)
		}
		m := snapshots.NewManager(store, blobs, snapshots.ManagerConfig{})
		b.StartTimer()

		t0 := time.Now()
		_, st1, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "bench", Root: root})
		if err != nil {
			b.Fatal(err)
		}
		d1 := time.Since(t0)

		b.StopTimer()
		fill(filepath.Join(root, "pkg07", "file107.bin"))
		b.StartTimer()

		t1 := time.Now()
		_, st2, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "bench", Root: root})
		if err != nil {
			b.Fatal(err)
		}
		d2 := time.Since(t1)

		if st1.StoredBytes != files*size {
			b.Fatalf("first checkpoint stored %d bytes, want %d", st1.StoredBytes, files*size)
		}
		bytesRatio = float64(st2.StoredBytes) / float64(st1.StoredBytes)
		timeRatio = float64(d2) / float64(d1)
		firstMS = float64(d1.Microseconds()) / 1000
		secondMS = float64(d2.Microseconds()) / 1000
		b.Logf("first: %v, stored %d bytes; second: %v, hashed %d files (%d bytes), stored %d bytes",
			d1, st1.StoredBytes, d2, st2.HashedFiles, st2.HashedBytes, st2.StoredBytes)
		_ = store.Close()
	}
	b.ReportMetric(bytesRatio, "bytes-ratio")
	b.ReportMetric(timeRatio, "time-ratio")
	b.ReportMetric(firstMS, "first-ms")
	b.ReportMetric(secondMS, "second-ms")
}
