package snapshots_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
)

func TestBlobStore(t *testing.T) {
	ctx := context.Background()
	b := openBlobs(t)
	key, size, err := b.Put(ctx, strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"; key != want || size != 5 {
		t.Fatalf("Put = %s, %d; want %s, 5", key, size, want)
	}
	if k2, _, err := b.Put(ctx, strings.NewReader("hello")); err != nil || k2 != key {
		t.Fatalf("second Put = %s, %v", k2, err)
	}
	if _, _, err := b.Put(ctx, bytes.NewReader(nil)); err != nil {
		t.Fatal(err)
	}
	list, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("List = %v, want 2 blobs", list)
	}
	f, err := b.Open(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if string(got) != "hello" {
		t.Fatalf("Open read %q, want hello", got)
	}
	if has, _ := b.Has(ctx, key); !has {
		t.Fatal("Has = false after Put")
	}
	must(t, b.Delete(ctx, key))
	must(t, b.Delete(ctx, key))
	if has, _ := b.Has(ctx, key); has {
		t.Fatal("Has = true after Delete")
	}
	if _, err := b.Open(ctx, key); !errors.Is(err, snapshots.ErrBlobNotFound) {
		t.Fatalf("Open(deleted) err = %v, want ErrBlobNotFound", err)
	}
	for _, bad := range []string{"", "../../etc/passwd", strings.Repeat("A", 64), strings.Repeat("a", 63)} {
		if _, err := b.Open(ctx, bad); !errors.Is(err, snapshots.ErrInvalidKey) {
			t.Errorf("Open(%q) err = %v, want ErrInvalidKey", bad, err)
		}
	}
	tmps, _ := os.ReadDir(filepath.Join(b.Dir(), "tmp"))
	if len(tmps) != 0 {
		t.Fatalf("temp files left: %v", tmps)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := b.Put(cctx, strings.NewReader("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with cancelled ctx: err = %v", err)
	}
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "src")
	buildTree(t, src)
	blobs := openBlobs(t)
	entries, st, err := snapshots.Capture(ctx, src, nil, blobs, snapshots.CaptureOptions{})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if st.Files != 9 || st.Symlinks != 4 || st.Skipped != 1 || st.ReusedFiles != 0 || st.HashedFiles != 9 {
		t.Fatalf("stats = %+v, want 9 files hashed, 4 symlinks, 1 skipped", st)
	}
	// README.md and hardlink.md share one blob.
	if st.StoredBlobs != 8 {
		t.Fatalf("StoredBlobs = %d, want 8 (one shared by two equal files)", st.StoredBlobs)
	}
	if err := checkpoints.ValidateEntries(entries); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "dest")
	if err := snapshots.Restore(ctx, entries, blobs, dest, snapshots.RestoreOptions{}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	diff(t, "restored tree", describe(t, dest, true), describe(t, src, true))

	// Restoring over an existing, different tree replaces what the entries name.
	other := filepath.Join(t.TempDir(), "other")
	write(t, other, "README.md/oops", "a dir where a file was", 0o644)
	must(t, os.Symlink("/", filepath.Join(other, "empty")))
	if err := snapshots.Restore(ctx, entries, blobs, other, snapshots.RestoreOptions{}); err != nil {
		t.Fatalf("Restore over a tree: %v", err)
	}
	diff(t, "tree restored over another", describe(t, other, true), describe(t, src, true))
}

