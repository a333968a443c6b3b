package images

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzExtract feeds arbitrary tar streams to the layer extraction: it may
// refuse them, but never writes outside its root.
func FuzzExtract(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("whiteouts and owners need root")
	}
	for _, hs := range [][]tar.Header{
		{{Name: "a/", Typeflag: tar.TypeDir}, {Name: "a/b", Typeflag: tar.TypeReg}},
		{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../out"}, {Name: "l/x", Typeflag: tar.TypeReg}},
		{{Name: "../x", Typeflag: tar.TypeReg}},
		{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../out/f"}},
		{{Name: "d/.wh..wh..opq"}, {Name: "d/.wh.x"}, {Name: ".wh.."}},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range hs {
			h.Mode = 0o644
			_ = tw.WriteHeader(&h)
		}
		_ = tw.Close()
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		base := t.TempDir()
		root, out := filepath.Join(base, "root"), filepath.Join(base, "out")
		for _, d := range []string{root, out} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		_ = extract(context.Background(), tar.NewReader(bytes.NewReader(b)), root, true, &meter{max: 64 << 20})
		for _, d := range []string{base, out} {
			ents, err := os.ReadDir(d)
			if err != nil {
				t.Fatal(err)
			}
			if d == base && len(ents) != 2 || d == out && len(ents) != 0 {
				t.Fatalf("extract wrote outside its root: %s holds %v", d, ents)
			}
		}
	})
}
