package images_test

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/alineo-labs/alineo/internal/registrytest"
	"github.com/alineo-labs/alineo/sandboxd/images"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

func openStore(t *testing.T, reg *registrytest.Registry) *images.Store {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("unpacking layers (whiteout devices, owners) needs root")
	}
	cfg := images.Config{Dir: t.TempDir()}
	if reg != nil {
		cfg.Insecure = []string{reg.Host}
	}
	st, err := images.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// twoLayers is a base layer and one that whites out a file and makes a
// directory opaque.
func twoLayers(t *testing.T) (v1.Layer, v1.Layer) {
	base := registrytest.Layer(t,
		registrytest.File{Name: "etc/", Type: tar.TypeDir},
		registrytest.File{Name: "etc/secret.txt", Body: "secret\n"},
		registrytest.File{Name: "etc/keep.txt", Body: "keep\n"},
		registrytest.File{Name: "opaque/", Type: tar.TypeDir},
		registrytest.File{Name: "opaque/old.txt", Body: "old\n"},
		registrytest.File{Name: "bin/", Type: tar.TypeDir},
		registrytest.File{Name: "bin/tool", Body: "#!tool\n", Mode: 0o4755},
		registrytest.File{Name: "bin/link", Type: tar.TypeSymlink, Link: "tool"},
		registrytest.File{Name: "bin/hard", Type: tar.TypeLink, Link: "bin/tool"},
	)
	top := registrytest.Layer(t,
		registrytest.File{Name: "etc/.wh.secret.txt"},
		registrytest.File{Name: "opaque/.wh..wh..opq"},
		registrytest.File{Name: "opaque/new.txt", Body: "new\n"},
	)
	return base, top
}

