package snapshots

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestBehindChecksAgain: the cache is filled after a restore from the
// destination's descriptor, and only with content that still hashes to the
// key; a file the sandbox changed meanwhile is not cached.
func TestBehindChecksAgain(t *testing.T) {
	c, err := openCache(t.TempDir(), 1<<20, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w := startBehind(c)
	defer w.close()
	dir := t.TempDir()
	good, changed := []byte("restored as it was"), []byte("restored, then written")
	add := func(name string, content []byte, after []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if after != nil { // the sandbox writes into the file before the cache reads it
			if err := os.WriteFile(p, after, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		w.add(sum(content), f, int64(len(content)))
		return sum(content)
	}
	kGood := add("good", good, nil)
	kChanged := add("changed", changed, bytes.ToUpper(changed))
	if err := w.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !c.has(kGood) {
		t.Fatal("an unchanged restored file was not cached")
	}
	if c.has(kChanged) {
		t.Fatal("a file changed after the restore was cached under the old key")
	}
	got, err := os.ReadFile(c.path(kGood))
	if err != nil || !bytes.Equal(got, good) {
		t.Fatalf("cached %q, %v; want %q", got, err, good)
	}
	w.close()
	f, _ := os.Open(filepath.Join(dir, "good"))
	w.add("x", f, 1) // after close: dropped, f closed
	if err := w.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestCacheEvictsLeastRecentlyUsed and keeps what it holds across a reopen.
func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	dir := t.TempDir()
	c, err := openCache(dir, 25, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(content string) string {
		k := sum([]byte(content))
		f, err := c.open(ctx, k, func(_ context.Context, _ string, w io.Writer) (int64, error) {
			n, err := io.WriteString(w, content)
			return int64(n), err
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		return k
	}
	a, b := put(strings.Repeat("a", 10)), put(strings.Repeat("b", 10))
	put(strings.Repeat("a", 10)) // a is used again: b is the least recent
	cc := put(strings.Repeat("c", 10))
	if !c.has(a) || c.has(b) || !c.has(cc) {
		t.Fatalf("cache holds a=%v b=%v c=%v; want a and c", c.has(a), c.has(b), c.has(cc))
	}
	if n, size := c.stats(); n != 2 || size != 20 {
		t.Fatalf("stats = %d blobs, %d bytes; want 2, 20", n, size)
	}
	c2, err := openCache(dir, 25, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !c2.has(a) || !c2.has(cc) || c2.has(b) {
		t.Fatal("a reopened cache lost what it held")
	}
}

func TestKnownSetBounded(t *testing.T) {
	k := newKnownSet(3)
	for _, key := range []string{"a", "b", "c", "d"} {
		k.add(key)
	}
	if k.has("a") || !k.has("b") || !k.has("d") {
		t.Fatal("the oldest key was not dropped first")
	}
	for i := range 100 { // removed keys leave no unbounded trail
		k.remove("d")
		k.add("d")
		_ = i
	}
	if len(k.fifo) > 2*k.max+1 {
		t.Fatalf("fifo grew to %d", len(k.fifo))
	}
}

// TestBehindWaitsForRestores: nothing is cached while a restore runs.
func TestBehindWaitsForRestores(t *testing.T) {
	c, err := openCache(t.TempDir(), 1<<20, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w := startBehind(c)
	defer w.close()
	p := filepath.Join(t.TempDir(), "f")
	content := []byte("restored")
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	release := w.hold()
	w.add(sum(content), f, int64(len(content)))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.wait(ctx); err == nil || c.has(sum(content)) {
		t.Fatalf("cache filled while a restore runs (wait: %v)", err)
	}
	release()
	if err := w.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !c.has(sum(content)) {
		t.Fatal("not cached once the restore returned")
	}
}
