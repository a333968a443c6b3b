package sandboxd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/alineo-labs/alineo/sandboxd/internal/runtime"
)

// Volume is one entry of a create request's volumes: a host directory or a
// server-managed named volume bound at MountPath.
type Volume struct {
	Name      string      `json:"name"`
	MountPath string      `json:"mountPath"`
	ReadOnly  bool        `json:"readOnly,omitempty"`
	SubPath   string      `json:"subPath,omitempty"`
	Host      *HostVolume `json:"host,omitempty"`
	PVC       *PVCVolume  `json:"pvc,omitempty"`
}

// HostVolume is the host backend: a host path below one of Config.VolumeRoots.
type HostVolume struct {
	Path string `json:"path"`
}

// PVCVolume is the platform-managed backend: a named volume the server keeps
// under DataDir/volumes/<claimName>, shared by every sandbox that names it and
// kept across sandboxes.
type PVCVolume struct {
	ClaimName string `json:"claimName"`
	// CreateIfNotExists (default true) creates a missing volume; false makes a
	// missing one a 400.
	CreateIfNotExists *bool `json:"createIfNotExists,omitempty"`
	// DeleteOnSandboxTermination removes a volume this sandbox created when
	// the sandbox ends.
	DeleteOnSandboxTermination bool     `json:"deleteOnSandboxTermination,omitempty"`
	StorageClass               string   `json:"storageClass,omitempty"`
	Storage                    string   `json:"storage,omitempty"`
	AccessModes                []string `json:"accessModes,omitempty"`
}

// volumeMount is a resolved volume, recorded with the sandbox: the
// directory it binds is Dir below Root, found again from a descriptor of Root
// each time the sandbox starts (by the runtime, runtime.Volume), never by a
// path a sandbox could change in between.
type volumeMount struct {
	Name string `json:"name"`
	// Root is the directory the volume lies in: a --volume-root for a host
	// volume, DataDir/volumes/<claim> for a pvc one.
	Root string `json:"root"`
	// Dir is the volume's directory relative to Root ("" is Root itself).
	Dir         string `json:"dir,omitempty"`
	Destination string `json:"destination"`
	ReadOnly    bool   `json:"readOnly,omitempty"`
	// Remove is the managed volume directory to delete when the sandbox ends
	// (deleteOnSandboxTermination of a volume this sandbox created).
	Remove string `json:"remove,omitempty"`
}

// The real server's volume error codes.
const (
	codeVolumeName        = "VOLUME::INVALID_NAME"
	codeVolumeDuplicate   = "VOLUME::DUPLICATE_NAME"
	codeVolumeBackend     = "VOLUME::INVALID_BACKEND"
	codeVolumeUnsupported = "VOLUME::UNSUPPORTED_BACKEND"
	codeVolumeMountPath   = "VOLUME::INVALID_MOUNT_PATH"
	codeVolumeSubPath     = "VOLUME::INVALID_SUB_PATH"
	codeVolumeHostPath    = "VOLUME::INVALID_HOST_PATH"
	codeVolumeNotAllowed  = "VOLUME::HOST_PATH_NOT_ALLOWED"
	codeVolumePVCName     = "VOLUME::INVALID_PVC_NAME"
	codeVolumePVCNotFound = "VOLUME::PVC_NOT_FOUND"
)

var (
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	pvcName  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
)

// reservedMounts are paths a volume may not cover or sit below.
var reservedMounts = []string{"/proc", "/sys", "/dev"}

// volumeResolver resolves a create request's volumes to the directories
// its sandbox binds, and removes the managed volumes a sandbox created to go
// with it.
type volumeResolver struct {
	// dir is where the managed (pvc) volumes live: DataDir/volumes.
	dir string
	// roots are Config.VolumeRoots, resolved.
	roots       []string
	noIsolation bool
	// quota is the size of a managed volume's own disk when its request
	// names none (Config.VolumeQuota); negative: no disk, the data
	// directory's.
	quota int64
	log   *slog.Logger
	mu    sync.Mutex // creates of managed volumes
}

// volumeDisks, in the managed volumes' directory, holds each volume's disk
// image (<claim>.img), which is mounted on the volume's directory: the
// volume's quota. A dot name is no claim name.
const volumeDisks = ".disks"

// disk gives claim its disk (size bytes, made if missing) and mounts it on
// the claim's directory.
func (vr *volumeResolver) disk(claim string, size int64) error {
	if vr.quota < 0 || vr.noIsolation {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(vr.dir, volumeDisks), 0o700); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return runtime.VolumeDisk(ctx, filepath.Join(vr.dir, volumeDisks, claim+".img"), filepath.Join(vr.dir, claim), size)
}

