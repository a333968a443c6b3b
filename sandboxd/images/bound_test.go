package images_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/alineo-labs/alineo/internal/registrytest"
	"github.com/alineo-labs/alineo/sandboxd/images"
)

// openBounded opens a store in a new directory with cfg's bounds and returns
// it with its directory.
func openBounded(t *testing.T, reg *registrytest.Registry, cfg images.Config) (*images.Store, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("unpacking layers (whiteout devices, owners) needs root")
	}
	cfg.Dir = t.TempDir()
	cfg.Insecure = []string{reg.Host}
	st, err := images.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, cfg.Dir
}

// gz compresses b as one gzip member.
func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// tarHeader is the 512-byte ustar header of a regular file name of size bytes.
func tarHeader(t testing.TB, name string, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, Format: tar.FormatUSTAR}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()[:512] // before Close's flush, which checks the size
}

// bomb is a gzip layer of files entries of size bytes of 'x' each, made of
// concatenated gzip members (one per header, one of a MiB of 'x' repeated
// for the bodies): files×size bytes once decompressed, about a thousandth of that
// compressed. It is static (its diff id is its digest) so that building the
// image does not decompress it.
func bomb(t testing.TB, files int, size int64) v1.Layer {
	t.Helper()
	chunk := min(size, 1<<20) // size: a multiple of chunk, and of 512
	body := gz(t, bytes.Repeat([]byte{'x'}, int(chunk)))
	var b bytes.Buffer
	for i := range files {
		b.Write(gz(t, tarHeader(t, fmt.Sprintf("f%05d", i), size)))
		for range size / chunk {
			b.Write(body)
		}
	}
	b.Write(gz(t, make([]byte, 1024))) // the end of the archive
	return static.NewLayer(b.Bytes(), types.DockerLayer)
}

// paxRecord is one PAX extended header record, "LEN key=value\n".
func paxRecord(key, value string) string {
	rec := " " + key + "=" + value + "\n"
	n := len(rec) + 1
	for len(strconv.Itoa(n))+len(rec) != n {
		n++
	}
	return strconv.Itoa(n) + rec
}

// sparseLayer is a gzip layer holding one PAX (GNU 1.0) sparse file, name,
// of apparent size size with the single fragment data at offset off: a few
// kilobytes that claim size bytes. archive/tar writes no sparse files, so
// the PAX header is made here.
func sparseLayer(t testing.TB, name string, size, off int64, data []byte) v1.Layer {
	t.Helper()
	recs := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") +
		paxRecord("GNU.sparse.name", name) + paxRecord("GNU.sparse.realsize", strconv.FormatInt(size, 10))
	hdr := tarHeader(t, "PaxHeaders/"+name, int64(len(recs)))
	hdr[156] = 'x' // typeflag: PAX extended header; then fix the checksum
	copy(hdr[148:156], "        ")
	sum := 0
	for _, c := range hdr {
		sum += int(c)
	}
	copy(hdr[148:156], fmt.Sprintf("%06o\x00 ", sum))
	var b bytes.Buffer
	b.Write(hdr)
	b.WriteString(recs)
	b.Write(make([]byte, (512-len(recs)%512)%512))
	sparseMap := fmt.Sprintf("1\n%d\n%d\n", off, len(data))
	mapBlock := append([]byte(sparseMap), make([]byte, 512-len(sparseMap))...)
	var body bytes.Buffer
	tw := tar.NewWriter(&body)
	if err := tw.WriteHeader(&tar.Header{Name: "GNUSparseFile.0/" + name, Typeflag: tar.TypeReg, Mode: 0o644,
		Size: int64(len(mapBlock) + len(data)), Format: tar.FormatUSTAR}); err != nil {
		t.Fatal(err)
	}
	tw.Write(mapBlock)
	tw.Write(data)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b.Write(body.Bytes())
	return static.NewLayer(gz(t, b.Bytes()), types.DockerLayer)
}

