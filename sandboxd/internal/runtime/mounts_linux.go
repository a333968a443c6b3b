package runtime

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/alineo-labs/alineo/internal/mountinfo"
)

// Layout of an isolated sandbox's directory (DataDir/sandboxes/<id>):
//
//	disk.img        the sandbox's disk: a sparse file of Config.DiskQuota bytes (ext4)
//	fs/             where disk.img is mounted (or a plain directory without a quota):
//	  layers/upper    the root overlay's upper layer   } what snapshots capture
//	  layers/hostup/D the upper layer of host dir D     }
//	  work, hostwork/D  overlay work directories
//	bundle/         config.json and the init's pid file
//
// and, in the server's run directory (Config.RunDir/<hash of DataDir>), which
// the sandbox's root must be able to traverse: <id>/rootfs, the sandbox's root
// (the bundle's rootfs), and <id>/netns, its network namespace.
const (
	diskImage = "disk.img"
	diskDir   = "fs"
)

// layersDir is the directory under DataDir/sandboxes/<id>/fs that holds every
// upper layer of an isolated sandbox: upper (the root overlay's) and
// hostup/<dir> (each host directory's overlay in the host fallback). It is what
// a snapshot captures; the overlay work directories stay outside it.
const layersDir = "layers"

// plainRoot is the root directory of a sandbox without isolation, under
// DataDir/sandboxes/<id>; a snapshot of such a sandbox captures it.
const plainRoot = "root"

// idmapper makes idmapped mounts: each directory, owned on disk by the ids
// a sandbox sees (an image layer as the image made it, a managed volume as
// its sandboxes wrote it), is seen through a mount that shifts its ids into
// one sandbox's host range (Sandbox.IDBase), so a sandbox's root (host uid
// base) owns what root owns on disk. Lower layers get one view per range and
// directory, shared by the sandboxes of that range until Close; a volume
// gets a view per sandbox (bindVolume).
type idmapper struct {
	dir string // DataDir/run/idmap

	mu     sync.Mutex
	userns map[uint32]*os.File // by range base: a user namespace mapping 0.. to base..
	mounts map[idmapKey]idmapped
	seq    int
}

// idmapKey names a lower layer's view: its directory seen in one range.
type idmapKey struct {
	base uint32
	src  string
}

// idmapped is the idmapped view (path) of a directory, made when the
// directory was inode ino: a layer removed and pulled again is a new
// directory at the same path, which gets a new view.
type idmapped struct {
	path string
	ino  uint64
}

// lower returns the idmapped, read-only view of src in the range at base,
// making it on first use.
func (m *idmapper) lower(base uint32, src string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		return "", fmt.Errorf("lower layer %s: %w", src, err)
	}
	key := idmapKey{base, src}
	if v, ok := m.mounts[key]; ok {
		if v.ino == st.Ino {
			return v.path, nil
		}
		// Sandboxes still running on the old view keep it (detached).
		_ = unix.Unmount(v.path, unix.MNT_DETACH)
		delete(m.mounts, key)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return "", fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	m.seq++
	target := filepath.Join(m.dir, strconv.Itoa(m.seq))
	if err := m.attach(fd, base, unix.MOUNT_ATTR_RDONLY, target); err != nil {
		return "", fmt.Errorf("idmap %s: %w", src, err)
	}
	if m.mounts == nil {
		m.mounts = map[idmapKey]idmapped{}
	}
	m.mounts[key] = idmapped{path: target, ino: st.Ino}
	return target, nil
}

// attach idmaps the detached mount tree fd into the range at base, with
// nosuid, nodev and the attributes in set, and mounts it on target (a
// directory it creates, mode 0700).
func (m *idmapper) attach(fd int, base uint32, set uint64, target string) error {
	userns, err := m.usernsFor(base)
	if err != nil {
		return err
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | set, Userns_fd: uint64(userns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	if err := os.MkdirAll(target, 0o700); err != nil {
		return err
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount to %s: %w", target, err)
	}
	return nil
}

// usernsFor returns the user namespace of the range at base; m.mu is held.
func (m *idmapper) usernsFor(base uint32) (*os.File, error) {
	if f, ok := m.userns[base]; ok {
		return f, nil
	}
	f, err := mappedUserns(base)
	if err != nil {
		return nil, fmt.Errorf("user namespace for idmapped mounts: %w", err)
	}
	if m.userns == nil {
		m.userns = map[uint32]*os.File{}
	}
	m.userns[base] = f
	return f, nil
}

// close unmounts every idmapped lower.
func (m *idmapper) close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for _, v := range m.mounts {
		if err := unix.Unmount(v.path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", v.path, err))
		}
	}
	m.mounts = nil
	for _, f := range m.userns {
		f.Close()
	}
	m.userns = nil
	return errors.Join(errs...)
}

// mappedUserns returns a user namespace whose ids 0.. map to base..: a
// re-executed child holds it just long enough for its namespace to be opened.
func mappedUserns(base uint32) (*os.File, error) {
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"sandboxd-userns"}
	cmd.Env = []string{initEnv + "=userns"}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: IDMapSize}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: IDMapSize}},
		Pdeathsig:   syscall.SIGKILL,
	}
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		w.Close()
		_ = cmd.Wait()
	}()
	return os.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/user")
}