// mountDisks mounts the disk of every managed volume that has one, at
// Open: the volumes of an earlier run come back with their quota.
func (vr *volumeResolver) mountDisks() error {
	ents, err := os.ReadDir(filepath.Join(vr.dir, volumeDisks))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		claim, ok := strings.CutSuffix(e.Name(), ".img")
		if !ok || !pvcName.MatchString(claim) {
			continue
		}
		if err := vr.disk(claim, 0); err != nil {
			return fmt.Errorf("volume %s: %w", claim, err)
		}
	}
	return nil
}

// unmountDisks detaches every managed volume's disk, at Close.
func (vr *volumeResolver) unmountDisks() error {
	ents, _ := os.ReadDir(filepath.Join(vr.dir, volumeDisks))
	var errs []error
	for _, e := range ents {
		if claim, ok := strings.CutSuffix(e.Name(), ".img"); ok && pvcName.MatchString(claim) {
			errs = append(errs, runtime.UnmountVolume(filepath.Join(vr.dir, claim)))
		}
	}
	return errors.Join(errs...)
}

// parseVolumes decodes and validates the volumes of a create request (absent,
// null and [] are none). It checks no file system state.
func parseVolumes(raw json.RawMessage) ([]Volume, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalid("INVALID_REQUEST", "volumes", "want an array of volume objects: %v", err)
	}
	out := make([]Volume, 0, len(items))
	seen := map[string]bool{}
	for i, item := range items {
		for k := range item {
			switch k {
			case "name", "mountPath", "readOnly", "subPath", "host", "pvc":
			default:
				return nil, invalid(codeVolumeUnsupported, fmt.Sprintf("volumes[%d].%s", i, k), "backend %q is not supported by this server (only host and pvc)", k)
			}
		}
		b, _ := json.Marshal(item)
		var v Volume
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, invalid("INVALID_REQUEST", fmt.Sprintf("volumes[%d]", i), "%v", err)
		}
		if err := v.validate(i); err != nil {
			return nil, err
		}
		if seen[v.Name] {
			return nil, invalid(codeVolumeDuplicate, fmt.Sprintf("volumes[%d].name", i), "duplicate volume name %q", v.Name)
		}
		seen[v.Name] = true
		out = append(out, v)
	}
	dests := map[string]bool{}
	for i, v := range out {
		d := path.Clean(v.MountPath)
		if dests[d] {
			return nil, invalid(codeVolumeMountPath, fmt.Sprintf("volumes[%d].mountPath", i), "mount path %s is used twice", d)
		}
		dests[d] = true
	}
	return out, nil
}

func (v *Volume) validate(i int) error {
	field := func(f string) string { return fmt.Sprintf("volumes[%d].%s", i, f) }
	if !dnsLabel.MatchString(v.Name) {
		return invalid(codeVolumeName, field("name"), "volume name %q is not a DNS label", v.Name)
	}
	mp := v.MountPath
	if !path.IsAbs(mp) || strings.Contains(mp, "\x00") || slices.Contains(strings.Split(mp, "/"), "..") {
		return invalid(codeVolumeMountPath, field("mountPath"), "mount path %q must be an absolute path without ..", mp)
	}
	clean := path.Clean(mp)
	if clean == "/" || clean == runtime.InitDir || strings.HasPrefix(clean, runtime.InitDir+"/") {
		return invalid(codeVolumeMountPath, field("mountPath"), "mount path %q is reserved", mp)
	}
	for _, r := range reservedMounts {
		if clean == r || strings.HasPrefix(clean, r+"/") {
			return invalid(codeVolumeMountPath, field("mountPath"), "mount path %q is reserved", mp)
		}
	}
	if sp := v.SubPath; sp != "" {
		if path.IsAbs(sp) || strings.Contains(sp, "\x00") || slices.Contains(strings.Split(sp, "/"), "..") {
			return invalid(codeVolumeSubPath, field("subPath"), "subPath %q must be a relative path without ..", sp)
		}
	}
	switch {
	case v.Host == nil && v.PVC == nil:
		return invalid(codeVolumeBackend, field("name"), "volume %q must specify exactly one backend (host, pvc), but none was provided", v.Name)
	case v.Host != nil && v.PVC != nil:
		return invalid(codeVolumeBackend, field("name"), "volume %q must specify exactly one backend (host, pvc), but multiple were provided", v.Name)
	case v.Host != nil:
		p := v.Host.Path
		if !filepath.IsAbs(p) || strings.Contains(p, "\x00") || slices.Contains(strings.Split(p, "/"), "..") {
			return invalid(codeVolumeHostPath, field("host.path"), "host path %q must be an absolute path without ..", p)
		}
	case v.PVC != nil:
		if !pvcName.MatchString(v.PVC.ClaimName) {
			return invalid(codeVolumePVCName, field("pvc.claimName"), "claim name %q is not a valid volume name (lowercase letters, digits, '-' and '.')", v.PVC.ClaimName)
		}
	}
	return nil
}

