package sandboxd

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/alineo-labs/alineo/sandboxd/images"
	"github.com/alineo-labs/alineo/sandboxd/internal/runtime"
)

// HostImage is the one image name that means the host's own system
// directories (/usr, /etc, /opt and the /bin, /sbin, /lib* links or
// directories, each a private overlay with the host directory read-only
// below), so that sandboxes work on a machine with no registry in reach.
// Every other name is an image: Config.Images, an imported one, or else
// pulled from its registry.
const HostImage = "host"

// imageResolver resolves image names to root filesystems: the host image,
// the configured and imported images, and the images of the store, pulled
// on first use.
type imageResolver struct {
	cfg     Config
	dataDir string
	log     *slog.Logger
	store   *images.Store

	importMu sync.Mutex // imports of Config.Images tarballs
	hostOnce sync.Once
	host     runtime.Rootfs
	hostErr  error
}

// imageDirName maps an image name to a directory name under DataDir/images.
func imageDirName(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" || s == "." || s == ".." || strings.HasPrefix(s, ".") {
		s = "_" + s
	}
	return s
}

// resolveImage maps an image name to a root filesystem: the host image,
// Config.Images, an imported image, else the image from the store, pulled
// (with auth, if given) when the store lacks it. digest, when set, is the
// manifest digest a snapshot recorded: that exact image, pulled again by
// digest if its layers are gone. Errors of a pull are *images.Error.
func (ir *imageResolver) resolveImage(ctx context.Context, name, digest string, auth *images.Auth) (runtime.Rootfs, error) {
	if name == HostImage {
		return ir.hostRootfs()
	}
	if src, ok := ir.cfg.Images[name]; ok {
		st, err := os.Stat(src)
		if err != nil {
			return runtime.Rootfs{}, fmt.Errorf("%w: image %q: %w", ErrImage, name, err)
		}
		if st.IsDir() {
			return runtime.Rootfs{Lowers: []string{src}, Source: "dir " + src}, nil
		}
		dir := filepath.Join(ir.dataDir, "images", imageDirName(name))
		if _, err := os.Stat(dir); err != nil {
			ir.importMu.Lock()
			err = ImportImage(ctx, ir.dataDir, name, src)
			ir.importMu.Unlock()
			if err != nil {
				return runtime.Rootfs{}, err
			}
		}
		return runtime.Rootfs{Lowers: []string{dir}, Source: "tarball " + src}, nil
	}
	dir := filepath.Join(ir.dataDir, "images", imageDirName(name))
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return runtime.Rootfs{Lowers: []string{dir}, Source: "imported " + dir}, nil
	}
	var im *images.Image
	var err error
	if digest != "" {
		im, err = ir.imageByDigest(ctx, name, digest, auth)
	} else {
		im, err = ir.store.Ensure(ctx, name, auth)
	}
	if err != nil {
		return runtime.Rootfs{}, err
	}
	lowers := ir.store.LayerDirs(im)
	slices.Reverse(lowers) // overlayfs: the top layer first
	return runtime.Rootfs{Lowers: lowers, Image: im, Source: "image " + im.Name + "@" + im.Digest}, nil
}

// imageByDigest returns the image name@digest: from the store, else pulled
// again by digest from name's repository.
func (ir *imageResolver) imageByDigest(ctx context.Context, name, digest string, auth *images.Auth) (*images.Image, error) {
	if im, err := ir.store.LookupDigest(digest); err == nil {
		return im, nil
	}
	repo := name
	if i := strings.LastIndex(repo, "@"); i >= 0 {
		repo = repo[:i]
	} else if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	ir.log.Info("sandboxd: the layers of a snapshot's image are gone; pulling it again", "image", name, "digest", digest)
	im, err := ir.store.Pull(ctx, repo+"@"+digest, auth)
	if err != nil {
		var ie *images.Error
		if errors.As(err, &ie) {
			ie.Image = name + " (" + digest + ")"
		}
		return nil, err
	}
	return im, nil
}

// prepareImages checks every configured image and extracts the tarballs not
// extracted yet, so that a large image does not count against a sandbox's
// start timeout and a wrong path fails at start.
func (ir *imageResolver) prepareImages(ctx context.Context) error {
	for name, src := range ir.cfg.Images {
		st, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("%w: image %q: %w", ErrImage, name, err)
		}
		if st.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(ir.dataDir, "images", imageDirName(name))); err == nil {
			continue
		}
		ir.log.Info("sandboxd: extracting image", "name", name, "tarball", src)
		ir.importMu.Lock()
		err = ImportImage(ctx, ir.dataDir, name, src)
		ir.importMu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// hostRootfs builds (once) the skeleton lower layer of the host image: the
