package snapshots_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/snapshots"
)

func openBlobs(t testing.TB) *snapshots.BlobStore {
	t.Helper()
	b, err := snapshots.OpenBlobStore(filepath.Join(t.TempDir(), "blobs"), snapshots.BlobConfig{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func write(t testing.TB, root, rel, content string, mode fs.FileMode) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// buildTree makes a tree with every kind Capture handles: files (empty, binary,
// executable, unicode names, a hard link), directories with unusual modes,
// symlinks (relative, absolute, dangling) and a FIFO, which is skipped.
func buildTree(t testing.TB, root string) {
	t.Helper()
	write(t, root, "README.md", "hello\n", 0o644)
	write(t, root, "empty", "", 0o600)
	write(t, root, "bin/run.sh", "#!/bin/sh\necho hi\n", 0o755)
	write(t, root, "data/blob.bin", string([]byte{0, 1, 2, 255, 254, '\n', 0}), 0o640)
	write(t, root, "ü/名前 with space.txt", "unicode\n", 0o644)
	write(t, root, "ü/🎉", "party", 0o444)
	write(t, root, "deep/a/b/c/d/e.txt", strings.Repeat("x", 100_000), 0o644)
	must(t, os.Link(filepath.Join(root, "README.md"), filepath.Join(root, "hardlink.md")))
	must(t, os.MkdirAll(filepath.Join(root, "emptydir"), 0o755))
	must(t, os.Chmod(filepath.Join(root, "emptydir"), 0o750))
	must(t, os.MkdirAll(filepath.Join(root, "sticky"), 0o755))
	must(t, os.Chmod(filepath.Join(root, "sticky"), 0o1777))
	write(t, root, "readonly/inside.txt", "ro", 0o644)
	must(t, os.Symlink("../README.md", filepath.Join(root, "bin/readme-link")))
	must(t, os.Symlink("/etc/hostname", filepath.Join(root, "abs-link")))
	must(t, os.Symlink("does/not/exist", filepath.Join(root, "dangling")))
	must(t, os.Symlink("ü", filepath.Join(root, "dir-link")))
	must(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	// Directory modes last, so their contents could be written.
	must(t, os.Chmod(filepath.Join(root, "readonly"), 0o555))
}

// backdate sets every mtime under root an hour back: the tree was written
// well before the first checkpoint (see snapshots.RacyWindow).
func backdate(t testing.TB, root string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	var dirs []string
	must(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		return os.Chtimes(p, old, old)
	}))
	for i := len(dirs) - 1; i >= 0; i-- {
		must(t, os.Chtimes(dirs[i], old, old))
	}
}

// describe returns one line per path under root: kind, mode, owner, mtime,
// size and content hash or link target. FIFOs, sockets and devices other
// than whiteouts are left out when skipSpecial is set.
func describe(t testing.TB, root string, skipSpecial bool) string {
	t.Helper()
	var lines []string
	must(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("%s %v uid=%d gid=%d", filepath.ToSlash(rel), info.Mode(), st.Uid, st.Gid)
		switch info.Mode().Type() {
		case 0:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += fmt.Sprintf(" size=%d sha=%s mtime=%d", len(b), hex.EncodeToString(sum[:8]), info.ModTime().UnixNano())
		case fs.ModeDir:
			line += fmt.Sprintf(" mtime=%d", info.ModTime().UnixNano())
		case fs.ModeSymlink:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + target + fmt.Sprintf(" mtime=%d", info.ModTime().UnixNano())
		default:
			if info.Mode()&fs.ModeCharDevice != 0 && st.Rdev == 0 {
				line += " whiteout"
			} else if skipSpecial {
				return nil
			}
		}
		lines = append(lines, line)
		return nil
	}))
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func diff(t testing.TB, what, got, want string) {
	t.Helper()
	if got == want {
		return
	}
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	gs, ws := map[string]bool{}, map[string]bool{}
	for _, l := range g {
		gs[l] = true
	}
	for _, l := range w {
		ws[l] = true
	}
	var b strings.Builder
	for _, l := range w {
		if !gs[l] {
			fmt.Fprintf(&b, "\n- %s", l)
		}
	}
	for _, l := range g {
		if !ws[l] {
			fmt.Fprintf(&b, "\n+ %s", l)
		}
	}
	t.Fatalf("%s differs (- want, + got):%s", what, b.String())
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