// resolveVolumes turns validated volumes into the directories to bind,
// creating what is missing: a host volume's path must lie below one of
// Config.VolumeRoots; a pvc volume is DataDir/volumes/<claimName>, created
// unless createIfNotExists is false. Every directory is found and made from
// a descriptor of the one above it, never through a symbolic link
// (runtime.OpenBeneath), so a sandbox that shares the volume cannot lead the
// server out of it; what is made belongs to host root, which a sandbox sees
// as its own root through its idmapped bind.
func (vr *volumeResolver) resolveVolumes(vols []Volume) ([]volumeMount, error) {
	if len(vols) > 0 && vr.noIsolation {
		return nil, invalid("INVALID_REQUEST", "volumes", "volumes need a mount namespace; this server runs without isolation (NoIsolation)")
	}
	out := make([]volumeMount, 0, len(vols))
	for i, v := range vols {
		m := volumeMount{Name: v.Name, Destination: path.Clean(v.MountPath), ReadOnly: v.ReadOnly}
		var err error
		if v.Host != nil {
			err = vr.hostVolume(i, v, &m)
		} else {
			err = vr.pvcVolume(i, v, &m)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func (vr *volumeResolver) hostVolume(i int, v Volume, m *volumeMount) error {
	field := fmt.Sprintf("volumes[%d].host.path", i)
	p := filepath.Join(v.Host.Path, v.SubPath)
	if len(vr.roots) == 0 {
		return invalid(codeVolumeNotAllowed, field, "host path %s is not allowed: this server allows no host volumes (see --volume-root)", p)
	}
	for _, root := range vr.roots {
		if p == root || strings.HasPrefix(p, root+"/") {
			m.Root, m.Dir = root, strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
			break
		}
	}
	if m.Root == "" {
		return invalid(codeVolumeNotAllowed, field, "host path %s is not below an allowed volume root (%s)", p, strings.Join(vr.roots, ", "))
	}
	fd, err := runtime.OpenBeneath(m.Root, m.Dir, true)
	if errors.Is(err, runtime.ErrLeavesRoot) {
		return invalid(codeVolumeNotAllowed, field, "host path %s leads through a symbolic link, which volumes do not follow (only the volume roots are resolved)", p)
	}
	if err != nil {
		return volumeError(codeVolumeHostPath, field, "host path "+p, err)
	}
	unix.Close(fd)
	return nil
}

func (vr *volumeResolver) pvcVolume(i int, v Volume, m *volumeMount) error {
	field := fmt.Sprintf("volumes[%d].pvc.claimName", i)
	claim := v.PVC.ClaimName
	vr.mu.Lock()
	defer vr.mu.Unlock()
	fd, err := runtime.OpenBeneath(vr.dir, claim, false)
	created := false
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if v.PVC.CreateIfNotExists != nil && !*v.PVC.CreateIfNotExists {
			return invalid(codeVolumePVCNotFound, field, "volume %s does not exist and createIfNotExists is false", claim)
		}
		size := vr.quota
		if v.PVC.Storage != "" {
			if size, err = ParseSize(v.PVC.Storage); err != nil || size <= 0 {
				return invalid("INVALID_REQUEST", fmt.Sprintf("volumes[%d].pvc.storage", i), "storage %q is not a size such as 1Gi", v.PVC.Storage)
			}
		}
		if fd, err = runtime.OpenBeneath(vr.dir, claim, true); err != nil {
			return fmt.Errorf("create volume %s: %w", claim, err)
		}
		unix.Close(fd)
		if err := vr.disk(claim, size); err != nil {
			_ = os.Remove(filepath.Join(vr.dir, claim))
			return fmt.Errorf("create volume %s: %w", claim, err)
		}
		if fd, err = runtime.OpenBeneath(vr.dir, claim, false); err != nil {
			return fmt.Errorf("create volume %s: %w", claim, err)
		}
		created = true
	case err != nil:
		return volumeError(codeVolumePVCName, field, "volume "+claim, err)
	}
	unix.Close(fd)
	m.Root = filepath.Join(vr.dir, claim)
	if v.SubPath != "" {
		m.Dir = path.Clean(v.SubPath)
		fd, err := runtime.OpenBeneath(m.Root, m.Dir, true)
		if err != nil {
			return volumeError(codeVolumeSubPath, fmt.Sprintf("volumes[%d].subPath", i), "subPath "+v.SubPath, err)
		}
		unix.Close(fd)
	}
	if created && v.PVC.DeleteOnSandboxTermination {
		m.Remove = m.Root
	}
	return nil
}

// volumeError is the 400 for a volume directory that cannot be opened
// beneath its root: through a symbolic link, not a directory, or missing; any
// other failure is the server's.
func volumeError(code, field, what string, err error) error {
	switch {
	case errors.Is(err, runtime.ErrLeavesRoot):
		return invalid(code, field, "%s leads through a symbolic link, which volumes do not follow", what)
	case errors.Is(err, unix.ENOTDIR):
		return invalid(code, field, "%s: a component is not a directory", what)
	case errors.Is(err, fs.ErrNotExist):
		return invalid(code, field, "%s does not exist", what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// removeVolumes deletes the managed volumes a sandbox created with
// deleteOnSandboxTermination, once it ended.
func (vr *volumeResolver) removeVolumes(ms []volumeMount) {
	for _, m := range ms {
		if m.Remove == "" || filepath.Dir(m.Remove) != vr.dir {
			continue
		}
		if err := runtime.UnmountVolume(m.Remove); err != nil {
			vr.log.Warn("sandboxd: unmount volume", "dir", m.Remove, "err", err)
			continue
		}
		_ = os.Remove(filepath.Join(vr.dir, volumeDisks, filepath.Base(m.Remove)+".img"))
		if err := os.RemoveAll(m.Remove); err != nil {
			vr.log.Warn("sandboxd: remove volume", "dir", m.Remove, "err", err)
		}
	}
}

// resolveVolumeRoots cleans and resolves Config.VolumeRoots (they are the
// operator's: symbolic links in them are followed once, here).
func resolveVolumeRoots(roots []string) ([]string, error) {
	out := make([]string, 0, len(roots))
	for _, r := range roots {
		if !filepath.IsAbs(r) {
			return nil, fmt.Errorf("%w: volume root %q is not an absolute path", ErrInvalidConfig, r)
		}
		real, err := filepath.EvalSymlinks(r)
		if err != nil {
			return nil, fmt.Errorf("%w: volume root %q: %w", ErrInvalidConfig, r, err)
		}
		if real == "/" {
			return nil, fmt.Errorf("%w: volume root %q is the host's root", ErrInvalidConfig, r)
		}
		out = append(out, real)
	}
	return out, nil
}

// volumeIDsMark, in DataDir/volumes, says its files hold the ids their
// sandboxes see (0..), as the runtime's idmapped binds show them. A data
// directory from before held them as host ids of the one shared range
// (IDMapHost..): the first Open shifts them down once (shiftVolumeIDs).
const volumeIDsMark = ".sandbox-ids"

// prepareVolumes makes dir, the managed volumes' directory, private to
// host root (0700: sandboxes reach a volume only through its bind, and what
// they write there is owned by host ids from 0), and shifts the files an
// earlier version left in the shared host range to the ids their sandboxes
// see, once, marking dir. It follows no symbolic link.
func prepareVolumes(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("volumes dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("volumes dir: %w", err)
	}
	mark := filepath.Join(dir, volumeIDsMark)
	if _, err := os.Lstat(mark); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	shift := func(id uint32) int {
		if id >= IDMapHost && id < IDMapHost+IDMapSize {
			return int(id - IDMapHost)
		}
		return -1 // unchanged
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		uid, gid := shift(st.Uid), shift(st.Gid)
		if uid < 0 && gid < 0 {
			return nil
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return err
		}
		// chown clears setuid and setgid on files: put back what was there.
		if d.Type().IsRegular() && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			return unix.Fchmodat(unix.AT_FDCWD, p, st.Mode&0o7777, 0)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("shift the ids of the managed volumes: %w", err)
	}
	return os.WriteFile(mark, nil, 0o600)
}
