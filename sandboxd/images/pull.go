package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
)

// dockerHub is the registry name go-containerregistry gives Docker Hub.
const dockerHub = name.DefaultRegistry

// pullTimeout bounds one shared pull (it outlives the callers that wait).
const pullTimeout = time.Hour

// parse parses ref, in plain HTTP for the registries named insecure.
func (s *Store) parse(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, &Error{Image: ref, Kind: ErrInvalidReference, Err: err}
	}
	if s.insecure[r.Context().RegistryStr()] {
		return name.ParseReference(ref, name.Insecure)
	}
	return r, nil
}

// Pull fetches ref from its registry (for Docker Hub, the mirrors first) with
// auth, or else the keychain's credentials, unpacks the layers the store
// lacks and records the image. Concurrent pulls of one reference are one
// pull; the pull goes on (bounded by an hour and Close) when ctx, which only
// bounds the wait, ends. Errors are *Error wrapping ErrNotFound,
// ErrUnauthorized, ErrPullFailed or ErrInvalidReference.
func (s *Store) Pull(ctx context.Context, ref string, auth *Auth) (*Image, error) {
	r, err := s.parse(ref)
	if err != nil {
		return nil, err
	}
	key := r.Name()
	if auth != nil {
		// Credentials of one caller are never used for another's wait.
		sum := sha256.Sum256([]byte(auth.Username + "\x00" + auth.Password))
		key += "\x00" + hex.EncodeToString(sum[:8])
	}
	ch := s.pulls.DoChan(key, func() (any, error) {
		s.wg.Add(1)
		defer s.wg.Done()
		pctx, cancel := context.WithTimeout(s.base, pullTimeout)
		defer cancel()
		return s.pull(pctx, ref, r, auth)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		im := *res.Val.(*Image)
		return &im, nil
	case <-ctx.Done():
		return nil, &Error{Image: ref, Kind: ErrPullFailed, Err: ctx.Err()}
	}
}

func (s *Store) pull(ctx context.Context, ref string, r name.Reference, auth *Auth) (*Image, error) {
	t0 := time.Now()
	s.log.Info("sandboxd: pulling image", "image", r.Name())
	im, err := s.fetchAndUnpack(ctx, ref, r, auth)
	if s.cfg.Pulled != nil {
		s.cfg.Pulled(time.Since(t0), err)
	}
	if err != nil {
		return nil, err
	}
	s.nPulls.Add(1)
	s.log.Info("sandboxd: pulled image", "image", im.Name, "digest", im.Digest, "layers", len(im.Layers), "bytes", im.Size(), "took", time.Since(t0).Round(time.Millisecond))
	return im, nil
}

// fetchAndUnpack fetches r's image and unpacks it into the store.
func (s *Store) fetchAndUnpack(ctx context.Context, ref string, r name.Reference, auth *Auth) (*Image, error) {
	img, err := s.fetch(ctx, r, auth)
	if err != nil {
		return nil, &Error{Image: ref, Kind: classify(err), Err: err}
	}
	return s.unpack(ctx, ref, r, img)
}

// fetch resolves r's manifest for the store's platform: from each Docker Hub
// mirror in turn, then from r's own registry.
func (s *Store) fetch(ctx context.Context, r name.Reference, auth *Auth) (v1.Image, error) {
	opts := []remote.Option{
		remote.WithContext(ctx), remote.WithTransport(s.tr), remote.WithPlatform(*s.cfg.Platform),
		remote.WithUserAgent("alineo-sandboxd"),
		// A 4xx answer is the registry's last word: no retries on it.
		remote.WithRetryStatusCodes(http.StatusRequestTimeout, http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout),
	}
	if auth != nil {
		opts = append(opts, remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: auth.Username, Password: auth.Password})))
	} else {
		opts = append(opts, remote.WithAuthFromKeychain(s.cfg.Keychain))
	}
	if r.Context().RegistryStr() == dockerHub {
		for _, m := range s.cfg.Mirrors {
			mr, err := s.mirrorRef(m, r)
			if err != nil {
				s.log.Warn("sandboxd: registry mirror", "mirror", m, "err", err)
				continue
			}
			img, err := remote.Image(mr, opts...)
			if err == nil {
				s.log.Info("sandboxd: pulling from a mirror", "image", r.Name(), "mirror", m)
				return img, nil
			}
			s.log.Warn("sandboxd: registry mirror failed; trying the next source", "mirror", m, "image", r.Name(), "err", err)
		}
	}
	return remote.Image(r, opts...)
}