// runUserns is the "userns" role: it waits for its stdin to close.
func runUserns() int {
	_, _ = bufio.NewReader(os.Stdin).ReadByte()
	return 0
}

// formatDisk creates img, a sparse ext4 image of size bytes whose root
// belongs to host root (the sandbox's upper layers below it are its own).
func formatDisk(ctx context.Context, img string, size int64) error {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(img)
		return fmt.Errorf("disk image: %w", err)
	}
	out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
		"-E", "lazy_itable_init=1,nodiscard,root_owner=0:0", img).CombinedOutput()
	if err != nil {
		os.Remove(img)
		return fmt.Errorf("mkfs.ext4 (Debian package e2fsprogs): %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// mountDisk mounts the disk image img on mnt through a loop device. Past its
// size, writes there fail with ENOSPC, and only there.
func mountDisk(img, mnt string) error {
	f, err := os.OpenFile(img, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	defer f.Close()
	// The device clears itself on its last close unless mounted: keep it
	// open until the mount holds it.
	lf, err := attachLoop(f)
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	if err := unix.Mount(lf.Name(), mnt, "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount the disk %s on %s: %w", lf.Name(), mnt, err)
	}
	return nil
}

// diskPool keeps a few formatted disk images ready, so that a create does
// not wait for mkfs (about 30 ms here): take renames one into a sandbox's
// directory and the pool formats another in the background.
type diskPool struct {
	dir  string // DataDir/run/disks
	size int64
	want int

	mu      sync.Mutex
	ready   []string
	filling bool
	seq     int
}

// take moves a ready image to dst and reports whether there was one.
func (p *diskPool) take(dst string) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.ready) > 0 {
		img := p.ready[len(p.ready)-1]
		p.ready = p.ready[:len(p.ready)-1]
		if os.Rename(img, dst) == nil {
			return true
		}
	}
	return false
}

// fill formats images until the pool holds want of them or ctx ends; one
// fill runs at a time.
func (p *diskPool) fill(ctx context.Context) error {
	p.mu.Lock()
	if p.filling {
		p.mu.Unlock()
		return nil
	}
	p.filling = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.filling = false
		p.mu.Unlock()
	}()
	for ctx.Err() == nil {
		p.mu.Lock()
		n := len(p.ready)
		p.seq++
		img := filepath.Join(p.dir, strconv.Itoa(p.seq)+".img")
		p.mu.Unlock()
		if n >= p.want {
			return nil
		}
		if err := formatDisk(ctx, img, p.size); err != nil {
			return err
		}
		p.mu.Lock()
		p.ready = append(p.ready, img)
		p.mu.Unlock()
	}
	return ctx.Err()
}

// attachLoop binds f to a free loop device that clears itself once the
// last mount and descriptor of it are gone, and returns the device, open.
func attachLoop(f *os.File) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		lf, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		if err == nil {
			return lf, nil
		}
		lf.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("configure %s: %w", dev, err)
		}
		// another sandbox took it first
	}
	return nil, errors.New("configure a loop device: every free one was taken first")
}

