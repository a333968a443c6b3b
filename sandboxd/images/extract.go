package images

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Whiteout names of the OCI image layer format.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// ExtractTar unpacks the root filesystem tarball tr into dst (plain mode:
// whiteout names are files like any other), without a bound. See extract.
func ExtractTar(ctx context.Context, tr *tar.Reader, dst string) error {
	return extract(ctx, tr, dst, false, &meter{max: -1})
}

// extract unpacks tr into dst. Entries that would escape dst (absolute or ".."
// paths, a path through a symlink, a hard link out of dst) are refused;
// device nodes are skipped (the sandboxes' device cgroup denies them anyway);
// owners are kept as the tar says (image ids: the sandbox sees them through an
// idmapped mount), as are modes with setuid, setgid and sticky bits; extended
// attributes are not. In layer mode, whiteouts become what overlayfs reads in
// a lower layer: ".wh.NAME" a 0/0 character device NAME, ".wh..wh..opq" the
// overlay.opaque xattr on its directory (trusted. and user., for mounts with
// and without userxattr). Regular files are written sparse: their blocks of
// zeros, and so the holes of sparse entries (PAX and GNU), are left holes.
// Their apparent sizes are charged to m (whose reader charges the stream):
// past its bounds extract stops with a *LimitError.
func extract(ctx context.Context, tr *tar.Reader, dst string, layer bool, m *meter) error {
	buf := make([]byte, 256<<10)
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
		if strings.HasPrefix(h.Name, "/") || strings.Contains("/"+h.Name+"/", "/../") {
			return fmt.Errorf("entry %q escapes the root", h.Name)
		}
		rel := filepath.Clean("/" + h.Name)[1:]
		if rel == "" {
			continue
		}
		if err := noSymlinkParents(dst, rel); err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if base := filepath.Base(rel); layer && strings.HasPrefix(base, whiteoutPrefix) {
			if err := whiteout(dst, rel, base); err != nil {
				return err
			}
			continue
		}
		done, err := extractEntry(tr, h, dst, target, buf, m)
		if err != nil {
			return err
		}
		if !done || h.Typeflag == tar.TypeLink {
			continue // a hard link shares its target's owner, mode and times
		}
		_ = os.Lchown(target, h.Uid, h.Gid)
		fm := h.FileInfo().Mode()
		if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeGNUSparse || h.Typeflag == tar.TypeDir {
			if err := os.Chmod(target, fm&fs.ModePerm|fm&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
				return err
			}
		}
		if h.Typeflag != tar.TypeDir && !h.ModTime.IsZero() {
			ts := []unix.Timespec{unix.NsecToTimespec(h.ModTime.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
			_ = unix.UtimesNanoAt(unix.AT_FDCWD, target, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
	}
}

// extractEntry creates one entry at target; it reports false for entries it
// skips.
func extractEntry(tr *tar.Reader, h *tar.Header, dst, target string, buf []byte, m *meter) (bool, error) {
	mode := h.FileInfo().Mode() & fs.ModePerm
	switch h.Typeflag {
	case tar.TypeDir:
		if st, err := os.Lstat(target); err == nil && !st.IsDir() {
			if err := os.RemoveAll(target); err != nil {
				return false, err
			}
		}
		if err := os.MkdirAll(target, mode|0o700); err != nil {
			return false, err
		}
	case tar.TypeReg, tar.TypeGNUSparse:
		if err := regular(tr, h, target, buf, m); err != nil {
			return false, err
		}
	case tar.TypeSymlink:
		if err := removeExisting(target); err != nil {
			return false, err
		}
		if err := os.Symlink(h.Linkname, target); err != nil {
			return false, err
		}
	case tar.TypeLink:
		if strings.Contains("/"+h.Linkname+"/", "/../") {
			return false, fmt.Errorf("hard link %q escapes the root", h.Linkname)
		}
		lrel := filepath.Clean("/" + h.Linkname)[1:]
		if err := noSymlinkParents(dst, lrel); err != nil {
			return false, err
		}
		if err := removeExisting(target); err != nil {
			return false, err
		}
		if err := os.Link(filepath.Join(dst, lrel), target); err != nil {
			return false, err
		}
	case tar.TypeFifo:
		if err := removeExisting(target); err != nil {
			return false, err
		}
		if err := unix.Mkfifo(target, uint32(mode)); err != nil {
			return false, err
		}
	default:
		return false, nil // devices and the rest: skipped
	}
	return true, nil
}

// regular writes the regular (or GNU sparse) file entry h at target, sparse,
// and charges m the holes: the apparent size beyond what the stream held.
// An entry whose apparent size alone exceeds m's bound is refused before a
// byte of it is written.
func regular(tr *tar.Reader, h *tar.Header, target string, buf []byte, m *meter) error {
	if err := m.fits(h.Size); err != nil {
		return err
	}
	if err := removeExisting(target); err != nil {
		return err
	}
	out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	streamed := m.n
	_, err = writeSparse(out, tr, h.Size, buf)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if holes := h.Size - (m.n - streamed); holes > 0 {
		return m.charge(holes)
	}
	return nil
}

// whiteout records the whiteout entry rel (base name base) in dst.
func whiteout(dst, rel, base string) error {
	dir := filepath.Join(dst, filepath.Dir(rel))
	if base == whiteoutOpaque {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, attr := range []string{"trusted.overlay.opaque", "user.overlay.opaque"} {
			if err := unix.Lsetxattr(dir, attr, []byte("y"), 0); err != nil {
				return fmt.Errorf("mark %s opaque: %w", rel, err)
			}
		}
		return nil
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if name == "" || strings.HasPrefix(name, whiteoutPrefix) || name == "." || name == ".." {
		return nil // other .wh..wh. names are the format's own: nothing to create
	}
	target := filepath.Join(dir, name)
	if err := os.RemoveAll(target); err != nil {
		return err
	}
	if err := unix.Mknod(target, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("whiteout %s: %w", filepath.Join(filepath.Dir(rel), name), err)
	}
	return nil
}

// removeExisting removes what is at p, if anything: a later entry replaces
// an earlier one of the same name.
func removeExisting(p string) error {
	st, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.IsDir() {
		return os.RemoveAll(p)
	}
	return os.Remove(p)
}

// noSymlinkParents fails if a directory on the way from root to rel is a
// symlink, which an entry could otherwise use to write outside root.
func noSymlinkParents(root, rel string) error {
	cur := root
	for _, p := range strings.Split(filepath.Dir(rel), string(filepath.Separator)) {
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
