package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Rootfs fills dir with a minimal root filesystem for an image other than
// the host's: the host's programs bins (found on PATH, copied to /bin) with
// the shared libraries ldd says they load, and empty /tmp, /proc, /dev and
// /root. It fails when a program is not on the host.
func Rootfs(dir string, bins ...string) error {
	for _, bin := range bins {
		path, err := exec.LookPath(bin)
		if err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
		if err := copyExecutable(real, filepath.Join(dir, "bin", bin)); err != nil {
			return err
		}
		out, err := exec.Command("ldd", real).Output()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			continue // static: "not a dynamic executable"
		case err != nil:
			return fmt.Errorf("rootfs: ldd %s: %w", real, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					if err := copyExecutable(f, filepath.Join(dir, f)); err != nil {
						return err
					}
				}
			}
		}
	}
	for _, d := range []string{"tmp", "proc", "dev", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	return nil
}

func copyExecutable(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	return nil
}
