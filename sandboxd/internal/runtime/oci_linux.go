package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The user namespace of a sandbox maps its ids 0..IDMapSize-1 to a range of
// host ids of its own (Sandbox.IDBase, which the server hands out from
// IDMapHost on): a sandbox's root is an unprivileged user on the host, and
// no other sandbox's.
const (
	IDMapHost = 100000
	IDMapSize = 65536
)

// InitDir holds the sandbox init (this binary, bind-mounted as
// InitDir/sandboxd-init) in every sandbox: on the /dev tmpfs, so that the
// mount point never lands in the sandbox's upper layer (and its snapshots).
// The init's PATH is InitDir alone, so its argv[0] is plain "sandboxd-init".
const InitDir = "/dev/.sandboxd"

// defaultCaps is Docker's default capability set (moby's oci/caps defaults).
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// maskedPaths and readonlyPaths are runc's (and Docker's) defaults.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap",
	}
	readonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// boundVolume is a volume as the spec binds it: Mount, the idmapped mount
// the server made of the volume's directory, at Destination.
type boundVolume struct {
	Destination string
	Mount       string
	ReadOnly    bool
}

// specInput is what one sandbox's OCI spec is made of.
type specInput struct {
	ID       string
	Root     string // the bundle's root: the merged overlay
	InitBin  string // host path of the binary bind-mounted at initPath
	Hostname string
	Netns    string // path of the sandbox's network namespace; "" shares the host's
	Limits   Limits
	Pids     int64
	ShmBytes int64
	Cgroup   string // cgroupsPath
	// CPULater leaves the CPU quota unlimited in the spec: the launcher
	// writes it once the sandbox runs (setCPULimit).
	CPULater bool
	Volumes  []boundVolume
	IDBase   uint32 // the first host id of the sandbox's range
}

// buildSpec returns the OCI runtime spec of a sandbox: Docker's default
// hardening (user namespace, seccomp profile, capabilities, no new
// privileges, masked and read-only paths) and its cgroup limits.
func buildSpec(in specInput) (*specs.Spec, error) {
	nofile := uint64(1 << 20)
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Max < nofile {
		nofile = rl.Max // a user namespace cannot raise the hard limit
	}
	ns := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
		{Type: specs.MountNamespace}, {Type: specs.UserNamespace},
	}
	if in.Netns != "" {
		ns = append(ns, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: in.Netns})
	}
	caps := append([]string(nil), defaultCaps...)
	sp := &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: in.Root},
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: []string{"sandboxd-init", in.ID},
			Env:  []string{initEnv + "=init", "PATH=" + InitDir},
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile}},
			NoNewPrivileges: true,
		},
		Hostname: in.Hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", fmt.Sprintf("size=%d", in.ShmBytes)}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			// sysfs cannot be mounted in a user namespace that does not own
			// the network namespace (ours is made by the server), so /sys is
			// the host's, read-only, and its cgroup tree the sandbox's own.
			{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
			{Destination: InitDir + "/sandboxd-init", Type: "bind", Source: in.InitBin, Options: []string{"bind", "ro", "nosuid", "nodev"}},
		},
		Linux: &specs.Linux{
			UIDMappings:   []specs.LinuxIDMapping{{ContainerID: 0, HostID: in.IDBase, Size: IDMapSize}},
			GIDMappings:   []specs.LinuxIDMapping{{ContainerID: 0, HostID: in.IDBase, Size: IDMapSize}},
			Namespaces:    ns,
			CgroupsPath:   in.Cgroup,
			Resources:     resources(in),
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
		},
	}
	// Volumes are binds of the idmapped mounts the server made of each
	// volume's directory (bindVolume), which no sandbox can change: the
	// runtime binds a mount, never a path it resolves itself.
	for _, v := range in.Volumes {
		opts := []string{"bind", "rprivate", "nosuid", "nodev"}
		if v.ReadOnly {
			opts = append(opts, "ro")
		}
		sp.Mounts = append(sp.Mounts, specs.Mount{Destination: v.Destination, Type: "bind", Source: v.Mount, Options: opts})
	}
	prof, err := seccomp.GetDefaultProfile(sp)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	sp.Linux.Seccomp = prof
	return sp, nil
}

// resources is the cgroup part of a sandbox's spec.
func resources(in specInput) *specs.LinuxResources {
	r := &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
		Pids:    &specs.LinuxPids{Limit: &in.Pids},
	}
	if in.Limits.MemoryBytes > 0 {
		m := in.Limits.MemoryBytes
		r.Memory = &specs.LinuxMemory{Limit: &m}
		if swapAccounting() {
			swap := m // memory+swap: no swap beyond the memory limit
			r.Memory.Swap = &swap
		}
	}
	if in.Limits.MilliCPU > 0 {
		quota, period := cpuBandwidth(in.Limits.MilliCPU)
		if in.CPULater {
			quota = -1 // the period set, the quota written once the sandbox runs
		}
		p := uint64(period)
		r.CPU = &specs.LinuxCPU{Period: &p, Quota: &quota}
	}
	return r
}

// cpuBandwidth returns the CFS quota and period, in microseconds, of a
// limit of milliCPU thousandths of a CPU: Docker's period of 100 ms.
func cpuBandwidth(milliCPU int64) (quota, period int64) {
	period = 100000
	return milliCPU * period / 1000, period
}

// swapAccounting reports whether the memory controller accounts swap (v1
// memory.memsw.*, v2 memory.swap.max): a swap limit is set only then.
func swapAccounting() bool {
	for _, p := range []string{"/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", "/sys/fs/cgroup/memory.swap.max"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// writeBundle writes sp as dir/config.json.
func writeBundle(dir string, sp *specs.Spec) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(sp)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}
