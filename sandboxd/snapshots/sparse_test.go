package snapshots_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
)

// sparseFile creates the file p of size bytes holding only the fragments
// (offset → content) given.
func sparseFile(t testing.TB, p string, size int64, frags map[int64]string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	f, err := os.Create(p)
	must(t, err)
	defer f.Close()
	must(t, f.Truncate(size))
	for off, s := range frags {
		if _, err := f.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
}

// diskUsage is the disk the files under root take (allocated blocks).
func diskUsage(t testing.TB, root string) int64 {
	t.Helper()
	var n int64
	must(t, filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += info.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	}))
	return n
}

// dataOffsets lists where f's data starts and ends (SEEK_DATA, SEEK_HOLE).
func dataOffsets(t testing.TB, p string) []int64 {
	t.Helper()
	f, err := os.Open(p)
	must(t, err)
	defer f.Close()
	fi, err := f.Stat()
	must(t, err)
	var out []int64
	for off := int64(0); off < fi.Size(); {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		must(t, err)
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		must(t, err)
		out = append(out, data, hole)
		off = hole
	}
	return out
}

// TestSparseFileRoundTrip: a file of 3 GiB apparent size and a few kilobytes
// of data is captured by reading and storing its data only, and restored
// with its holes: its size, data and data offsets are the source's, and
// neither the store nor the restored tree takes more than a few hundred
// kilobytes. (Before, the capture read and stored 3 GiB, 18 s in a sandbox,
// and its restore did not fit the sandbox's disk.)
func TestSparseFileRoundTrip(t *testing.T) {
	ctx := context.Background()
	const size = 3 << 30
	frags := map[int64]string{
		0:              "head of the file\n",
		1 << 30:        strings.Repeat("middle ", 20_000), // 140 KB across blocks
		size - 4096:    "last block\n",
		size - 1 - 100: "x",
	}
	src := filepath.Join(t.TempDir(), "src")
	sparseFile(t, filepath.Join(src, "disk.img"), size, frags)
	write(t, src, "plain.txt", "not sparse\n", 0o644)
	blobs := openBlobs(t)
	entries, st, err := snapshots.Capture(ctx, src, nil, blobs, snapshots.CaptureOptions{})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if st.Bytes < size {
		t.Errorf("Bytes = %d, want at least the apparent size %d", st.Bytes, size)
	}
	if got, limit := st.HashedBytes, int64(1<<20); got > limit {
		t.Errorf("the capture read %d bytes, want at most %d (the data, not the holes)", got, limit)
	}
	if got, limit := st.StoredBytes, int64(1<<20); got > limit {
		t.Errorf("the capture stored %d bytes, want at most %d", got, limit)
	}
	if got, limit := diskUsage(t, blobs.Dir()), int64(1<<20); got > limit {
		t.Errorf("the blob store takes %d bytes on disk, want at most %d", got, limit)
	}
	if got, want := st.SparseFiles, 1; got != want {
		t.Errorf("SparseFiles = %d, want %d", got, want)
	}
	must(t, checkpoints.ValidateEntries(entries))

	dest := filepath.Join(t.TempDir(), "dest")
	if err := snapshots.Restore(ctx, entries, blobs, dest, snapshots.RestoreOptions{}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	got, want := filepath.Join(dest, "disk.img"), filepath.Join(src, "disk.img")
	fi, err := os.Stat(got)
	must(t, err)
	if fi.Size() != size {
		t.Errorf("restored size = %d, want %d", fi.Size(), size)
	}
	if used, limit := diskUsage(t, dest), int64(1<<20); used > limit {
		t.Errorf("the restored tree takes %d bytes on disk, want at most %d", used, limit)
	}
	if g, w := dataOffsets(t, got), dataOffsets(t, want); !equalInts(g, w) {
		t.Errorf("restored data ranges = %v, want the source's %v", g, w)
	}
	f, err := os.Open(got)
	must(t, err)
	defer f.Close()
	for off, s := range frags {
		b := make([]byte, len(s)+1)
		n, _ := f.ReadAt(b, off)
		if !bytes.Equal(b[:len(s)], []byte(s)) || n == len(b) && b[len(s)] != 0 {
			t.Errorf("restored data at %d = %.20q, want %.20q then a zero", off, b, s)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dest, "plain.txt")); err != nil || string(b) != "not sparse\n" {
		t.Errorf("plain.txt = %q, %v", b, err)
	}

	// A capture after one of the unchanged tree re-uses the blob and holes.
	backdate(t, src)
	e2, st2, err := snapshots.Capture(ctx, src, nil, blobs, snapshots.CaptureOptions{})
	must(t, err)
	prev := &checkpoints.Checkpoint{CreatedAt: time.Now(), Files: e2}
	e3, st3, err := snapshots.Capture(ctx, src, prev, blobs, snapshots.CaptureOptions{})
	must(t, err)
	if st3.ReusedFiles != 2 || st3.SparseFiles != 1 || st3.AllocatedBytes != st2.AllocatedBytes {
		t.Errorf("second capture = %+v, want both files re-used, one sparse, the same allocation as %+v", st3, st2)
	}
	for i := range e3 {
		if len(e3[i].Holes) != len(e2[i].Holes) {
			t.Errorf("%s: %d holes re-used, want %d", e3[i].Path, len(e3[i].Holes), len(e2[i].Holes))
		}
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCaptureOverQuota: a capture whose files take more disk than MaxBytes
// fails with a *QuotaError before it reads the file that passes the bound;
// holes do not count, and a file of several names counts once per name, as a
// restore writes it. (Before, nothing bounded a capture: a tree that could
// never be restored into the sandbox's disk was stored whole.)
func TestCaptureOverQuota(t *testing.T) {
	ctx := context.Background()
	const quota = 3 << 20
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	cases := []struct {
		name  string
		build func(t *testing.T, root string)
		fails bool
	}{
		{"within", func(t *testing.T, root string) {
			write(t, root, "a", big, 0o644)
			write(t, root, "b", big, 0o644)
		}, false},
		{"over", func(t *testing.T, root string) {
			write(t, root, "a", big, 0o644)
			write(t, root, "b", big+big, 0o644)
			write(t, root, "c", big, 0o644)
		}, true},
		{"sparse within", func(t *testing.T, root string) {
			sparseFile(t, filepath.Join(root, "disk.img"), 3<<30, map[int64]string{1 << 30: big})
		}, false},
		{"hard links over", func(t *testing.T, root string) {
			write(t, root, "a", big, 0o644)
			for _, n := range []string{"b", "c", "d"} {
				must(t, os.Link(filepath.Join(root, "a"), filepath.Join(root, n)))
			}
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			c.build(t, root)
			blobs := openBlobs(t)
			_, st, err := snapshots.Capture(ctx, root, nil, blobs, snapshots.CaptureOptions{MaxBytes: quota})
			if !c.fails {
				if err != nil {
					t.Fatalf("Capture within the quota: %v", err)
				}
				if st.AllocatedBytes > quota || st.AllocatedBytes < 1<<20 {
					t.Errorf("AllocatedBytes = %d, want between 1 MiB and the quota", st.AllocatedBytes)
				}
				return
			}
			var qe *snapshots.QuotaError
			if !errors.As(err, &qe) || !errors.Is(err, snapshots.ErrOverQuota) || qe.Limit != quota {
				t.Fatalf("Capture over the quota: %v, want a *QuotaError (ErrOverQuota) of limit %d", err, quota)
			}
			if st.HashedBytes > quota {
				t.Errorf("the failed capture read %d bytes, want at most the quota %d", st.HashedBytes, quota)
			}
		})
	}

	// Through the Manager: the snapshot fails and the thread's head stays.
	m := newManager(t)
	root := t.TempDir()
	write(t, root, "a", big, 0o644)
	c1, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-q", Root: root, MaxBytes: quota})
	must(t, err)
	write(t, root, "b", big+big+big, 0o644)
	if _, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-q", Root: root, MaxBytes: quota}); !errors.Is(err, snapshots.ErrOverQuota) {
		t.Fatalf("Snapshot over the quota: %v, want ErrOverQuota", err)
	}
	if head, err := m.Store().Head(ctx, "sbx-q"); err != nil || head != c1.ID {
		t.Errorf("head after the failed snapshot = %q, %v; want %s", head, err, c1.ID)
	}
}

// TestRestoreSparseCorruptBlob: a sparse entry whose blob is shorter or
// longer than its data ranges is refused.
func TestRestoreSparseCorruptBlob(t *testing.T) {
	ctx := context.Background()
	blobs := openBlobs(t)
	key, _, err := blobs.Put(ctx, strings.NewReader("12345"))
	must(t, err)
	for _, size := range []int64{1<<20 + 4, 1<<20 + 6} {
		e := checkpoints.Entry{Path: "f", Kind: checkpoints.KindFile, BlobKey: key, Size: size,
			Holes: []checkpoints.Extent{{Offset: 2, Length: 1 << 20}}}
		err := snapshots.Restore(ctx, []checkpoints.Entry{e}, blobs, t.TempDir(), snapshots.RestoreOptions{})
		if !errors.Is(err, snapshots.ErrCorruptBlob) {
			t.Errorf("size %d: err = %v, want ErrCorruptBlob", size, err)
		}
	}
	e := checkpoints.Entry{Path: "f", Kind: checkpoints.KindFile, BlobKey: key, Size: 1<<20 + 5,
		Holes: []checkpoints.Extent{{Offset: 2, Length: 1 << 20}}}
	dest := t.TempDir()
	must(t, snapshots.Restore(ctx, []checkpoints.Entry{e}, blobs, dest, snapshots.RestoreOptions{}))
	f, err := os.Open(filepath.Join(dest, "f"))
	must(t, err)
	defer f.Close()
	b := make([]byte, 3)
	if _, err := f.ReadAt(b, 1<<20+2); err != nil || string(b) != "345" {
		t.Errorf("after the hole: %q, %v; want 345", b, err)
	}
	if _, err := f.ReadAt(b[:2], 0); err != nil || string(b[:2]) != "12" {
		t.Errorf("before the hole: %q, %v; want 12", b[:2], err)
	}
}