// assertNothingKept fails if the store in dir holds any unpacked layer or
// any leftover of an unpack.
func assertNothingKept(t *testing.T, dir string, digests ...string) {
	t.Helper()
	for _, sub := range []string{"tmp"} {
		if ents, _ := os.ReadDir(filepath.Join(dir, sub)); len(ents) != 0 {
			t.Errorf("%s/ holds %d entries after the refused pull, want none (%s)", sub, len(ents), ents[0].Name())
		}
	}
	for _, d := range digests {
		if _, err := os.Stat(filepath.Join(dir, "layers", strings.Replace(d, ":", "-", 1))); err == nil {
			t.Errorf("layer %s is in the store after the refused pull", d)
		}
	}
	var used int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil {
			used += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	if used > 1<<20 {
		t.Errorf("the store takes %d bytes on disk after the refused pull, want under 1 MiB", used)
	}
}

// TestPullRefusesGzipBomb: a layer of about 1.3 MiB that decompresses to 1
// GiB of files is refused once it passes the layer bound, with a typed error,
// and nothing of it stays. So is one whose single file claims 1 GiB. (Before,
// the whole GiB was unpacked into the shared layer store.)
func TestPullRefusesGzipBomb(t *testing.T) {
	const bound = 64 << 20
	for _, c := range []struct {
		name  string
		layer func(testing.TB) v1.Layer
	}{
		{"many files", func(t testing.TB) v1.Layer { return bomb(t, 1024, 1<<20) }},
		{"one file", func(t testing.TB) v1.Layer { return bomb(t, 1, 1<<30) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := registrytest.New(t)
			l := c.layer(t)
			ref := reg.Push(t, "test/bomb:1", registrytest.Image(t, v1.Config{}, l))
			st, dir := openBounded(t, reg, images.Config{MaxLayerBytes: bound})
			_, err := st.Pull(context.Background(), ref, nil)
			var le *images.LimitError
			if !errors.As(err, &le) || !errors.Is(err, images.ErrTooLarge) || !errors.Is(err, images.ErrPullFailed) {
				t.Fatalf("Pull of a gzip bomb: %v, want ErrPullFailed with a *LimitError (ErrTooLarge)", err)
			}
			if got, want := le.Scope, "layer"; got != want || le.Limit != bound || le.Digest != registrytest.Digest(t, l) {
				t.Errorf("LimitError = %+v, want scope %s, limit %d, digest %s", le, want, bound, registrytest.Digest(t, l))
			}
			assertNothingKept(t, dir, registrytest.Digest(t, l))
			if _, err := st.Lookup(ref); !errors.Is(err, images.ErrNotFound) {
				t.Errorf("Lookup after a refused pull: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestPullImageBound: layers each within the layer bound whose sum passes the
// image bound are refused; within both, the image's record counts each
// layer's unpacked bytes.
func TestPullImageBound(t *testing.T) {
	reg := registrytest.New(t)
	var ls []v1.Layer
	for i := range 3 {
		ls = append(ls, bomb(t, 4+i, 4<<20)) // 16, 20 and 24 MiB
	}
	ref := reg.Push(t, "test/big:1", registrytest.Image(t, v1.Config{}, ls...))
	st, _ := openBounded(t, reg, images.Config{MaxLayerBytes: 32 << 20, MaxImageBytes: 48 << 20})
	_, err := st.Pull(context.Background(), ref, nil)
	var le *images.LimitError
	if !errors.As(err, &le) || le.Scope != "image" || le.Limit != 48<<20 {
		t.Fatalf("Pull of a 60 MiB image under a 48 MiB bound: %v, want a *LimitError of scope image", err)
	}

	st2, _ := openBounded(t, reg, images.Config{MaxLayerBytes: 32 << 20, MaxImageBytes: 64 << 20})
	im, err := st2.Pull(context.Background(), ref, nil)
	if err != nil {
		t.Fatalf("Pull within the bounds: %v", err)
	}
	for i, l := range im.Layers {
		want := int64(4+i)*(4<<20+512) + 1024
		if l.Unpacked != want {
			t.Errorf("layer %d: Unpacked = %d, want %d", i, l.Unpacked, want)
		}
	}
	// A second image of the same layers counts them from the store.
	ref2 := reg.Push(t, "test/big:2", registrytest.Image(t, v1.Config{Env: []string{"X=1"}}, ls...))
	im2, err := st2.Pull(context.Background(), ref2, nil)
	if err != nil {
		t.Fatalf("Pull of an image whose layers are stored: %v", err)
	}
	for i, l := range im2.Layers {
		if l.Unpacked != im.Layers[i].Unpacked {
			t.Errorf("second image's layer %d: Unpacked = %d, want %d as recorded", i, l.Unpacked, im.Layers[i].Unpacked)
		}
	}
}

// TestPullSparseEntry: a PAX sparse entry of a few kilobytes that claims 1 GiB
// unpacks to a sparse file: its apparent size and data are right, and it
// takes kilobytes on disk. (Before, its holes were written as 1 GiB of zeros.)
func TestPullSparseEntry(t *testing.T) {
	const size, off = 1 << 30, 512 << 20
	data := bytes.Repeat([]byte("sparse!\n"), 512)
	reg := registrytest.New(t)
	l := sparseLayer(t, "big.img", size, off, data)
	ref := reg.Push(t, "test/sparse:1", registrytest.Image(t, v1.Config{}, l))
	st, _ := openBounded(t, reg, images.Config{})
	im, err := st.Pull(context.Background(), ref, nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	p := filepath.Join(st.LayerDirs(im)[0], "big.img")
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fi.Size(), int64(size); got != want {
		t.Errorf("size = %d, want %d", got, want)
	}
	if got, limit := fi.Sys().(*syscall.Stat_t).Blocks*512, int64(1<<20); got > limit {
		t.Errorf("the sparse file takes %d bytes on disk, want at most %d", got, limit)
	}
	got := make([]byte, len(data)+2)
	if _, err := f.ReadAt(got, off-1); err != nil {
		t.Fatal(err)
	}
	if want := append(append([]byte{0}, data...), 0); !bytes.Equal(got, want) {
		t.Errorf("content around the fragment = %q..., want the fragment between zeros", got[:16])
	}
	if im.Layers[0].Unpacked < size {
		t.Errorf("Unpacked = %d, want at least the apparent size %d", im.Layers[0].Unpacked, size)
	}
}

// TestPullBadDigestLeavesNothing: a blob that is not the one the manifest
// names, big enough that it is still being unpacked when its digest fails,
// leaves nothing in the store: no layer, no temporary directory.
func TestPullBadDigestLeavesNothing(t *testing.T) {
	reg := registrytest.New(t)
	l := bomb(t, 16, 1<<20)
	ref := reg.Push(t, "test/bad:1", registrytest.Image(t, v1.Config{}, l))
	reg.Substitute(registrytest.Digest(t, l))
	st, dir := openBounded(t, reg, images.Config{})
	if _, err := st.Pull(context.Background(), ref, nil); !errors.Is(err, images.ErrPullFailed) || errors.Is(err, images.ErrTooLarge) {
		t.Fatalf("Pull of a substituted blob: %v, want ErrPullFailed (not ErrTooLarge)", err)
	}
	assertNothingKept(t, dir, registrytest.Digest(t, l))
}
