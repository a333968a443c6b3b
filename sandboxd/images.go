package sandboxd

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// rootfs is a resolved image.
type rootfs struct {
	// Lower is the read-only lower layer of the sandbox's overlay root.
	Lower string
	// HostDirs are host directories (e.g. "usr") each mounted as a private
	// overlay with the host directory below; set for the host fallback only.
	HostDirs []string
	// HostMask, when set, holds for some host directories (HostMask/<dir>) a
	// layer of whiteouts laid over the host directory: it hides what other
	// users of the host may not read (see buildHostMask).
	HostMask string
	// Source says where the image came from, for logs and records.
	Source string
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

// resolveImage maps an image name to a root filesystem: Config.Images, then an
// imported image, then the host's system directories.
func (s *Server) resolveImage(ctx context.Context, name string) (rootfs, error) {
	if src, ok := s.cfg.Images[name]; ok {
		st, err := os.Stat(src)
		if err != nil {
			return rootfs{}, fmt.Errorf("%w: image %q: %w", ErrImage, name, err)
		}
		if st.IsDir() {
			return rootfs{Lower: src, Source: "dir " + src}, nil
		}
		dir := filepath.Join(s.dataDir, "images", imageDirName(name))
		if _, err := os.Stat(dir); err != nil {
			s.importMu.Lock()
			err = ImportImage(ctx, s.dataDir, name, src)
			s.importMu.Unlock()
			if err != nil {
				return rootfs{}, err
			}
		}
		return rootfs{Lower: dir, Source: "tarball " + src}, nil
	}
	dir := filepath.Join(s.dataDir, "images", imageDirName(name))
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return rootfs{Lower: dir, Source: "imported " + dir}, nil
	}
	return s.hostRootfs()
}

// prepareImages checks every configured image and extracts the tarballs not
// extracted yet, so that a large image does not count against a sandbox's
// start timeout and a wrong path fails at start.
func (s *Server) prepareImages(ctx context.Context) error {
	for name, src := range s.cfg.Images {
		st, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("%w: image %q: %w", ErrImage, name, err)
		}
		if st.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(s.dataDir, "images", imageDirName(name))); err == nil {
			continue
		}
		s.log.Info("sandboxd: extracting image", "name", name, "tarball", src)
		s.importMu.Lock()
		err = ImportImage(ctx, s.dataDir, name, src)
		s.importMu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// hostRootfs builds (once) the skeleton lower layer of the host fallback: the
// mount points and the host's root-level symlinks (bin -> usr/bin and the
// like). The system directories themselves are overlaid by mountRoot.
func (s *Server) hostRootfs() (rootfs, error) {
	s.hostOnce.Do(func() {
		skel := filepath.Join(s.dataDir, "images", ".host-skeleton")
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
			s.hostErr = fmt.Errorf("%w: host fallback root: %w", ErrImage, err)
			return
		}
		s.host = rootfs{Lower: skel, HostDirs: dirs, Source: "host system directories (/" + strings.Join(dirs, ", /") + ") read-only"}
		if !s.cfg.NoIsolation {
			// The sandbox's root owns what host root owns (an idmapped lower
			// layer): without the mask it could read /etc/shadow and keys.
			mask, err := buildHostMask(filepath.Join(s.dataDir, "images"), maskedHostDirs)
			if err != nil {
				s.hostErr = fmt.Errorf("%w: host fallback root: %w", ErrImage, err)
				return
			}
			s.host.HostMask = mask
			s.host.Source += ", files other users cannot read hidden"
		}
	})
	return s.host, s.hostErr
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
	if err := extractTar(ctx, tar.NewReader(r), tmp); err != nil {
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

func extractTar(ctx context.Context, tr *tar.Reader, dst string) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel := filepath.Clean("/" + h.Name)[1:]
		if rel == "" {
			continue
		}
		if strings.HasPrefix(h.Name, "/") || strings.Contains("/"+h.Name+"/", "/../") {
			return fmt.Errorf("entry %q escapes the root", h.Name)
		}
		target := filepath.Join(dst, rel)
		if err := noSymlinkParents(dst, rel); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		fm := h.FileInfo().Mode()
		mode := fm & fs.ModePerm
		special := fm & (fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, mode); err != nil {
				return err
			}
			if err := os.Chmod(target, mode|special); err != nil {
				return err
			}
		case tar.TypeReg:
			_ = os.RemoveAll(target)
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = os.RemoveAll(target)
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			lrel := filepath.Clean("/" + h.Linkname)[1:]
			if strings.Contains("/"+h.Linkname+"/", "/../") {
				return fmt.Errorf("hard link %q escapes the root", h.Linkname)
			}
			_ = os.RemoveAll(target)
			if err := os.Link(filepath.Join(dst, lrel), target); err != nil {
				return err
			}
		default:
			continue // devices, fifos: skipped
		}
		_ = os.Lchown(target, h.Uid, h.Gid)
		if h.Typeflag == tar.TypeReg {
			_ = os.Chmod(target, mode|special)
		}
	}
}

// noSymlinkParents fails if a directory on the way from root to rel is a
// symlink, which an entry could otherwise use to write outside root.
func noSymlinkParents(root, rel string) error {
	cur := root
	parts := strings.Split(filepath.Dir(rel), string(filepath.Separator))
	for _, p := range parts {
		if p == "." || p == "" {
			continue
		}
		cur = filepath.Join(cur, p)
		st, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("entry %q goes through the symlink %q", rel, p)
		}
	}
	return nil
}
