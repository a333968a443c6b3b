package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sync/singleflight"
)

// Config configures a Store. Only Dir is required.
type Config struct {
	// Dir is the store's directory (sandboxd: DataDir/images/.oci).
	Dir string
	// Mirrors are registry mirrors tried, in order, before Docker Hub for
	// images of Docker Hub: "https://mirror.example", "mirror.example:5000"
	// (HTTPS) or "http://host:port" (plain HTTP, for a host also in Insecure).
	Mirrors []string
	// Insecure are the "HOST:PORT" registries spoken to in plain HTTP (with
	// an HTTPS attempt first, as Docker does). Every other registry is HTTPS
	// only, loopback ones included.
	Insecure []string
	// Keychain finds credentials for a registry when a pull gives none.
	// Default authn.DefaultKeychain: the Docker config file ($DOCKER_CONFIG or
	// ~/.docker/config.json) and its credential helpers.
	Keychain authn.Keychain
	// Transport carries every registry request. Default http.DefaultTransport.
	Transport http.RoundTripper
	// Platform is the platform chosen from an image index. Default
	// linux/runtime.GOARCH.
	Platform *v1.Platform
	// Jobs bounds the layers of one pull downloaded at once. Default 3.
	Jobs int
	// MaxLayerBytes bounds the unpacked bytes of a layer: what its stream
	// decompresses to, plus the holes of its sparse files (which are kept as
	// holes, so they take no disk). A pull of a bigger layer fails with an
	// *Error wrapping ErrTooLarge as soon as the bound is passed, and leaves
	// nothing of the layer. Default DefaultMaxLayerBytes; negative: no bound.
	MaxLayerBytes int64
	// MaxImageBytes bounds the unpacked bytes of an image: the sum of its
	// layers', those already in the store included. Past it the pull fails
	// as for MaxLayerBytes; layers that it unpacked whole stay in the store,
	// unreferenced, until GC. Default DefaultMaxImageBytes; negative: no bound.
	MaxImageBytes int64
	// Logger receives pull progress. Default: discard.
	Logger *slog.Logger
	// Pulled, when set, is called at the end of every pull from a registry
	// (one per shared pull, however many callers wait for it) with its
	// duration and its error (nil, or an *Error). It must not block.
	Pulled func(took time.Duration, err error)
}

// Auth is a registry credential given with a pull (the create request's
// image.auth).
type Auth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// ImageConfig is the part of an image's config a sandbox applies.
type ImageConfig struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// Layer is one layer of an image, by the digest of its blob.
type Layer struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	// Unpacked is its unpacked bytes (see Config.MaxLayerBytes); 0 in
	// records written before they were counted.
	Unpacked int64 `json:"unpacked,omitempty"`
}

// Image is a pulled image: a manifest whose layers are all in the store.
type Image struct {
	// Name is the reference it was pulled by, fully qualified
	// (index.docker.io/library/python:3.11).
	Name string `json:"name"`
	// Repository is the repository it came from (index.docker.io/library/python).
	Repository string `json:"repository"`
	// Digest is the manifest's digest (sha256:...).
	Digest string      `json:"digest"`
	Config ImageConfig `json:"config"`
	// Layers, bottom first.
	Layers []Layer   `json:"layers"`
	Pulled time.Time `json:"pulled"`
}

// Size is the compressed size of the image's layers.
func (im *Image) Size() int64 {
	var n int64
	for _, l := range im.Layers {
		n += l.Size
	}
	return n
}

// Stats counts the store's work since Open.
type Stats struct {
	Pulls          int64 // manifests fetched from a registry
	LayersUnpacked int64 // layers downloaded and unpacked
	// BytesDownloaded counts the compressed layer bytes read from
	// registries, those of layers whose download failed included.
	BytesDownloaded int64
}

// Store is a content-addressed image and layer store. Safe for concurrent
// use, and for use by several processes on one directory (every write is a
// rename of a complete file or directory); GC is not safe while another
// process pulls into the same directory.
type Store struct {
	cfg      Config
	log      *slog.Logger
	insecure map[string]bool
	tr       http.RoundTripper

	base   context.Context // cancelled by Close: ends shared pulls
	cancel context.CancelFunc
	wg     sync.WaitGroup

	pulls  singleflight.Group // by reference
	layers singleflight.Group // by digest
	// gcMu is held shared by each pull from its first layer to its record,
	// exclusively by GC: a layer unpacked but not yet referenced is never
	// collected.
	gcMu sync.RWMutex

	nPulls, nUnpacked, nBytes atomic.Int64
}

