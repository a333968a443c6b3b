package execd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxSymlinks bounds the links followed while resolving one path (Linux uses 40; securejoin 255).
const maxSymlinks = 255

// sandboxPath cleans a client path into an absolute sandbox path, expanding a leading `~` and
// $VAR / ${VAR} from the command environment like the real execd. Relative paths are taken
// relative to the sandbox root.
func (s *Server) sandboxPath(p string) string {
	if strings.HasPrefix(p, "~") && (len(p) == 1 || p[1] == '/') {
		p = envValue(s.env, "HOME") + p[1:]
	}
	if strings.Contains(p, "$") {
		p = os.Expand(p, func(k string) string { return envValue(s.env, k) })
	}
	return filepath.Clean("/" + p)
}

// resolve maps client path p to a host path under Root. Every symlink met on the way is
// resolved inside Root, component by component (an absolute target restarts at Root, `..`
// never climbs above it), so the result is always Root or below it, like a chroot. The last
// component is resolved only when followLast is set; otherwise a symlink there is returned as
// the link itself (for info, delete and move). Missing components are kept lexically.
// It fails with ErrSymlinkLoop after maxSymlinks links and with ErrInvalid for an empty path.
//
// The check is done in user space, so a process in the sandbox racing to swap a directory for
// a symlink between resolve and use could win; inside an isolated sandbox Root is "/" and
// there is nothing to escape to.
func (s *Server) resolve(p string, followLast bool) (string, error) {
	if p == "" {
		return "", badRequest(CodeInvalidRequestBody, "empty path")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", badRequest(CodeInvalidRequestBody, "path contains a NUL byte")
	}
	clean := s.sandboxPath(p)
	if s.root == "/" {
		return clean, nil
	}
	rel, err := secureJoin(s.root, clean, followLast)
	if err != nil {
		if errors.Is(err, ErrSymlinkLoop) || errors.Is(err, ErrInvalid) {
			return "", badRequest(CodeInvalidFile, "resolve %s: %v", p, err)
		}
		return "", runtimeError(err, "resolve %s: %v", p, err)
	}
	return rel, nil
}

// secureJoin resolves unsafe (a slash-separated path) under root; see resolve.
func secureJoin(root, unsafe string, followLast bool) (string, error) {
	if strings.IndexByte(unsafe, 0) >= 0 {
		return "", fmt.Errorf("path contains a NUL byte: %w", ErrInvalid)
	}
	var resolved []string // components below root, symlink-free up to here
	rest := unsafe
	links := 0
	for {
		rest = strings.TrimLeft(rest, "/")
		if rest == "" {
			break
		}
		comp := rest
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			comp, rest = rest[:i], rest[i:]
		} else {
			rest = ""
		}
		switch comp {
		case ".":
			continue
		case "..":
			if len(resolved) > 0 {
				resolved = resolved[:len(resolved)-1]
			}
			continue
		}
		last := strings.Trim(rest, "/") == ""
		next := append(resolved, comp)
		if last && !followLast {
			resolved = next
			break
		}
		host := filepath.Join(root, filepath.Join(next...))
		fi, err := os.Lstat(host)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				resolved = next
				continue
			}
			if errors.Is(err, syscall.ENAMETOOLONG) {
				return "", fmt.Errorf("path component too long: %w", ErrInvalid)
			}
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		links++
		if links > maxSymlinks {
			return "", ErrSymlinkLoop
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			resolved = resolved[:0]
		}
		rest = target + "/" + rest
	}
	return filepath.Join(root, filepath.Join(resolved...)), nil
}

// clientPath maps a host path under Root back to the sandbox path a client sees.
func (s *Server) clientPath(host string) string {
	if s.root == "/" {
		return host
	}
	rel, err := filepath.Rel(s.root, host)
	if err != nil || rel == "." {
		return "/"
	}
	return "/" + filepath.ToSlash(rel)
}