func TestPullUnpacksLayers(t *testing.T) {
	reg := registrytest.New(t)
	base, top := twoLayers(t)
	ref := reg.Push(t, "test/two:1", registrytest.Image(t, v1.Config{Env: []string{"A=1"}, WorkingDir: "/w", Entrypoint: []string{"/bin/tool"}, Cmd: []string{"x"}, User: "1000"}, base, top))
	st := openStore(t, reg)
	im, err := st.Pull(context.Background(), ref, nil)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if got, want := len(im.Layers), 2; got != want {
		t.Fatalf("layers = %d, want %d", got, want)
	}
	if c := im.Config; strings.Join(c.Env, ",") != "A=1" || c.WorkingDir != "/w" || strings.Join(c.Entrypoint, " ") != "/bin/tool" || strings.Join(c.Cmd, " ") != "x" || c.User != "1000" {
		t.Errorf("config = %+v", c)
	}
	dirs := st.LayerDirs(im)
	if b, err := os.ReadFile(filepath.Join(dirs[0], "etc/secret.txt")); err != nil || string(b) != "secret\n" {
		t.Errorf("base layer etc/secret.txt = %q, %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(dirs[0], "bin/tool"))
	if err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Errorf("bin/tool = %v, %v; want setuid kept", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(dirs[0], "bin/link")); err != nil || l != "tool" {
		t.Errorf("bin/link -> %q, %v", l, err)
	}
	var s1, s2 unix.Stat_t
	if unix.Stat(filepath.Join(dirs[0], "bin/tool"), &s1) != nil || unix.Stat(filepath.Join(dirs[0], "bin/hard"), &s2) != nil || s1.Ino != s2.Ino {
		t.Error("bin/hard is not a hard link of bin/tool")
	}
	var wh unix.Stat_t
	if err := unix.Lstat(filepath.Join(dirs[1], "etc/secret.txt"), &wh); err != nil || wh.Mode&unix.S_IFMT != unix.S_IFCHR || wh.Rdev != 0 {
		t.Errorf("etc/secret.txt in the top layer: mode %o rdev %d err %v; want a 0/0 character device (an overlay whiteout)", wh.Mode, wh.Rdev, err)
	}
	buf := make([]byte, 8)
	if n, err := unix.Lgetxattr(filepath.Join(dirs[1], "opaque"), "trusted.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("opaque/ in the top layer: trusted.overlay.opaque = %q, %v", buf[:n], err)
	}
	if _, err := os.Stat(filepath.Join(dirs[1], ".wh..wh..opq")); err == nil {
		t.Error("the opaque marker was unpacked as a file")
	}
	// The store has it now: Lookup, by name and by digest, and List.
	if got, err := st.Lookup(ref); err != nil || got.Digest != im.Digest {
		t.Errorf("Lookup = %+v, %v", got, err)
	}
	if _, err := st.LookupDigest(im.Digest); err != nil {
		t.Errorf("LookupDigest: %v", err)
	}
	if l, err := st.List(); err != nil || len(l) != 1 {
		t.Errorf("List = %v, %v", l, err)
	}
}

func TestConcurrentPullsOnce(t *testing.T) {
	reg := registrytest.New(t)
	base, top := twoLayers(t)
	ref := reg.Push(t, "test/two:1", registrytest.Image(t, v1.Config{}, base, top))
	// A second image sharing the base layer.
	other := reg.Push(t, "test/other:1", registrytest.Image(t, v1.Config{}, base, registrytest.Layer(t, registrytest.File{Name: "o", Body: "o"})))
	st := openStore(t, reg)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := ref
			if i%2 == 1 {
				r = other
			}
			_, err := st.Ensure(context.Background(), r, nil)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
	for _, l := range []v1.Layer{base, top} {
		if got, want := reg.BlobGets(registrytest.Digest(t, l)), 1; got != want {
			t.Errorf("layer %s fetched %d times, want %d", registrytest.Digest(t, l), got, want)
		}
	}
	if got, want := st.Stats().LayersUnpacked, int64(3); got != want {
		t.Errorf("layers unpacked = %d, want %d", got, want)
	}
}

// TestPullRefusesBadDigest: a blob that is not the one the manifest names is
// refused, whether it is damaged (a flipped byte, which its gzip checksum
// catches too) or another well-formed blob of the same size and contents
// (which only its digest tells apart).
func TestPullRefusesBadDigest(t *testing.T) {
	for _, c := range []struct {
		name  string
		alter func(*registrytest.Registry, string)
	}{{"corrupted", (*registrytest.Registry).Corrupt}, {"substituted", (*registrytest.Registry).Substitute}} {
		t.Run(c.name, func(t *testing.T) { testPullRefusesBadDigest(t, c.alter) })
	}
}

func testPullRefusesBadDigest(t *testing.T, alter func(*registrytest.Registry, string)) {
	reg := registrytest.New(t)
	base, top := twoLayers(t)
	ref := reg.Push(t, "test/bad:1", registrytest.Image(t, v1.Config{}, base, top))
	alter(reg, registrytest.Digest(t, top))
	st := openStore(t, reg)
	_, err := st.Pull(context.Background(), ref, nil)
	if !errors.Is(err, images.ErrPullFailed) || !strings.Contains(err.Error(), registrytest.Digest(t, top)) {
		t.Fatalf("Pull of a bad blob: %v, want ErrPullFailed naming the blob", err)
	}
	t.Log(err)
	if _, err := st.Lookup(ref); !errors.Is(err, images.ErrNotFound) {
		t.Errorf("Lookup after a refused pull: %v, want ErrNotFound", err)
	}
	ents, _ := os.ReadDir(filepath.Join(st.LayerDirs(&images.Image{Layers: []images.Layer{{Digest: registrytest.Digest(t, top)}}})[0], ".."))
	for _, e := range ents {
		if strings.Contains(e.Name(), strings.TrimPrefix(registrytest.Digest(t, top), "sha256:")) {
			t.Errorf("the corrupted layer is in the store: %s", e.Name())
		}
	}
}

func TestPullAuth(t *testing.T) {
	reg := registrytest.New(t)
	base, _ := twoLayers(t)
	ref := reg.Push(t, "private/img:1", registrytest.Image(t, v1.Config{}, base))
	reg.RequireAuth("alice", "s3cret")
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials
	st := openStore(t, reg)
	if _, err := st.Pull(context.Background(), ref, nil); !errors.Is(err, images.ErrUnauthorized) {
		t.Fatalf("Pull without credentials: %v, want ErrUnauthorized", err)
	}
	if _, err := st.Pull(context.Background(), ref, &images.Auth{Username: "alice", Password: "wrong"}); !errors.Is(err, images.ErrUnauthorized) {
		t.Fatalf("Pull with a wrong password: %v, want ErrUnauthorized", err)
	}
	if _, err := st.Pull(context.Background(), ref, &images.Auth{Username: "alice", Password: "s3cret"}); err != nil {
		t.Fatalf("Pull with credentials: %v", err)
	}
	t.Setenv("DOCKER_CONFIG", reg.DockerConfig(t, "alice", "s3cret"))
	if _, err := st.Pull(context.Background(), ref, nil); err != nil {
		t.Fatalf("Pull with the Docker config file's credentials: %v", err)
	}
}

func TestPullErrors(t *testing.T) {
	reg := registrytest.New(t)
	st := openStore(t, reg)
	ctx := context.Background()
	if _, err := st.Pull(ctx, reg.Host+"/no/such:image", nil); !errors.Is(err, images.ErrNotFound) || !strings.Contains(err.Error(), "no/such") {
		t.Errorf("unknown image: %v, want ErrNotFound naming it", err)
	}
	// A closed port, named insecure so that the error is the connection's.
	st2, err := images.Open(images.Config{Dir: t.TempDir(), Insecure: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if _, err := st2.Pull(ctx, "127.0.0.1:1/x:1", nil); !errors.Is(err, images.ErrPullFailed) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("unreachable registry: %v, want ErrPullFailed naming it", err)
	}
	// Plain HTTP only to the registries named insecure, loopback or not.
	st3, err := images.Open(images.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st3.Close()
	if _, err := st3.Pull(ctx, reg.Host+"/no/such:image", nil); !errors.Is(err, images.ErrPullFailed) || !strings.Contains(err.Error(), "insecure-registry") {
		t.Errorf("plain HTTP registry not named insecure: %v, want ErrPullFailed saying --insecure-registry", err)
	}
	if _, err := st.Pull(ctx, "Not A Reference", nil); !errors.Is(err, images.ErrInvalidReference) {
		t.Errorf("bad reference: %v, want ErrInvalidReference", err)
	}
}

func TestGC(t *testing.T) {
	reg := registrytest.New(t)
	base, top := twoLayers(t)
	own := registrytest.Layer(t, registrytest.File{Name: "b-only", Body: "b"})
	a := reg.Push(t, "test/a:1", registrytest.Image(t, v1.Config{}, base, top))
	b := reg.Push(t, "test/b:1", registrytest.Image(t, v1.Config{}, base, own))
	c := reg.Push(t, "test/c:1", registrytest.Image(t, v1.Config{}, registrytest.Layer(t, registrytest.File{Name: "c-only", Body: "c"})))
	st := openStore(t, reg)
	ctx := context.Background()
	var ims []*images.Image
	for _, r := range []string{a, b, c} {
		im, err := st.Pull(ctx, r, nil)
		if err != nil {
			t.Fatal(err)
		}
		ims = append(ims, im)
	}
	if err := st.Remove(b); err != nil {
		t.Fatal(err)
	}
	if err := st.Remove(c); err != nil {
		t.Fatal(err)
	}
	if err := st.Remove(c); !errors.Is(err, images.ErrNotFound) {
		t.Errorf("second Remove: %v, want ErrNotFound", err)
	}
	// c is removed but in use (a live sandbox): kept.
	gs, err := st.GC(ctx, []string{ims[2].Digest})
	if err != nil {
		t.Fatal(err)
	}
	if gs.Layers != 1 || gs.Manifests != 1 {
		t.Errorf("GC = %+v, want b's own layer and manifest removed", gs)
	}
	exists := func(im *images.Image, i int) bool {
		_, err := os.Stat(st.LayerDirs(im)[i])
		return err == nil
	}
	if !exists(ims[0], 0) || !exists(ims[0], 1) || exists(ims[1], 1) || !exists(ims[2], 0) {
		t.Errorf("after GC: a's layers %v %v (want kept), b's own %v (want removed), c's %v (want kept)",
			exists(ims[0], 0), exists(ims[0], 1), exists(ims[1], 1), exists(ims[2], 0))
	}
	if _, err := st.Lookup(a); err != nil {
		t.Errorf("a after GC: %v", err)
	}
	if gs, err := st.GC(ctx, nil); err != nil || gs.Layers != 1 {
		t.Errorf("GC without keep = %+v, %v; want c's layer removed", gs, err)
	}
}

func TestPullThroughMirror(t *testing.T) {
	mirror := registrytest.New(t)
	base, _ := twoLayers(t)
	// The mirror has Docker Hub's library/tiny:1; Docker Hub is never asked
	// (here it is out of reach anyway).
	mirror.Push(t, "library/tiny:1", registrytest.Image(t, v1.Config{}, base))
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	st, err := images.Open(images.Config{Dir: t.TempDir(), Mirrors: []string{"http://" + mirror.Host}, Insecure: []string{mirror.Host}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	im, err := st.Pull(context.Background(), "tiny:1", nil)
	if err != nil {
		t.Fatalf("Pull through the mirror: %v", err)
	}
	if got, want := im.Name, "index.docker.io/library/tiny:1"; got != want {
		t.Errorf("name = %q, want %q", got, want)
	}
	if got := mirror.BlobGets(registrytest.Digest(t, base)); got != 1 {
		t.Errorf("the mirror served the layer %d times, want 1", got)
	}
	if _, err := st.Lookup("tiny:1"); err != nil {
		t.Errorf("Lookup by the short name: %v", err)
	}
}
