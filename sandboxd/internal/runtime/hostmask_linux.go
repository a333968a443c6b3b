package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// MaskedHostDirs are the host directories whose unreadable entries the host
// fallback hides: where a system keeps its secrets (/etc/shadow, private keys,
// database credentials). /usr and the library directories are shared as they
// are: walking them takes seconds, and they hold programs, not secrets.
var MaskedHostDirs = []string{"etc", "opt"}

// BuildHostMask makes imagesDir/.host-mask/<dir>, for each of dirs, a layer
// of overlay whiteouts for every entry of /<dir> that an unprivileged host
// user could not read (a file without o+r, a directory without o+rx), so a
// sandbox sees of the host's /etc what any host user sees. The mask's
// directories copy the host's mode and owner (overlayfs takes a directory's
// attributes from the topmost layer). It is rebuilt at every server start.
func BuildHostMask(imagesDir string, dirs []string) (string, error) {
	final := filepath.Join(imagesDir, ".host-mask")
	tmp := final + ".new"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	for _, d := range dirs {
		host := "/" + d
		err := filepath.WalkDir(host, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				if p == host && errors.Is(err, fs.ErrNotExist) {
					return fs.SkipAll
				}
				return nil // unreadable to us too: nothing to hide from below
			}
			if de.Type()&fs.ModeSymlink != 0 || p == host {
				return nil
			}
			info, err := de.Info()
			if err != nil {
				return nil
			}
			perm := info.Mode().Perm()
			if de.IsDir() && perm&0o005 == 0o005 || !de.IsDir() && perm&0o004 != 0 {
				return nil
			}
			rel := strings.TrimPrefix(p, "/")
			if err := mirrorDirs(tmp, filepath.Dir(rel)); err != nil {
				return err
			}
			if err := whiteout(filepath.Join(tmp, rel)); err != nil {
				return fmt.Errorf("hide %s: %w", p, err)
			}
			if de.IsDir() {
				return filepath.SkipDir
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("mask /%s: %w", d, err)
		}
	}
	if err := os.RemoveAll(final); err != nil {
		return "", err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	return final, nil
}

// mirrorDirs creates root/<rel> and its parents with the mode and owner of
// the host's /<rel> and parents.
func mirrorDirs(root, rel string) error {
	var parts []string
	for p := rel; p != "." && p != "/"; p = filepath.Dir(p) {
		parts = append(parts, p)
	}
	for i := len(parts) - 1; i >= 0; i-- {
		target := filepath.Join(root, parts[i])
		if _, err := os.Lstat(target); err == nil {
			continue
		}
		info, err := os.Stat("/" + parts[i])
		if err != nil {
			return err
		}
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(target, info.Mode().Perm()|info.Mode()&(fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return err
		}
		if err := chownLike(target, info); err != nil {
			return err
		}
	}
	return nil
}

// whiteout makes p an overlayfs whiteout (a 0:0 character device): the entry
// of that name in the layers below is hidden.
func whiteout(p string) error {
	return unix.Mknod(p, unix.S_IFCHR, 0)
}

// chownLike gives p the owner and group of info's file.
func chownLike(p string, info fs.FileInfo) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	return os.Lchown(p, int(st.Uid), int(st.Gid))
}
