package registrytest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/alineo-labs/alineo/internal/testutil"
)

// Registry is a registry served on a loopback port in plain HTTP.
type Registry struct {
	// Host is "127.0.0.1:PORT", what image references start with.
	Host string

	srv *httptest.Server

	mu       sync.Mutex
	blobGets map[string]int
	user     string
	pass     string
	corrupt  map[string]func([]byte) // alters a blob as it is served
}

// New starts a registry, closed when t ends.
func New(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{blobGets: map[string]int{}, corrupt: map[string]func([]byte){}}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.serve(h, w, req)
	}))
	t.Cleanup(r.srv.Close)
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

func (r *Registry) serve(h http.Handler, w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	user, pass := r.user, r.pass
	r.mu.Unlock()
	if user != "" && req.Header.Get("X-Registrytest-Push") == "" {
		u, p, ok := req.BasicAuth()
		if !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="registrytest"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
			return
		}
	}
	if i := strings.Index(req.URL.Path, "/blobs/sha256:"); i >= 0 && req.Method == http.MethodGet {
		d := req.URL.Path[i+len("/blobs/"):]
		r.mu.Lock()
		r.blobGets[d]++
		alter := r.corrupt[d]
		r.mu.Unlock()
		if alter != nil {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			b := rec.Body.Bytes()
			if len(b) > 0 {
				alter(b)
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(b)
			return
		}
	}
	h.ServeHTTP(w, req)
}

// Stop stops serving: the registry becomes unreachable.
func (r *Registry) Stop() { r.srv.Close() }

// RequireAuth makes every request but the tests' pushes need basic auth.
func (r *Registry) RequireAuth(user, pass string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.user, r.pass = user, pass
}

// Corrupt makes the registry flip a byte of blob digest when serving it.
func (r *Registry) Corrupt(digest string) {
	r.alter(digest, func(b []byte) { b[len(b)/2] ^= 0xff })
}

// Substitute makes the registry serve another blob for digest, a gzip one of
// the same size and contents once decompressed: its header's OS byte differs
// (which decompressors ignore), so only the blob's digest tells it apart.
func (r *Registry) Substitute(digest string) {
	r.alter(digest, func(b []byte) {
		if len(b) > 9 && b[0] == 0x1f && b[1] == 0x8b {
			b[9] ^= 0x01
		}
	})
}

func (r *Registry) alter(digest string, f func([]byte)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.corrupt[digest] = f
}

// BlobGets returns how often blob digest was fetched.
func (r *Registry) BlobGets(digest string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.blobGets[digest]
}

// Push pushes img as Host/repoTag and returns the reference.
func (r *Registry) Push(t testing.TB, repoTag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(r.Host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	tr := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		req = req.Clone(req.Context())
		req.Header.Set("X-Registrytest-Push", "1")
		return http.DefaultTransport.RoundTrip(req)
	})
	if err := remote.Write(ref, img, remote.WithTransport(tr)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref.String()
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// DockerConfig writes a Docker config file with credentials for the
// registry and returns its directory (for DOCKER_CONFIG).
func (r *Registry) DockerConfig(t testing.TB, user, pass string) string {
	t.Helper()
	dir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	cfg := `{"auths":{"` + r.Host + `":{"auth":"` + auth + `"}}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// File is an entry of a test layer.
type File struct {
	Name string
	Body string
	Mode int64         // default 0644 (0755 for directories)
	Type byte          // tar.TypeReg by default
	Link string        // of a symlink
	Data func() []byte // instead of Body
}

// Layer returns a gzip layer of files (compressed once, at BestSpeed).
func Layer(t testing.TB, files ...File) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Typeflag: f.Type, Mode: f.Mode, Linkname: f.Link}
		body := []byte(f.Body)
		if f.Data != nil {
			body = f.Data()
		}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	if _, err := zw.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	b := gz.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Image returns an image of layers (bottom first) with config cfg.
func Image(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// BlobURL is the URL of blob digest of repository repo.
func (r *Registry) BlobURL(repo, digest string) string {
	return r.srv.URL + "/v2/" + repo + "/blobs/" + digest
}

// Digest returns the digest of l.
func Digest(t testing.TB, l v1.Layer) string {
	t.Helper()
	d, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

var (
	appOnce sync.Once
	appBin  []byte
	appErr  error
)

// App returns the statically linked test program (see package app), built
// once per test binary.
func App(t testing.TB) []byte {
	t.Helper()
	appOnce.Do(func() {
		dir, err := os.MkdirTemp("", "registrytest-app-")
		if err != nil {
			appErr = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "app")
		appErr = testutil.BuildStatic(out, "github.com/alineo-labs/alineo/internal/registrytest/app")
		if appErr == nil {
			appBin, appErr = os.ReadFile(out)
		}
	})
	if appErr != nil {
		t.Fatalf("build the test program: %v", appErr)
	}
	return appBin
}

// StaticInit returns testutil.SandboxInit's binary (cmd/sandboxd-init, built
// statically) to serve as Config.InitBinary
// when the test binary itself is dynamically linked (a plain `go test` with
// cgo on), or "" when the test binary is static already (and serves as the
// init itself, as sandboxd's own executable does).
func StaticInit(t testing.TB, static func(string) (bool, error)) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("static sandbox init: %v", err)
	}
	ok, err := static(exe)
	if err != nil {
		t.Fatalf("static sandbox init: %v", err)
	}
	if ok {
		return ""
	}
	return testutil.SandboxInit(t)
}