func TestSecondCaptureStoresOnlyChanges(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	const n, size = 20, 64 << 10
	for i := 0; i < n; i++ {
		write(t, src, filepathf("f%02d", i), strings.Repeat(string(rune('a'+i)), size), 0o644)
	}
	backdate(t, src)
	blobs := openBlobs(t)
	start := time.Now()
	e1, st1, err := snapshots.Capture(ctx, src, nil, blobs, snapshots.CaptureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st1.StoredBlobs != n || st1.StoredBytes != n*size {
		t.Fatalf("first capture stats = %+v", st1)
	}
	prev := &checkpoints.Checkpoint{CreatedAt: start, Files: e1}

	write(t, src, "f03", strings.Repeat("Z", size), 0o644) // new content
	must(t, os.Chmod(filepath.Join(src, "f05"), 0o600))    // mode only
	now := time.Now()
	must(t, os.Chtimes(filepath.Join(src, "f07"), now, now)) // touched, same content
	e2, st2, err := snapshots.Capture(ctx, src, prev, blobs, snapshots.CaptureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st2.HashedFiles != 3 || st2.ReusedFiles != n-3 {
		t.Fatalf("second capture hashed %d, reused %d; want 3 and %d", st2.HashedFiles, st2.ReusedFiles, n-3)
	}
	if st2.StoredBlobs != 1 || st2.StoredBytes != size {
		t.Fatalf("second capture stored %d blobs (%d bytes), want 1 (%d)", st2.StoredBlobs, st2.StoredBytes, size)
	}
	if e2[5].Mode != 0o600 || e2[5].BlobKey != e1[5].BlobKey {
		t.Fatalf("f05 = %+v, want mode 600 and the same blob", e2[5])
	}
	if e2[3].BlobKey == e1[3].BlobKey {
		t.Fatal("f03 kept its old blob after its content changed")
	}

	// A file whose mtime is within RacyWindow of the previous checkpoint is
	// hashed again, even though size, mtime and mode match.
	racy := &checkpoints.Checkpoint{CreatedAt: time.Unix(0, e2[0].ModTime).Add(snapshots.RacyWindow / 2), Files: e2}
	_, st3, err := snapshots.Capture(ctx, src, racy, blobs, snapshots.CaptureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st3.HashedFiles == 0 {
		t.Fatalf("racy capture hashed nothing: %+v", st3)
	}

	// A missing blob is not re-used: it is stored again.
	must(t, blobs.Delete(ctx, e2[10].BlobKey))
	_, st4, err := snapshots.Capture(ctx, src, &checkpoints.Checkpoint{CreatedAt: time.Now(), Files: e2}, blobs, snapshots.CaptureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st4.StoredBlobs != 1 {
		t.Fatalf("capture after losing a blob stored %d, want 1", st4.StoredBlobs)
	}
}

func filepathf(format string, args ...any) string {
	return filepath.FromSlash(sprintf(format, args...))
}

func TestRestoreRejectsUnsafeManifests(t *testing.T) {
	ctx := context.Background()
	blobs := openBlobs(t)
	key, _, err := blobs.Put(ctx, strings.NewReader("evil"))
	must(t, err)
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	must(t, os.Mkdir(outside, 0o755))
	file := func(p string) checkpoints.Entry {
		return checkpoints.Entry{Path: p, Kind: checkpoints.KindFile, BlobKey: key, Size: 4, Mode: 0o644}
	}
	cases := []struct {
		name    string
		entries []checkpoints.Entry
		want    error
	}{
		{"dotdot", []checkpoints.Entry{file("../outside/pwned")}, checkpoints.ErrInvalidEntry},
		{"inner dotdot", []checkpoints.Entry{file("a/../../outside/pwned")}, checkpoints.ErrInvalidEntry},
		{"absolute", []checkpoints.Entry{file(outside + "/pwned")}, checkpoints.ErrInvalidEntry},
		{"through own symlink", []checkpoints.Entry{
			{Path: "l", Kind: checkpoints.KindSymlink, Target: outside}, file("l/pwned")}, checkpoints.ErrInvalidEntry},
		{"slash in blob key", []checkpoints.Entry{{Path: "x", Kind: checkpoints.KindFile, BlobKey: "../../../etc/passwd", Size: 1}}, checkpoints.ErrInvalidEntry},
		{"blob key not sha256", []checkpoints.Entry{{Path: "x", Kind: checkpoints.KindFile, BlobKey: "..", Size: 1}}, snapshots.ErrInvalidKey},
		{"through existing symlink", []checkpoints.Entry{file("pre/pwned")}, snapshots.ErrUnsafePath},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "dest")
			must(t, os.MkdirAll(dest, 0o755))
			must(t, os.Symlink(outside, filepath.Join(dest, "pre")))
			err := snapshots.Restore(ctx, tc.entries, blobs, dest, snapshots.RestoreOptions{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Restore err = %v, want %v", err, tc.want)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("restore wrote outside dest: %v", ents)
			}
		})
	}
}

func TestRestoreDetectsCorruptBlob(t *testing.T) {
	ctx := context.Background()
	blobs := openBlobs(t)
	key, _, err := blobs.Put(ctx, strings.NewReader("12345"))
	must(t, err)
	err = snapshots.Restore(ctx, []checkpoints.Entry{{Path: "f", Kind: checkpoints.KindFile, BlobKey: key, Size: 9}}, blobs, t.TempDir(), snapshots.RestoreOptions{})
	if !errors.Is(err, snapshots.ErrCorruptBlob) {
		t.Fatalf("err = %v, want ErrCorruptBlob", err)
	}
	missing := strings.Repeat("ab", 32)
	err = snapshots.Restore(ctx, []checkpoints.Entry{{Path: "f", Kind: checkpoints.KindFile, BlobKey: missing}}, blobs, t.TempDir(), snapshots.RestoreOptions{})
	if !errors.Is(err, snapshots.ErrBlobNotFound) {
		t.Fatalf("err = %v, want ErrBlobNotFound", err)
	}
}

// TestCaptureEqualFilesOneBlob: files of one content, stored at once, are
// one new blob in the stats however many of their stores found it missing,
// and restore byte for byte.
func TestCaptureEqualFilesOneBlob(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "src")
	// Each long enough to hash that the stores under way all look for the
	// blob before the first has stored it.
	content := strings.Repeat("same bytes\n", 200<<10)
	for i := range 16 {
		write(t, src, fmt.Sprintf("d/copy%02d.txt", i), content, 0o644)
	}
	blobs := openBlobs(t)
	entries, st, err := snapshots.Capture(ctx, src, nil, blobs, snapshots.CaptureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.HashedFiles != 16 || st.StoredBlobs != 1 || st.StoredBytes != int64(len(content)) {
		t.Fatalf("stats = %+v, want 16 files hashed, 1 blob of %d bytes stored", st, len(content))
	}
	dest := filepath.Join(t.TempDir(), "dest")
	if err := snapshots.Restore(ctx, entries, blobs, dest, snapshots.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	diff(t, "restored tree", describe(t, dest, true), describe(t, src, true))
}
