package sandboxd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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

// volumeMount is a resolved volume: what the OCI spec binds, recorded with
// the sandbox.
type volumeMount struct {
	Name        string `json:"name"`
	Source      string `json:"source"` // host path
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

// volumesDir is where the managed (pvc) volumes live.
func (s *Server) volumesDir() string { return filepath.Join(s.dataDir, "volumes") }

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
	if clean == "/" || clean == initDir || strings.HasPrefix(clean, initDir+"/") {
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

// resolveVolumes turns validated volumes into bind mounts: a host path must
// lie, symbolic links resolved, below one of Config.VolumeRoots (a missing
// directory is created there, as the real server does); a pvc volume is
// DataDir/volumes/<claimName>, created (owned by the sandboxes' root, host uid
// IDMapHost) unless createIfNotExists is false.
func (s *Server) resolveVolumes(vols []Volume) ([]volumeMount, error) {
	if len(vols) > 0 && s.cfg.NoIsolation {
		return nil, invalid("INVALID_REQUEST", "volumes", "volumes need a mount namespace; this server runs without isolation (NoIsolation)")
	}
	out := make([]volumeMount, 0, len(vols))
	for i, v := range vols {
		m := volumeMount{Name: v.Name, Destination: path.Clean(v.MountPath), ReadOnly: v.ReadOnly}
		var err error
		if v.Host != nil {
			m.Source, err = s.hostVolume(i, v)
		} else {
			m.Source, m.Remove, err = s.pvcVolume(i, v)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func (s *Server) hostVolume(i int, v Volume) (string, error) {
	field := fmt.Sprintf("volumes[%d].host.path", i)
	p := filepath.Join(v.Host.Path, v.SubPath)
	if len(s.volumeRoots) == 0 {
		return "", invalid(codeVolumeNotAllowed, field, "host path %s is not allowed: this server allows no host volumes (see --volume-root)", p)
	}
	allowed := func(q string) bool {
		for _, root := range s.volumeRoots {
			if q == root || strings.HasPrefix(q, root+"/") {
				return true
			}
		}
		return false
	}
	if !allowed(p) {
		return "", invalid(codeVolumeNotAllowed, field, "host path %s is not below an allowed volume root (%s)", p, strings.Join(s.volumeRoots, ", "))
	}
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		if err := s.mkdirBelow(p, allowed); err != nil {
			return "", fmt.Errorf("volume %s: create host path %s: %w", v.Name, p, err)
		}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", invalid(codeVolumeHostPath, field, "host path %s: %v", p, err)
	}
	if !allowed(real) {
		return "", invalid(codeVolumeNotAllowed, field, "host path %s resolves to %s, which is not below an allowed volume root", p, real)
	}
	return real, nil
}

// mkdirBelow creates directory p and its missing parents, each checked to
// stay allowed once resolved (a symbolic link in between cannot lead out).
func (s *Server) mkdirBelow(p string, allowed func(string) bool) error {
	parent := filepath.Dir(p)
	if _, err := os.Lstat(parent); errors.Is(err, fs.ErrNotExist) {
		if err := s.mkdirBelow(parent, allowed); err != nil {
			return err
		}
	}
	rp, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return err
	}
	if !allowed(rp) {
		return fmt.Errorf("%s resolves outside the volume roots", parent)
	}
	if err := os.Mkdir(filepath.Join(rp, filepath.Base(p)), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

func (s *Server) pvcVolume(i int, v Volume) (src, remove string, err error) {
	field := fmt.Sprintf("volumes[%d].pvc.claimName", i)
	dir := filepath.Join(s.volumesDir(), v.PVC.ClaimName)
	s.volMu.Lock()
	defer s.volMu.Unlock()
	if err := os.MkdirAll(s.volumesDir(), 0o711); err != nil {
		return "", "", fmt.Errorf("volumes dir: %w", err)
	}
	created := false
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if v.PVC.CreateIfNotExists != nil && !*v.PVC.CreateIfNotExists {
			return "", "", invalid(codeVolumePVCNotFound, field, "volume %s does not exist and createIfNotExists is false", v.PVC.ClaimName)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", "", fmt.Errorf("create volume %s: %w", v.PVC.ClaimName, err)
		}
		created = true
	} else if err != nil {
		return "", "", fmt.Errorf("volume %s: %w", v.PVC.ClaimName, err)
	}
	if created && !s.cfg.NoIsolation {
		// The sandbox's root is host uid IDMapHost: it owns the new volume.
		if err := os.Lchown(dir, IDMapHost, IDMapHost); err != nil {
			return "", "", fmt.Errorf("chown volume %s: %w", v.PVC.ClaimName, err)
		}
	}
	src = dir
	if v.SubPath != "" {
		src = filepath.Join(dir, v.SubPath)
		// Directories made for the subPath belong to the sandboxes' root too.
		var missing []string
		for d := src; d != dir; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); errors.Is(err, fs.ErrNotExist) {
				missing = append(missing, d)
			}
		}
		if err := os.MkdirAll(src, 0o755); err != nil {
			return "", "", fmt.Errorf("volume %s: subPath %s: %w", v.PVC.ClaimName, v.SubPath, err)
		}
		for _, d := range missing {
			if err := os.Lchown(d, IDMapHost, IDMapHost); err != nil {
				return "", "", fmt.Errorf("volume %s: chown subPath %s: %w", v.PVC.ClaimName, v.SubPath, err)
			}
		}
		if real, err := filepath.EvalSymlinks(src); err != nil || (real != dir && !strings.HasPrefix(real, dir+"/")) {
			return "", "", invalid(codeVolumeSubPath, fmt.Sprintf("volumes[%d].subPath", i), "subPath %s leaves the volume", v.SubPath)
		} else {
			src = real
		}
	}
	if created && v.PVC.DeleteOnSandboxTermination {
		remove = dir
	}
	return src, remove, nil
}

// removeVolumes deletes the managed volumes a sandbox created with
// deleteOnSandboxTermination, once it ended.
func (s *Server) removeVolumes(ms []volumeMount) {
	for _, m := range ms {
		if m.Remove == "" || filepath.Dir(m.Remove) != s.volumesDir() {
			continue
		}
		if err := os.RemoveAll(m.Remove); err != nil {
			s.log.Warn("sandboxd: remove volume", "dir", m.Remove, "err", err)
		}
	}
}

// resolveVolumeRoots cleans and resolves Config.VolumeRoots.
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
