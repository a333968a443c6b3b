package checkpoints_test

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/checkpoints"
)

func TestValidatePath(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"a", true},
		{"a/b/c", true},
		{"ü/名前 with space", true},
		{"..a", true},
		{"a..", true},
		{"", false},
		{".", false},
		{"..", false},
		{"../a", false},
		{"a/..", false},
		{"a/../b", false},
		{"/a", false},
		{"a/", false},
		{"a//b", false},
		{"./a", false},
		{"a/./b", false},
		{"a\x00b", false},
		{"\xff", false},
	}
	for _, tt := range tests {
		err := checkpoints.ValidatePath(tt.path)
		if got := err == nil; got != tt.ok {
			t.Errorf("ValidatePath(%q) = %v, want ok=%v", tt.path, err, tt.ok)
		}
		if err != nil && !errors.Is(err, checkpoints.ErrInvalidEntry) {
			t.Errorf("ValidatePath(%q) = %v, want ErrInvalidEntry", tt.path, err)
		}
	}
}

func TestValidateID(t *testing.T) {
	for _, id := range []string{"c1", "snap_123", "9f1c-uuid", "名前", "a.b:c@d"} {
		if err := checkpoints.ValidateID("id", id); err != nil {
			t.Errorf("ValidateID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", ".", "..", "a/b", `a\b`, "a b", "a\tb", "a\nb", "\xff", strings.Repeat("x", 257)} {
		if err := checkpoints.ValidateID("id", id); !errors.Is(err, checkpoints.ErrInvalidID) {
			t.Errorf("ValidateID(%q) = %v, want ErrInvalidID", id, err)
		}
	}
}

func TestErrorMatching(t *testing.T) {
	err := fmt.Errorf("snapshot: %w", checkpoints.Errorf(checkpoints.CodeStaleHead, "thread %q moved", "t"))
	if !errors.Is(err, checkpoints.ErrStaleHead) {
		t.Fatalf("errors.Is(%v, ErrStaleHead) = false", err)
	}
	if errors.Is(err, checkpoints.ErrWriterLost) {
		t.Fatalf("errors.Is(%v, ErrWriterLost) = true", err)
	}
	var ce *checkpoints.Error
	if !errors.As(err, &ce) || ce.Code != checkpoints.CodeStaleHead {
		t.Fatalf("errors.As = %v, want code %s", ce, checkpoints.CodeStaleHead)
	}
	if got, want := ce.Error(), `SANDBOX_SNAPSHOT_STALE_HEAD: thread "t" moved`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

// FuzzValidateEntries checks that whatever ValidateEntries accepts stays
// inside the root: no absolute path, no ".." element, and no entry below a
// non-directory.
func FuzzValidateEntries(f *testing.F) {
	f.Add("a", "a/b", "file", "dir")
	f.Add("../x", "y", "file", "file")
	f.Add("l", "l/x", "symlink", "file")
	f.Fuzz(func(t *testing.T, p1, p2, k1, k2 string) {
		mk := func(p, k string) checkpoints.Entry {
			e := checkpoints.Entry{Path: p, Kind: checkpoints.Kind(k)}
			switch e.Kind {
			case checkpoints.KindFile:
				e.BlobKey = "k"
			case checkpoints.KindSymlink:
				e.Target = "t"
			}
			return e
		}
		es := []checkpoints.Entry{mk(p1, k1), mk(p2, k2)}
		if err := checkpoints.ValidateEntries(es); err != nil {
			if !errors.Is(err, checkpoints.ErrInvalidEntry) {
				t.Fatalf("error %v does not wrap ErrInvalidEntry", err)
			}
			return
		}
		for _, e := range es {
			if path.IsAbs(e.Path) || e.Path != path.Clean(e.Path) || e.Path == ".." || strings.HasPrefix(e.Path, "../") {
				t.Fatalf("accepted %q", e.Path)
			}
		}
		if p1 != p2 && strings.HasPrefix(p2, p1+"/") && k1 != string(checkpoints.KindDir) {
			t.Fatalf("accepted %q below %s %q", p2, k1, p1)
		}
	})
}

func TestValidateEntriesMessages(t *testing.T) {
	file := checkpoints.Entry{Path: "a", Kind: checkpoints.KindFile, BlobKey: "sha256-x"}
	with := func(f func(e *checkpoints.Entry)) []checkpoints.Entry {
		e := file
		f(&e)
		return []checkpoints.Entry{e}
	}
	tests := []struct {
		name    string
		entries []checkpoints.Entry
		want    string // the message; "" for valid
	}{
		{"valid file", []checkpoints.Entry{file}, ""},
		{"bad path", with(func(e *checkpoints.Entry) { e.Path = "/abs" }), "files[0]: "},
		{"duplicate", []checkpoints.Entry{file, file}, `files[1]: duplicate path "a"`},
		{"mode", with(func(e *checkpoints.Entry) { e.Mode = 010000 }), `files[0] "a": mode 10000 has bits outside 07777`},
		{"size", with(func(e *checkpoints.Entry) { e.Size = -1 }), `files[0] "a": negative size -1`},
		{"owner", with(func(e *checkpoints.Entry) { e.GID = -1 }), `files[0] "a": negative owner`},
		{"file without blob", with(func(e *checkpoints.Entry) { e.BlobKey = "" }), `files[0] "a": `},
		{"file with target", with(func(e *checkpoints.Entry) { e.Target = "b" }), `files[0] "a": a file has no target or opaque flag`},
		{"dir with blob", with(func(e *checkpoints.Entry) { e.Kind = checkpoints.KindDir }), `files[0] "a": a dir has no blob, size or target`},
		{"symlink without target", with(func(e *checkpoints.Entry) { e.Kind, e.BlobKey = checkpoints.KindSymlink, "" }),
			`files[0] "a": symlink target must be non-empty UTF-8 without NUL`},
		{"symlink with blob", with(func(e *checkpoints.Entry) { e.Kind, e.Target = checkpoints.KindSymlink, "b" }),
			`files[0] "a": a symlink has no blob or opaque flag`},
		{"whiteout with blob", with(func(e *checkpoints.Entry) { e.Kind = checkpoints.KindWhiteout }),
			`files[0] "a": a whiteout has no blob, size, target or opaque flag`},
		{"sparse file", with(func(e *checkpoints.Entry) {
			e.Size, e.Holes = 100, []checkpoints.Extent{{Offset: 0, Length: 10}, {Offset: 20, Length: 80}}
		}), ""},
		{"empty hole", with(func(e *checkpoints.Entry) { e.Size, e.Holes = 100, []checkpoints.Extent{{Offset: 5, Length: 0}} }),
			`files[0] "a": hole 0 [5, +0) is empty or negative`},
		{"negative hole", with(func(e *checkpoints.Entry) { e.Size, e.Holes = 100, []checkpoints.Extent{{Offset: -1, Length: 5}} }),
			`files[0] "a": hole 0 [-1, +5) is empty or negative`},
		{"touching holes", with(func(e *checkpoints.Entry) {
			e.Size, e.Holes = 100, []checkpoints.Extent{{Offset: 0, Length: 10}, {Offset: 10, Length: 5}}
		}), `files[0] "a": hole 1 at 10 does not follow the previous one, which ends at 10`},
		{"hole past size", with(func(e *checkpoints.Entry) { e.Size, e.Holes = 100, []checkpoints.Extent{{Offset: 90, Length: 11}} }),
			`files[0] "a": hole 0 [90, +11) passes the size 100`},
		{"hole overflowing", with(func(e *checkpoints.Entry) {
			e.Size, e.Holes = 100, []checkpoints.Extent{{Offset: 50, Length: 1<<63 - 1}}
		}), `files[0] "a": hole 0 [50, +9223372036854775807) passes the size 100`},
		{"too many holes", with(func(e *checkpoints.Entry) {
			e.Size = 1 << 40
			for i := range checkpoints.MaxHoles + 1 {
				e.Holes = append(e.Holes, checkpoints.Extent{Offset: int64(i) * 2, Length: 1})
			}
		}), `files[0] "a": 4097 holes, more than 4096`},
		{"dir with holes", with(func(e *checkpoints.Entry) {
			e.Kind, e.BlobKey, e.Holes = checkpoints.KindDir, "", []checkpoints.Extent{{Offset: 0, Length: 1}}
		}), `files[0] "a": only a file has holes`},
		{"unknown kind", with(func(e *checkpoints.Entry) { e.Kind = "fifo" }), `files[0] "a": unknown kind "fifo"`},
		{"below a file", []checkpoints.Entry{file, {Path: "a/b", Kind: checkpoints.KindDir}}, `files[1] "a/b": lies below "a", a file`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkpoints.ValidateEntries(tt.entries)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("ValidateEntries = %v, want nil", err)
				}
				return
			}
			var ce *checkpoints.Error
			if !errors.As(err, &ce) || ce.Code != checkpoints.CodeInvalidEntry || !strings.HasPrefix(ce.Message, tt.want) {
				t.Fatalf("ValidateEntries = %v, want CodeInvalidEntry with a message starting %q", err, tt.want)
			}
		})
	}
}