// mount points and the host's root-level symlinks (bin -> usr/bin and the
// like). The system directories themselves are overlaid by mountRoot.
func (ir *imageResolver) hostRootfs() (runtime.Rootfs, error) {
	ir.hostOnce.Do(func() {
		skel := filepath.Join(ir.dataDir, "images", ".host-skeleton")
		var dirs []string
		err := os.MkdirAll(skel, 0o755)
		for _, d := range []string{"usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt"} {
			if err != nil {
				break
			}
			st, lerr := os.Lstat("/" + d)
			if lerr != nil {
				continue
			}
			target := filepath.Join(skel, d)
			if st.Mode()&fs.ModeSymlink != 0 {
				link, rerr := os.Readlink("/" + d)
				if rerr != nil {
					continue
				}
				if cur, _ := os.Readlink(target); cur != link {
					_ = os.Remove(target)
					err = os.Symlink(link, target)
				}
				continue
			}
			if st.IsDir() {
				dirs = append(dirs, d)
				err = os.MkdirAll(target, 0o755)
			}
		}
		for _, d := range []string{"proc", "dev", "tmp", "root", "home", "var/tmp", "run", "mnt", "sys", "srv"} {
			if err != nil {
				break
			}
			err = os.MkdirAll(filepath.Join(skel, d), 0o755)
		}
		if err == nil {
			err = os.Chmod(filepath.Join(skel, "tmp"), 0o1777)
		}
		if err != nil {
			ir.hostErr = fmt.Errorf("%w: host fallback root: %w", ErrImage, err)
			return
		}
		ir.host = runtime.Rootfs{Lowers: []string{skel}, Host: true, HostDirs: dirs, Source: "host system directories (/" + strings.Join(dirs, ", /") + ") read-only"}
		if !ir.cfg.NoIsolation {
			// The sandbox's root owns what host root owns (an idmapped lower
			// layer): without the mask it could read /etc/shadow and keys.
			mask, err := runtime.BuildHostMask(filepath.Join(ir.dataDir, "images"), runtime.MaskedHostDirs)
			if err != nil {
				ir.hostErr = fmt.Errorf("%w: host fallback root: %w", ErrImage, err)
				return
			}
			ir.host.HostMask = mask
			ir.host.Source += ", files other users cannot read hidden"
		}
	})
	return ir.host, ir.hostErr
}