// mountRoot mounts the sandbox's root at merged: an overlay of fs's lower
// layers (each idmapped: an image's layers, shared by every sandbox of it)
// under the upper layer in dir/fs/layers, and for the host image one overlay
// per host directory, all in the sandbox's id range at base, nosuid and
// nodev. It returns merged.
func (r *Runtime) mountRoot(dir, merged string, base uint32, fs Rootfs) (string, error) {
	d := filepath.Join(dir, diskDir)
	lowers := make([]string, len(fs.Lowers))
	for i, l := range fs.Lowers {
		m, err := r.idmap.lower(base, l)
		if err != nil {
			return "", err
		}
		lowers[i] = m
	}
	if err := hostOverlay(lowers, filepath.Join(d, layersDir, "upper"), filepath.Join(d, "work"), merged, base); err != nil {
		return "", err
	}
	for _, hd := range fs.HostDirs {
		target := filepath.Join(merged, hd)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return "", err
		}
		var lowers []string
		if fs.HostMask != "" {
			if mask := filepath.Join(fs.HostMask, hd); dirExists(mask) {
				ml, err := r.idmap.lower(base, mask)
				if err != nil {
					return "", err
				}
				lowers = append(lowers, ml)
			}
		}
		hl, err := r.idmap.lower(base, "/"+hd)
		if err != nil {
			return "", err
		}
		lowers = append(lowers, hl)
		if err := hostOverlay(lowers, filepath.Join(d, layersDir, "hostup", hd), filepath.Join(d, "hostwork", hd), target, base); err != nil {
			return "", err
		}
	}
	if err := rootTmp(merged, base); err != nil {
		return "", err
	}
	return merged, nil
}

// hostOverlay mounts an overlay whose upper and work directories belong to
// the sandbox's root (host uid base).
func hostOverlay(lower []string, upper, work, target string, base uint32) error {
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.Chown(d, int(base), int(base)); err != nil {
			return err
		}
	}
	return overlay(lower, upper, work, target)
}

// unmountSandbox undoes every host mount of a sandbox directory (its root
// overlays, then its disk), whatever an earlier run left there. It does not
// fail on what is not mounted.
func unmountSandbox(dir string) error {
	var errs []error
	for _, p := range mountsUnder(dir) {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists the mount points at or below dir, deepest first (none
// when mountinfo cannot be read).
func mountsUnder(dir string) []string {
	ms, _ := mountinfo.Below(dir)
	return ms
}

// waitUnmounted polls until nothing is mounted below dir, for removal.
func waitUnmounted(dir string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for len(mountsUnder(dir)) > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// rootTmp makes /tmp of the sandbox's root a world-writable sticky directory
// of its overlay, as in a container: what a job writes there lands in the
// private upper layer, so snapshots capture it and restore it. An image's
// /tmp that is not a directory (a symlink, say) is left as the image made it;
// it is never followed, since the root is not pivoted into yet.
func rootTmp(merged string, base uint32) error {
	t := filepath.Join(merged, "tmp")
	fi, err := os.Lstat(t)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(t, 0o755); err != nil {
			return fmt.Errorf("create /tmp: %w", err)
		}
	case err != nil:
		return fmt.Errorf("stat /tmp: %w", err)
	case !fi.IsDir():
		return nil
	case fi.Mode()&(os.ModePerm|os.ModeSticky) == 0o777|os.ModeSticky:
		return nil // already right: no copy-up into the upper layer
	}
	if err := os.Chmod(t, 0o777|os.ModeSticky); err != nil { // Mkdir is subject to the umask
		return fmt.Errorf("chmod /tmp: %w", err)
	}
	if err := os.Lchown(t, int(base), int(base)); err != nil { // the sandbox's root owns it
		return fmt.Errorf("chown /tmp: %w", err)
	}
	return nil
}

func overlay(lower []string, upper, work, target string) error {
	for _, d := range []string{upper, work, target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	lowers := make([]string, len(lower))
	for i, l := range lower {
		lowers[i] = escapeOverlay(l)
	}
	opts := "lowerdir=" + strings.Join(lowers, ":") + ",upperdir=" + escapeOverlay(upper) + ",workdir=" + escapeOverlay(work)
	// userxattr (user.overlay.*, Linux 5.11+) keeps overlayfs's own marks
	// (opaque directories) in the xattr namespace that snapshots record and
	// restore with the files. Older kernels get the plain mount. nosuid and
	// nodev: a setuid file or a device node a sandbox made is inert on the
	// host, where the root is mounted too.
	const flags = unix.MS_NOSUID | unix.MS_NODEV
	if err := unix.Mount("overlay", target, "overlay", flags, opts+",userxattr"); err == nil {
		return nil
	}
	if err := unix.Mount("overlay", target, "overlay", flags, opts); err != nil {
		return fmt.Errorf("mount overlay on %s: %w", target, err)
	}
	return nil
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func escapeOverlay(p string) string {
	return strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`).Replace(p)
}

// runDirFor is the run directory of the server on dataDir, below root.
func runDirFor(root, dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(root, hex.EncodeToString(sum[:6]))
}
