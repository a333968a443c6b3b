package egress

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// BundlePaths are the CA bundles InstallCA appends to, relative to a sandbox
// root: Debian/Ubuntu/Alpine first, then Fedora/RHEL.
var BundlePaths = []string{
	"etc/ssl/certs/ca-certificates.crt",
	"etc/pki/tls/certs/ca-bundle.crt",
}

// InstallCA appends pemBytes (CACertPEM) to every bundle of BundlePaths that
// exists under rootDir, the sandbox's merged root (writes go to its upper
// layer), or creates the first one when none exists. A bundle that is a
// symbolic link is resolved inside rootDir, never on the host, and replaced by a
// regular file. It is idempotent: a bundle that already holds pemBytes is left
// alone.
func InstallCA(rootDir string, pemBytes []byte) error {
	if !bytes.Contains(pemBytes, []byte("-----BEGIN CERTIFICATE-----")) {
		return fmt.Errorf("install CA under %s: not a PEM certificate", rootDir)
	}
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		return fmt.Errorf("install CA: %w", err)
	}
	defer root.Close()
	installed := 0
	for _, p := range BundlePaths {
		ok, err := appendBundle(root, p, pemBytes, false)
		if err != nil {
			return fmt.Errorf("install CA into %s: %w", p, err)
		}
		if ok {
			installed++
		}
	}
	if installed == 0 {
		if _, err := appendBundle(root, BundlePaths[0], pemBytes, true); err != nil {
			return fmt.Errorf("install CA into %s: %w", BundlePaths[0], err)
		}
	}
	return nil
}

// appendBundle appends pemBytes to rel under root. Without create, a missing
// bundle is skipped (false).
func appendBundle(root *os.Root, rel string, pemBytes []byte, create bool) (bool, error) {
	fi, err := root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !create {
			return false, nil
		}
		if err := root.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
			return false, err
		}
		return true, root.WriteFile(rel, pemBytes, 0o644)
	case err != nil:
		return false, err
	}
	var old []byte
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := resolveInRoot(root, rel)
		if err != nil {
			return false, err
		}
		if target == "" { // dangling link
			if !create {
				return false, nil
			}
		} else if old, err = root.ReadFile(target); err != nil {
			return false, err
		}
		if err := root.Remove(rel); err != nil {
			return false, err
		}
	} else if !fi.Mode().IsRegular() {
		return false, fmt.Errorf("not a regular file (%s)", fi.Mode())
	} else if old, err = root.ReadFile(rel); err != nil {
		return false, err
	}
	isLink := fi.Mode()&fs.ModeSymlink != 0
	if bytes.Contains(old, pemBytes) && !isLink {
		return true, nil
	}
	buf := bytes.Clone(old)
	if len(buf) > 0 && buf[len(buf)-1] != '\n' {
		buf = append(buf, '\n')
	}
	if !bytes.Contains(old, pemBytes) {
		buf = append(buf, pemBytes...)
	}
	return true, root.WriteFile(rel, buf, 0o644)
}

// resolveInRoot follows the symbolic link chain at rel as if root were /,
// and returns the final path relative to root ("" if it does not exist).
func resolveInRoot(root *os.Root, rel string) (string, error) {
	cur := rel
	for range 16 {
		fi, err := root.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return cur, nil
		}
		dst, err := root.Readlink(cur)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(dst) {
			cur = filepath.Clean(strings.TrimPrefix(dst, "/"))
		} else {
			cur = filepath.Join(filepath.Dir(cur), dst)
		}
		if cur == ".." || strings.HasPrefix(cur, "../") {
			return "", fmt.Errorf("link %s leaves the sandbox root", rel)
		}
	}
	return "", fmt.Errorf("too many links at %s", rel)
}