// ImportImage extracts the root filesystem tarball tarPath (optionally gzip
// compressed) into dataDir/images/<name>, so that sandboxes created with that
// image name use it. Entries that would escape the target (absolute or ".."
// paths, hard links out of it) are rejected; device nodes are skipped. An
// existing image of that name is replaced.
func ImportImage(ctx context.Context, dataDir, name, tarPath string) error {
	if name == "" {
		return fmt.Errorf("%w: empty image name", ErrImage)
	}
	f, err := os.Open(tarPath)
	if err != nil {
		return fmt.Errorf("%w: import %s: %w", ErrImage, name, err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(tarPath, ".gz") || strings.HasSuffix(tarPath, ".tgz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("%w: import %s: %w", ErrImage, name, err)
		}
		defer gz.Close()
		r = gz
	}
	imagesDir := filepath.Join(dataDir, "images")
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		return fmt.Errorf("%w: import %s: %w", ErrImage, name, err)
	}
	tmp, err := os.MkdirTemp(imagesDir, ".import-")
	if err != nil {
		return fmt.Errorf("%w: import %s: %w", ErrImage, name, err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("%w: import %s: %w", ErrImage, name, err)
	}
	if err := images.ExtractTar(ctx, tar.NewReader(r), tmp); err != nil {
		return fmt.Errorf("%w: import %s: %w", ErrImage, name, err)
	}
	dst := filepath.Join(imagesDir, imageDirName(name))
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("%w: import %s: %w", ErrImage, name, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("%w: import %s: %w", ErrImage, name, err)
	}
	return nil
}

// imageStoreDir is the image store's directory under DataDir/images (a name
// no imported image has: imageDirName never starts with a dot).
const imageStoreDir = ".oci"

// openImageStore opens the image store of the server on dataDir.
func openImageStore(dataDir string, cfg Config) (*images.Store, error) {
	st, err := images.Open(images.Config{
		Dir:     filepath.Join(dataDir, "images", imageStoreDir),
		Mirrors: cfg.RegistryMirrors, Insecure: cfg.InsecureRegistries, Logger: cfg.Logger,
		Pulled: cfg.Metrics.pulled,
	})
	if err != nil {
		return nil, fmt.Errorf("sandboxd: %w", err)
	}
	return st, nil
}

// localImage reports whether name is an image without a registry and
// without a config: the host image, one of Config.Images, an imported one.
func (ir *imageResolver) localImage(name string) bool {
	if name == HostImage {
		return true
	}
	if _, ok := ir.cfg.Images[name]; ok {
		return true
	}
	return dirExists(filepath.Join(ir.dataDir, "images", imageDirName(name)))
}

// checkImageName refuses, at create, an image name that is no reference,
// and a local image (which has no Entrypoint or Cmd) without an entrypoint.
func (ir *imageResolver) checkImageName(name string, hasEntrypoint bool) error {
	if ir.cfg.NoIsolation && name != HostImage {
		return invalid("INVALID_REQUEST", "image", "image %q: without isolation (NoIsolation) a sandbox runs on the host's own system, image %q only", name, HostImage)
	}
	if ir.localImage(name) {
		if !hasEntrypoint {
			return invalid("INVALID_REQUEST", "entrypoint", "entrypoint is required with image %q, which has no Entrypoint or Cmd of its own", name)
		}
		return nil
	}
	if _, err := ir.store.Normalize(name); err != nil {
		return invalid("INVALID_REQUEST", "image", "image %q is not an image reference (or %q, the host's directories): %v", name, HostImage, err)
	}
	return nil
}

// parseImageAuth decodes the create request's image.auth ({username,
// password}); nil without one.
func parseImageAuth(spec *ImageSpec) (*images.Auth, error) {
	if spec == nil {
		return nil, nil
	}
	raw := bytes.TrimSpace(spec.Auth)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var a images.Auth
	if err := dec.Decode(&a); err != nil || dec.More() {
		return nil, invalid("INVALID_REQUEST", "image.auth", "image.auth must be {username, password} (%v)", err)
	}
	if a.Username == "" && a.Password == "" {
		return nil, nil
	}
	return &a, nil
}

// sandboxImage resolves the image of the sandbox being started (pulling
// it, within PullTimeout) and settles its entrypoint: the request's, else
// the image's Entrypoint and Cmd.
func (s *Server) sandboxImage(ctx context.Context, sb *sandbox, rec *record) (runtime.Rootfs, error) {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PullTimeout)
	defer cancel()
	name := rec.imageURI()
	sb.mu.Lock()
	auth := sb.auth
	sb.auth = nil
	if !s.img.localImage(name) && sb.rec.Status.State == StatePending {
		if _, err := s.img.store.Lookup(name); err != nil {
			sb.rec.setStatus(StatePending, "provisioning", "pulling image "+name)
			s.persist(sb)
		}
	}
	sb.mu.Unlock()
	fs, err := s.img.resolveImage(pctx, name, rec.ImageDigest, auth)
	if err != nil {
		return runtime.Rootfs{}, err
	}
	if len(rec.Entrypoint) == 0 {
		cfg := fs.Config()
		rec.Entrypoint = append(slices.Clone(cfg.Entrypoint), cfg.Cmd...)
		if len(rec.Entrypoint) == 0 {
			return runtime.Rootfs{}, fmt.Errorf("image %s has no Entrypoint or Cmd, and the request gives no entrypoint", rec.imageURI())
		}
	}
	// From here the record names the image's digest, which GCImages spares;
	// a GC that ran since the pull may have taken the layers (the image was
	// removed meanwhile): then resolve it again.
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()
	if fs.Image != nil {
		for _, l := range fs.Lowers {
			if !dirExists(l) {
				if fs, err = s.img.resolveImage(pctx, rec.imageURI(), fs.Image.Digest, auth); err != nil {
					return runtime.Rootfs{}, err
				}
				break
			}
		}
		rec.ImageDigest = fs.Image.Digest
	}
	sb.mu.Lock()
	sb.rec.Entrypoint, sb.rec.ImageDigest = rec.Entrypoint, rec.ImageDigest
	s.persist(sb)
	sb.mu.Unlock()
	return fs, nil
}

