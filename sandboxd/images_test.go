package sandboxd_test

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// tinyRootfs builds a root filesystem with only sh and sleep from the host and
// the shared libraries they load, plus /marker.txt.
func tinyRootfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := testenv.Rootfs(root, "sh", "sleep"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "marker.txt"), []byte("tiny image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// tarDir writes dir as a tarball.
func tarDir(t *testing.T, dir string, extra ...*tar.Header) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rootfs.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if d.Type()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h.Name = rel
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		}
		return nil
	})
	for _, h := range extra {
		if err == nil {
			err = tw.WriteHeader(h)
		}
	}
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func TestImages(t *testing.T) {
	dir := tinyRootfs(t)
	tarball := tarDir(t, dir)
	data := t.TempDir()
	if err := sandboxd.ImportImage(context.Background(), data, "imported:1", tarball); err != nil {
		t.Fatalf("ImportImage: %v", err)
	}
	_, base := startServer(t, sandboxd.Config{DataDir: data, Images: map[string]string{"tiny-dir": dir, "tiny-tar": tarball}})
	for _, image := range []string{"tiny-dir", "tiny-tar", "imported:1"} {
		t.Run(image, func(t *testing.T) {
			id := create(t, base, map[string]any{
				"image":      map[string]any{"uri": image},
				"entrypoint": []string{"/bin/sleep", "1000"},
			})
			waitState(t, base, id, sandboxd.StateRunning)
			u, tok := execdEndpoint(t, base, id, false)
			lines, code := run(t, u, tok, `read l < /marker.txt; echo "$l"; test -e /usr/bin/env && echo host-visible; echo x > /root/w; read w < /root/w; echo $w`)
			if code != 0 || strings.Join(lines, "|") != "tiny image|x" {
				t.Errorf("in image %s: %q exit %d, want the marker, no host /usr, a writable root", image, lines, code)
			}
		})
	}
	// The image directory itself is never written (writes land in the upper layer).
	if _, err := os.Stat(filepath.Join(dir, "root", "w")); err == nil {
		t.Error("a sandbox wrote into the image directory")
	}
	// Any other name is an image to pull, never the host's system: this one
	// does not exist (Docker Hub answers 401 for it, or is out of reach). A
	// name without a registry host gets the hint (issue 40 item 7): "host"
	// is the host's system, --registry-mirror a mirror of Docker Hub.
	status, e := imageRefused(t, base, map[string]any{"image": map[string]any{"uri": "definitely/not-an-image:nope"}, "entrypoint": []string{"x"}})
	switch {
	case status == http.StatusNotFound && e.Code == sandboxd.ReasonImageNotFound:
	case status == http.StatusFailedDependency && (e.Code == sandboxd.ReasonImageUnauthorized || e.Code == sandboxd.ReasonImagePullFailed):
	default:
		t.Errorf("unknown image: %d %s: %s; want 404 or 424 and an IMAGE_ code", status, e.Code, e.Message)
	}
	for _, want := range []string{"definitely/not-an-image:nope", `the image "host" is this host's own system`, "--registry-mirror"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("unknown image: message %q lacks %q", e.Message, want)
		}
	}
}

func TestImportImageRejectsEscapes(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok"), []byte("ok"), 0o644)
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "evil")); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*tar.Header{
		{Name: "evil/escape", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "a/../../escape", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "link", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"},
	} {
		tarball := tarDir(t, dir, h)
		data := t.TempDir()
		err := sandboxd.ImportImage(context.Background(), data, "bad", tarball)
		if !errors.Is(err, sandboxd.ErrImage) || !strings.Contains(err.Error(), "escape") && !strings.Contains(err.Error(), "symlink") {
			t.Errorf("import with %q: err = %v, want ErrImage", h.Name, err)
		}
		if _, err := os.Stat(filepath.Join(data, "images", "bad")); err == nil {
			t.Errorf("import with %q left an image behind", h.Name)
		}
		if _, err := os.Stat(filepath.Join(data, "escape")); err == nil {
			t.Errorf("import with %q wrote outside the image", h.Name)
		}
	}
	if err := sandboxd.ImportImage(context.Background(), t.TempDir(), "x", filepath.Join(dir, "missing.tar")); !errors.Is(err, sandboxd.ErrImage) {
		t.Errorf("missing tarball: err = %v, want ErrImage", err)
	}
}

func TestStartRejectsMissingImage(t *testing.T) {
	s, err := sandboxd.Open(context.Background(), sandboxd.Config{Images: map[string]string{"gone": filepath.Join(t.TempDir(), "missing")}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.Start(context.Background()); !errors.Is(err, sandboxd.ErrImage) {
		t.Fatalf("Start with a missing image: %v, want ErrImage", err)
	}
}
