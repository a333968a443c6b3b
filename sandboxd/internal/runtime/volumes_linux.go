package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/alineo-labs/alineo/internal/mountinfo"
)

// beneath is how every volume directory is resolved from its parent's
// descriptor: never above it, never through a symbolic link (a sandbox that
// shares the volume may plant one at any time), never through a /proc magic
// link.
var beneath = unix.OpenHow{
	Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, // no O_NOFOLLOW: with O_PATH it would open a trailing link itself
	Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
}

// OpenBeneath opens directory rel below root, one component at a time, each
// from the descriptor of the one above it with openat2 (beneath). With
// create, a missing component is made (mode 0755, owned by host root) with
// mkdirat in the directory just opened, then opened the same way. It
// returns an O_PATH descriptor of the directory, which the caller closes. A
// symbolic link on the way is ErrLeavesRoot: nothing is created past it, nor
// anywhere else.
func OpenBeneath(root, rel string, create bool) (int, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	if rel == "" || rel == "." {
		return fd, nil
	}
	for _, name := range strings.Split(rel, "/") {
		if name == "" || name == "." {
			continue
		}
		next, err := openat2Retry(fd, name)
		if errors.Is(err, unix.ENOENT) && create {
			if err := unix.Mkdirat(fd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return -1, &fs.PathError{Op: "mkdir", Path: filepath.Join(root, rel), Err: err}
			}
			next, err = openat2Retry(fd, name)
		}
		unix.Close(fd)
		switch {
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
			return -1, fmt.Errorf("%s: %w", filepath.Join(root, rel), ErrLeavesRoot)
		case err != nil:
			return -1, &fs.PathError{Op: "open", Path: filepath.Join(root, rel), Err: err}
		}
		fd = next
	}
	return fd, nil
}

// openat2Retry is openat2(dirfd, name, beneath), retried while the kernel
// answers EAGAIN (a rename elsewhere in the file system raced the lookup).
func openat2Retry(dirfd int, name string) (int, error) {
	for range 64 {
		fd, err := unix.Openat2(dirfd, name, &beneath)
		if !errors.Is(err, unix.EAGAIN) {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// bindVolume makes the mount a sandbox's volume m binds: the directory
// found again from a descriptor of m.Root (OpenBeneath), cloned as a
// detached mount (open_tree), idmapped into the sandbox's range at base,
// nosuid, nodev, read-only if m says so, and mounted at target. The runtime
// then binds target, a mount no sandbox can change, not a path.
func (r *Runtime) bindVolume(m Volume, base uint32, target string) error {
	fd, err := OpenBeneath(m.Root, m.Dir, true)
	if err != nil {
		return fmt.Errorf("volume %s: %w", m.Name, err)
	}
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("volume %s: open_tree: %w", m.Name, err)
	}
	defer unix.Close(tree)
	var set uint64
	if m.ReadOnly {
		set = unix.MOUNT_ATTR_RDONLY
	}
	r.idmap.mu.Lock()
	defer r.idmap.mu.Unlock()
	if err := r.idmap.attach(tree, base, set, target); err != nil {
		return fmt.Errorf("volume %s: %w", m.Name, err)
	}
	return nil
}

// VolumeDisk gives a managed volume a disk of its own: img, a sparse ext4
// image of size bytes (made if missing), loop-mounted nosuid,nodev on dir,
// so that past size the volume's writes fail with ENOSPC and only there. A
// dir that is already a mount point (a server that died left it mounted) is
// left as it is.
func VolumeDisk(ctx context.Context, img, dir string, size int64) error {
	if ms, _ := mountinfo.Below(dir); slices.Contains(ms, dir) {
		return nil
	}
	fresh := false
	if _, err := os.Stat(img); errors.Is(err, fs.ErrNotExist) {
		if err := formatDisk(ctx, img, size); err != nil {
			return err
		}
		fresh = true
	} else if err != nil {
		return fmt.Errorf("volume disk: %w", err)
	} else if err := waitDiskFree(ctx, img); err != nil {
		return err
	}
	if err := mountDisk(img, dir); err != nil {
		return err
	}
	if fresh { // a new volume is empty, as on any other backend
		_ = os.Remove(filepath.Join(dir, "lost+found"))
	}
	return nil
}

// waitDiskFree waits until no loop device is backed by img. The file
// system of a volume's disk detached lazily (a server's Close, while a
// sandbox's mount of it is not yet torn down) lives on until its last
// mount goes, its last writes not yet on the image: mounting the image
// again meanwhile would show the volume as it was some seconds before, and
// two file systems writing one image corrupt it.
func waitDiskFree(ctx context.Context, img string) error {
	path, err := filepath.Abs(img)
	if err != nil {
		return err
	}
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	for {
		dev := loopBackedBy(path)
		if dev == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("volume disk %s is still in use by %s: %w", img, dev, context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// loopBackedBy returns the loop device whose backing file is path, "" when
// none is (or the kernel does not say).
func loopBackedBy(path string) string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimSuffix(string(b), "\n") == path {
			return "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		}
	}
	return ""
}

// UnmountVolume detaches whatever is mounted at or below dir.
func UnmountVolume(dir string) error {
	return unmountSandbox(dir)
}