// imageFailure returns the *ImageError of sb, a sandbox that went Failed
// because its image could not be had; nil for any other.
func imageFailure(sb Sandbox) *ImageError {
	st := sb.Status
	if st.State != StateFailed {
		return nil
	}
	switch st.Reason {
	case ReasonImageNotFound, ReasonImageUnauthorized, ReasonImagePullFailed:
	default:
		return nil
	}
	ie := &ImageError{Reason: st.Reason, Message: st.Message}
	if sb.Image != nil {
		ie.Image = sb.Image.URI
	}
	return ie
}

// withImageHint returns err, the failure to get image name, with a hint
// when name has no registry host (python:3.12): such a name is pulled from
// Docker Hub, which a machine without the internet does not reach, and a
// user who meant the host's own system wants HostImage.
func withImageHint(name string, err error) error {
	if !shortImageName(name) {
		return err
	}
	return fmt.Errorf("%w (hint: %q names no registry host, so it is pulled from Docker Hub; the image %q is this host's own system, and sandboxd --registry-mirror URL points Docker Hub pulls at a mirror)", err, name, HostImage)
}

// shortImageName reports whether image reference name names no registry
// host: its first path component has no dot or colon and is not
// "localhost", as Docker reads it.
func shortImageName(name string) bool {
	first, _, ok := strings.Cut(name, "/")
	if !ok {
		return true
	}
	return !strings.ContainsAny(first, ".:") && first != "localhost"
}

// imageReason is the status reason of a create that failed to get its
// image.
func imageReason(err error) string {
	var ie *images.Error
	switch {
	case errors.Is(err, images.ErrNotFound):
		return ReasonImageNotFound
	case errors.Is(err, images.ErrUnauthorized):
		return ReasonImageUnauthorized
	case errors.As(err, &ie):
		return ReasonImagePullFailed
	}
	return ReasonRuntimeError
}

// Images returns the server's image store (DataDir/images/.oci), for
// pulls, listings and removals beside the server.
func (s *Server) Images() *images.Store { return s.img.store }

// GCImages removes the layers no image of the store references, but those
// of live sandboxes (whose image may have been removed since they started).
func (s *Server) GCImages(ctx context.Context) (images.GCStats, error) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	var keep []string
	for _, sb := range s.all() {
		sb.mu.Lock()
		if !sb.rec.Status.State.Final() && sb.rec.ImageDigest != "" {
			keep = append(keep, sb.rec.ImageDigest)
		}
		sb.mu.Unlock()
	}
	return s.img.store.GC(ctx, keep)
}

// OpenImages opens the image store of the data directory dataDir with the
// registry settings of cfg (RegistryMirrors, InsecureRegistries, Logger),
// for `sandboxd image pull|ls|rm` beside or without a server. Close it.
func OpenImages(dataDir string, cfg Config) (*images.Store, error) {
	return openImageStore(dataDir, cfg.withDefaults())
}

// GCImages removes the layers no image of dataDir's store references. It
// takes the data directory's lock: with a server running on it, it fails
// with ErrDataDirInUse (use Server.GCImages there).
func GCImages(ctx context.Context, dataDir string, cfg Config) (images.GCStats, error) {
	lock, err := lockDataDir(dataDir)
	if err != nil {
		return images.GCStats{}, err
	}
	defer lock.Close()
	st, err := OpenImages(dataDir, cfg)
	if err != nil {
		return images.GCStats{}, err
	}
	defer st.Close()
	return st.GC(ctx, nil)
}

// ImportedImages lists the names of the images imported into dataDir
// (ImportImage), by their directory names.
func ImportedImages(dataDir string) []string {
	ents, _ := os.ReadDir(filepath.Join(dataDir, "images"))
	var out []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

// RemoveImage removes the image ref from dataDir: an imported image of that
// name, else the reference from the store st (its layers go at the next
// GC). It returns an error wrapping images.ErrNotFound if there is neither.
func RemoveImage(dataDir string, st *images.Store, ref string) error {
	dir := filepath.Join(dataDir, "images", imageDirName(ref))
	if dirExists(dir) {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove image %s: %w", ref, err)
		}
		return nil
	}
	return st.Remove(ref)
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