// Open creates the store's directories in cfg.Dir and removes layers a
// crashed pull left half unpacked.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("open image store: no directory")
	}
	if cfg.Keychain == nil {
		cfg.Keychain = authn.DefaultKeychain
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport
	}
	if cfg.Platform == nil {
		cfg.Platform = &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	}
	if cfg.Jobs <= 0 {
		cfg.Jobs = 3
	}
	if cfg.MaxLayerBytes == 0 {
		cfg.MaxLayerBytes = DefaultMaxLayerBytes
	}
	if cfg.MaxImageBytes == 0 {
		cfg.MaxImageBytes = DefaultMaxImageBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// Layers keep their setuid files owned by host root: only root may
	// traverse to them (overlayfs reads lower layers as its mounter).
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("open image store: %w", err)
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("open image store: %w", err)
	}
	for _, d := range []string{"layers", "manifests", "refs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("open image store: %w", err)
		}
	}
	// Unpacks older than an hour are a dead process's (a live one renames
	// its layer within a pull).
	ents, _ := os.ReadDir(filepath.Join(cfg.Dir, "tmp"))
	for _, e := range ents {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Hour {
			_ = os.RemoveAll(filepath.Join(cfg.Dir, "tmp", e.Name()))
		}
	}
	s := &Store{cfg: cfg, log: cfg.Logger, insecure: map[string]bool{}}
	for _, h := range cfg.Insecure {
		s.insecure[h] = true
	}
	s.tr = &schemeGuard{next: cfg.Transport, insecure: s.insecure}
	s.base, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close cancels the pulls in flight and waits for them.
func (s *Store) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{Pulls: s.nPulls.Load(), LayersUnpacked: s.nUnpacked.Load(), BytesDownloaded: s.nBytes.Load()}
}

// LayerDirs returns the unpacked layers of im, bottom first.
func (s *Store) LayerDirs(im *Image) []string {
	out := make([]string, len(im.Layers))
	for i, l := range im.Layers {
		out[i] = s.layerDir(l.Digest)
	}
	return out
}

func (s *Store) layerDir(digest string) string {
	return filepath.Join(s.cfg.Dir, "layers", strings.Replace(digest, ":", "-", 1))
}

func (s *Store) manifestPath(digest string) string {
	_, hex, _ := strings.Cut(digest, ":")
	return filepath.Join(s.cfg.Dir, "manifests", hex+".json")
}

func (s *Store) refPath(name string) string {
	return filepath.Join(s.cfg.Dir, "refs", url.PathEscape(name))
}

// complete reports whether every layer of im is unpacked.
func (s *Store) complete(im *Image) bool {
	for _, l := range im.Layers {
		if _, err := os.Stat(s.layerDir(l.Digest)); err != nil {
			return false
		}
	}
	return true
}

// Lookup returns the image ref names in the store, without contacting any
// registry. It returns an *Error wrapping ErrNotFound if the store does not
// have it (or not all of its layers).
func (s *Store) Lookup(ref string) (*Image, error) {
	r, err := s.parse(ref)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(s.refPath(r.Name()))
	if err != nil {
		return nil, &Error{Image: ref, Kind: ErrNotFound, Err: errors.New("not in the image store")}
	}
	im, err := s.LookupDigest(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, &Error{Image: ref, Kind: ErrNotFound, Err: err}
	}
	im.Name = r.Name()
	return im, nil
}

// LookupDigest returns the stored image whose manifest digest is digest; an
// *Error wrapping ErrNotFound if the store lacks it or one of its layers.
func (s *Store) LookupDigest(digest string) (*Image, error) {
	b, err := os.ReadFile(s.manifestPath(digest))
	if err != nil {
		return nil, &Error{Image: digest, Kind: ErrNotFound, Err: errors.New("not in the image store")}
	}
	var im Image
	if err := json.Unmarshal(b, &im); err != nil {
		return nil, &Error{Image: digest, Kind: ErrNotFound, Err: fmt.Errorf("read its record: %w", err)}
	}
	if !s.complete(&im) {
		return nil, &Error{Image: digest, Kind: ErrNotFound, Err: errors.New("some of its layers are gone from the store")}
	}
	return &im, nil
}