// mirrorRef is r (of Docker Hub) on mirror m.
func (s *Store) mirrorRef(m string, r name.Reference) (name.Reference, error) {
	host := m
	var nopts []name.Option
	switch {
	case strings.HasPrefix(m, "http://"):
		host = strings.TrimPrefix(m, "http://")
		if !s.insecure[strings.TrimSuffix(host, "/")] {
			return nil, fmt.Errorf("mirror %s is plain HTTP: name it with --insecure-registry too", m)
		}
		nopts = append(nopts, name.Insecure)
	case strings.HasPrefix(m, "https://"):
		host = strings.TrimPrefix(m, "https://")
	}
	host = strings.TrimSuffix(host, "/")
	repo := host + "/" + r.Context().RepositoryStr()
	switch t := r.(type) {
	case name.Tag:
		return name.NewTag(repo+":"+t.TagStr(), nopts...)
	case name.Digest:
		return name.NewDigest(repo+"@"+t.DigestStr(), nopts...)
	}
	return nil, fmt.Errorf("reference %s is neither a tag nor a digest", r)
}

// unpack gets every layer of img into the store and records the image.
func (s *Store) unpack(ctx context.Context, ref string, r name.Reference, img v1.Image) (*Image, error) {
	fail := func(err error) (*Image, error) {
		return nil, &Error{Image: ref, Kind: classify(err), Err: err}
	}
	digest, err := img.Digest()
	if err != nil {
		return fail(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fail(fmt.Errorf("image config: %w", err))
	}
	layers, err := img.Layers()
	if err != nil {
		return fail(err)
	}
	im := &Image{
		Name: r.Name(), Repository: r.Context().Name(), Digest: digest.String(), Pulled: time.Now().UTC(),
		Config: ImageConfig{Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir, User: cf.Config.User,
			Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd},
	}
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()
	budget := &imageBudget{max: s.cfg.MaxImageBytes}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.Jobs)
	im.Layers = make([]Layer, len(layers))
	for i, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return fail(err)
		}
		size, _ := l.Size()
		im.Layers[i] = Layer{Digest: d.String(), Size: size}
		g.Go(func() error {
			n, err := s.layer(gctx, l, d, size, budget)
			im.Layers[i].Unpacked = n
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fail(err)
	}
	b, err := json.MarshalIndent(im, "", "  ")
	if err != nil {
		return fail(err)
	}
	if err := writeFile(s.manifestPath(im.Digest), b); err != nil {
		return fail(fmt.Errorf("record the image: %w", err))
	}
	if err := writeFile(s.refPath(im.Name), []byte(im.Digest+"\n")); err != nil {
		return fail(fmt.Errorf("record the image: %w", err))
	}
	return im, nil
}

// sharedRetries bounds the tries of a layer whose shared unpack failed for
// a reason of the pull that ran it (its image bound, its cancellation).
const sharedRetries = 3

// layer makes sure layer l (digest d) is unpacked in the store: downloaded
// and unpacked once, whoever asks. It returns the layer's unpacked bytes,
// charged to budget: as they are read when this pull unpacks the layer,
// at once when the layer is in the store or another pull unpacked it.
func (s *Store) layer(ctx context.Context, l v1.Layer, d v1.Hash, size int64, budget *imageBudget) (int64, error) {
	dir := s.layerDir(d.String())
	if _, err := os.Stat(dir); err == nil {
		n := unpackedSize(dir)
		return n, budget.charge(n)
	}
	for try := 1; ; try++ {
		charged := false // by this pull's own unpack
		v, err, _ := s.layers.Do(d.String(), func() (any, error) {
			if _, err := os.Stat(dir); err == nil {
				return unpackedSize(dir), nil
			}
			charged = true
			return s.fetchLayer(ctx, l, d, size, dir, budget)
		})
		if err != nil {
			if !charged && try < sharedRetries && ctx.Err() == nil && notOurs(err, budget) {
				continue // the pull that ran it failed for its own reason
			}
			return 0, err
		}
		n := v.(int64)
		if !charged {
			return n, budget.charge(n)
		}
		return n, nil
	}
}