// Ensure returns the image ref names: from the store if it has it (the
// IfNotPresent pull policy), else pulled. Errors as Pull.
func (s *Store) Ensure(ctx context.Context, ref string, auth *Auth) (*Image, error) {
	if im, err := s.Lookup(ref); err == nil {
		return im, nil
	}
	return s.Pull(ctx, ref, auth)
}

// List returns the images the store's references name, sorted by name.
func (s *Store) List() ([]*Image, error) {
	ents, err := os.ReadDir(filepath.Join(s.cfg.Dir, "refs"))
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	var out []*Image
	for _, e := range ents {
		name, err := url.PathUnescape(e.Name())
		if err != nil {
			continue
		}
		im, err := s.Lookup(name)
		if err != nil {
			continue
		}
		out = append(out, im)
	}
	slices.SortFunc(out, func(a, b *Image) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Remove forgets the reference ref; its layers stay until GC. It returns an
// *Error wrapping ErrNotFound if the store has no such reference.
func (s *Store) Remove(ref string) error {
	r, err := s.parse(ref)
	if err != nil {
		return err
	}
	if err := os.Remove(s.refPath(r.Name())); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &Error{Image: ref, Kind: ErrNotFound, Err: errors.New("not in the image store")}
		}
		return fmt.Errorf("remove image %s: %w", ref, err)
	}
	return nil
}

// GCStats says what a GC removed.
type GCStats struct {
	Manifests int
	Layers    int
	Bytes     int64 // of the removed layers, on disk
}

// GC removes the image records no reference names and whose digest is not
// in keep (images of live sandboxes), then every layer no remaining record
// references. Not safe while another process pulls into the store.
func (s *Store) GC(ctx context.Context, keep []string) (GCStats, error) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	var st GCStats
	named := map[string]bool{}
	for _, d := range keep {
		named[d] = true
	}
	refs, err := os.ReadDir(filepath.Join(s.cfg.Dir, "refs"))
	if err != nil {
		return st, fmt.Errorf("image gc: %w", err)
	}
	for _, e := range refs {
		if b, err := os.ReadFile(filepath.Join(s.cfg.Dir, "refs", e.Name())); err == nil {
			named[strings.TrimSpace(string(b))] = true
		}
	}
	used := map[string]bool{}
	mans, err := os.ReadDir(filepath.Join(s.cfg.Dir, "manifests"))
	if err != nil {
		return st, fmt.Errorf("image gc: %w", err)
	}
	for _, e := range mans {
		p := filepath.Join(s.cfg.Dir, "manifests", e.Name())
		b, err := os.ReadFile(p)
		var im Image
		if err == nil {
			err = json.Unmarshal(b, &im)
		}
		if err != nil || !named[im.Digest] {
			if err := os.Remove(p); err != nil {
				return st, fmt.Errorf("image gc: %w", err)
			}
			st.Manifests++
			continue
		}
		for _, l := range im.Layers {
			used[strings.Replace(l.Digest, ":", "-", 1)] = true
		}
	}
	layers, err := os.ReadDir(filepath.Join(s.cfg.Dir, "layers"))
	if err != nil {
		return st, fmt.Errorf("image gc: %w", err)
	}
	for _, e := range layers {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if used[e.Name()] {
			continue
		}
		p := filepath.Join(s.cfg.Dir, "layers", e.Name())
		n := diskUsage(p)
		// Rename first, so that no reader ever sees half a layer.
		gone := filepath.Join(s.cfg.Dir, "tmp", "gc-"+e.Name())
		if err := os.Rename(p, gone); err != nil {
			return st, fmt.Errorf("image gc: %w", err)
		}
		if err := os.RemoveAll(gone); err != nil {
			return st, fmt.Errorf("image gc: %w", err)
		}
		st.Layers++
		st.Bytes += n
	}
	s.log.Info("sandboxd: image gc", "manifests", st.Manifests, "layers", st.Layers, "bytes", st.Bytes)
	return st, nil
}

func diskUsage(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// Normalize returns the fully qualified form of ref
// (index.docker.io/library/python:3.11), or an *Error wrapping
// ErrInvalidReference.
func (s *Store) Normalize(ref string) (string, error) {
	r, err := s.parse(ref)
	if err != nil {
		return "", err
	}
	return r.Name(), nil
}