// notOurs reports whether err, of an unpack another pull ran, is that pull's
// own: its image bound or its cancellation, not the layer's fault.
func notOurs(err error, budget *imageBudget) bool {
	var le *LimitError
	if errors.As(err, &le) {
		return le.image != nil && le.image != budget
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// fetchLayer downloads layer l and unpacks it into a temporary directory,
// counting its unpacked bytes against the layer bound and budget as it goes;
// the blob's digest is checked as its last bytes are read, and only then is
// the directory moved to dir. On any failure, bound or digest, nothing of it
// stays. It returns the unpacked bytes.
func (s *Store) fetchLayer(ctx context.Context, l v1.Layer, d v1.Hash, size int64, dir string, budget *imageBudget) (int64, error) {
	if d.Algorithm != "sha256" {
		return 0, fmt.Errorf("layer %s: unsupported digest algorithm", d)
	}
	t0 := time.Now()
	s.log.Info("sandboxd: pulling layer", "digest", d.String(), "bytes", size)
	rc, err := l.Compressed()
	if err != nil {
		return 0, fmt.Errorf("layer %s: %w", d, err)
	}
	defer rc.Close()
	tmp, err := os.MkdirTemp(filepath.Join(s.cfg.Dir, "tmp"), d.Hex[:12]+"-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return 0, err
	}
	// The layers of a remote image check their blob as it is read: its
	// last read fails unless the bytes have digest d and the manifest's size
	// (go-containerregistry's verify.ReadCloser). Reading to the end is thus
	// the check; hashing the blob here as well took half a pull's CPU.
	pr := &progressReader{r: rc, total: size, digest: d.String(), s: s, last: t0}
	defer func() { s.nBytes.Add(pr.n) }()
	m := &meter{max: s.cfg.MaxLayerBytes, digest: d.String(), image: budget}
	if err := untar(ctx, pr, tmp, m); err != nil {
		return 0, fmt.Errorf("layer %s: %w", d, err)
	}
	if _, err := io.Copy(io.Discard, pr); err != nil { // padding and trailers count too
		return 0, fmt.Errorf("layer %s: %w", d, err)
	}
	if err := setUnpacked(tmp, m.n); err != nil {
		s.log.Warn("sandboxd: record a layer's unpacked size", "digest", d.String(), "err", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(dir); serr == nil {
			return m.n, nil // another process unpacked it first
		}
		return 0, fmt.Errorf("layer %s: %w", d, err)
	}
	s.nUnpacked.Add(1)
	el := time.Since(t0)
	s.log.Info("sandboxd: unpacked layer", "digest", d.String(), "bytes", pr.n, "unpacked", m.n, "took", el.Round(time.Millisecond),
		"MBps", fmt.Sprintf("%.1f", float64(pr.n)/1e6/max(el.Seconds(), 1e-6)))
	return m.n, nil
}

// untar decompresses r (gzip, zstd or none, by its magic) and unpacks it as
// a layer into dst, charging m every decompressed byte.
func untar(ctx context.Context, r io.Reader, dst string, m *meter) error {
	br := bufio.NewReaderSize(r, 1<<20)
	magic, _ := br.Peek(4)
	var dec io.Reader = br
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		gz, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gz.Close()
		dec = gz
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return err
		}
		defer zr.Close()
		dec = zr
	}
	dec = &meteredReader{r: dec, m: m}
	if err := extract(ctx, tar.NewReader(dec), dst, true, m); err != nil {
		return err
	}
	_, err := io.Copy(io.Discard, dec) // to the end of the stream, which checks its trailer
	return err
}

// progressReader counts what it reads and logs the progress of big layers
// every few seconds.
type progressReader struct {
	r      io.Reader
	n      int64
	total  int64
	digest string
	s      *Store
	last   time.Time
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if now := time.Now(); now.Sub(p.last) > 5*time.Second {
		p.last = now
		p.s.log.Info("sandboxd: layer progress", "digest", p.digest, "bytes", p.n, "of", p.total)
	}
	return n, err
}

// classify maps a pull error to ErrNotFound, ErrUnauthorized or ErrPullFailed.
func classify(err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		for _, d := range te.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				return ErrNotFound
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return ErrUnauthorized
			}
		}
		switch te.StatusCode {
		case http.StatusNotFound:
			return ErrNotFound
		case http.StatusUnauthorized, http.StatusForbidden:
			return ErrUnauthorized
		}
	}
	return ErrPullFailed
}

// schemeGuard refuses plain HTTP to every registry not named insecure.
type schemeGuard struct {
	next     http.RoundTripper
	insecure map[string]bool
}

// errPlainHTTP is the cause of a refused plain HTTP request.
var errPlainHTTP = errors.New("plain HTTP refused")

func (g *schemeGuard) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "http" && !g.insecure[r.URL.Host] {
		return nil, fmt.Errorf("%w to %s: a registry is spoken to in plain HTTP only when named with --insecure-registry %s", errPlainHTTP, r.URL.Host, r.URL.Host)
	}
	return g.next.RoundTrip(r)
}

// writeFile writes b to p atomically.
func writeFile(p string, b []byte) error {
	tmp := p + ".tmp" + fmt.Sprint(time.Now().UnixNano())
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
