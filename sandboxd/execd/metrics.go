package execd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Metrics sampling windows. The real execd samples CPU for about 1 s per /metrics call; a
// shorter window keeps /metrics responsive, /metrics/watch uses the full second per line.
const (
	metricsWindow = 250 * time.Millisecond
	watchInterval = time.Second
	cgroupRoot    = "/sys/fs/cgroup"
)

type metrics struct {
	CPUCount    float64 `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotalMiB float64 `json:"mem_total_mib"`
	MemUsedMiB  float64 `json:"mem_used_mib"`
	Timestamp   int64   `json:"timestamp"`
}

// What the numbers mean, from the first source that works:
//  1. the cgroup execd runs in (cgroup v2, or the v1 cpuacct and memory controllers): for an
//     isolated sandbox with /sys/fs/cgroup visible, the sandbox's cgroup;
//  2. inside a PID namespace other than the host's (an isolated sandbox without cgroupfs), the
//     processes of that namespace: CPU time of every process in /proc (children's time included)
//     and the sum of their resident sets, against the machine's memory;
//  3. otherwise /proc/stat and /proc/meminfo, i.e. the whole machine.
//
// In --no-isolation mode execd shares its parent's cgroup and PID namespace, so the numbers
// describe that cgroup (often the whole host), not one sandbox. cpu_count is GOMAXPROCS
// (cgroup-aware), as in the real execd.

// cpuSample is a cumulative CPU reading. For the cgroup and PID-namespace sources used is CPU
// seconds and total wall seconds (perCPU: divide by the CPU count); for /proc/stat both are
// jiffies of all CPUs.
type cpuSample struct {
	used   float64
	total  float64
	perCPU bool
	source string
}

func readCPU() cpuSample {
	now := float64(time.Now().UnixNano()) / 1e9
	if sec, ok := cgroupCPUSeconds(); ok {
		return cpuSample{used: sec, total: now, perCPU: true, source: "cgroup"}
	}
	if sec, _, ok := pidNamespaceUsage(); ok {
		return cpuSample{used: sec, total: now, perCPU: true, source: "pidns"}
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSample{}
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	var total, idle float64
	for i, v := range f[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		total += x
		if i == 3 || i == 4 { // idle, iowait
			idle += x
		}
	}
	return cpuSample{used: total - idle, total: total, source: "host"}
}

// initialPIDNamespace is PROC_PID_INIT_INO, the inode of the host's PID namespace.
const initialPIDNamespace = "pid:[4026531836]"

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat (100 on every Linux ABI Go runs on).
const clockTicks = 100

// pidNamespaceUsage sums CPU seconds (own and reaped children's) and resident bytes over the
// processes of execd's PID namespace. ok is false in the host's namespace.
func pidNamespaceUsage() (cpuSec float64, rss uint64, ok bool) {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil || ns == initialPIDNamespace {
		return 0, 0, false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, false
	}
	page := uint64(os.Getpagesize())
	var ticks uint64
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 22 {
			continue
		}
		for _, k := range []int{11, 12, 13, 14} { // utime stime cutime cstime
			v, _ := strconv.ParseUint(f[k], 10, 64)
			ticks += v
		}
		if v, err := strconv.ParseUint(f[21], 10, 64); err == nil { // rss in pages
			rss += v * page
		}
	}
	return float64(ticks) / clockTicks, rss, true
}

func cpuPercent(a, b cpuSample, ncpu float64) float64 {
	dt := b.total - a.total
	if dt <= 0 || a.source != b.source {
		return 0
	}
	pct := (b.used - a.used) / dt * 100
	if a.perCPU {
		pct /= ncpu
	}
	return min(max(pct, 0), 100)
}

// cgroupPath returns this process's cgroup path for a v1 controller, or for v2 when controller is "".
func cgroupPath(controller string) (string, bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if controller == "" && parts[0] == "0" && parts[1] == "" {
			return filepath.Join(cgroupRoot, parts[2]), true
		}
		for _, c := range strings.Split(parts[1], ",") {
			if controller != "" && c == controller {
				return filepath.Join(cgroupRoot, controller, parts[2]), true
			}
		}
	}
	return "", false
}

func readUint(p string) (uint64, bool) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

func cgroupCPUSeconds() (float64, bool) {
	if dir, ok := cgroupPath("cpuacct"); ok {
		if ns, ok := readUint(filepath.Join(dir, "cpuacct.usage")); ok {
			return float64(ns) / 1e9, true
		}
	}
	if dir, ok := cgroupPath(""); ok {
		if v, ok := statField(filepath.Join(dir, "cpu.stat"), "usage_usec"); ok {
			return float64(v) / 1e6, true
		}
	}
	return 0, false
}

func statField(p, key string) (uint64, bool) {
	f, err := os.Open(p)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// readMemory returns total and used bytes.
func readMemory() (total, used float64) {
	var memTotal, memAvail uint64
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			v, _ := strconv.ParseUint(f[1], 10, 64)
			switch f[0] {
			case "MemTotal:":
				memTotal = v * 1024
			case "MemAvailable:":
				memAvail = v * 1024
			}
		}
	}
	total, used = float64(memTotal), float64(memTotal-min(memAvail, memTotal))
	if dir, ok := cgroupPath("memory"); ok {
		if u, ok := readUint(filepath.Join(dir, "memory.usage_in_bytes")); ok {
			inactive, _ := statField(filepath.Join(dir, "memory.stat"), "total_inactive_file")
			used = float64(u - min(inactive, u))
			if l, ok := readUint(filepath.Join(dir, "memory.limit_in_bytes")); ok && l < memTotal {
				total = float64(l)
			}
			return total, used
		}
	}
	if dir, ok := cgroupPath(""); ok {
		if u, ok := readUint(filepath.Join(dir, "memory.current")); ok {
			inactive, _ := statField(filepath.Join(dir, "memory.stat"), "inactive_file")
			used = float64(u - min(inactive, u))
			if l, ok := readUint(filepath.Join(dir, "memory.max")); ok && l < memTotal {
				total = float64(l)
			}
			return total, used
		}
	}
	if _, rss, ok := pidNamespaceUsage(); ok {
		used = float64(rss)
	}
	return total, used
}

// sampleMetrics measures CPU over window (or until done closes) and reads memory.
func sampleMetrics(window time.Duration, done <-chan struct{}) metrics {
	ncpu := float64(runtime.GOMAXPROCS(0))
	a := readCPU()
	t := time.NewTimer(window)
	select {
	case <-t.C:
	case <-done:
		t.Stop()
	}
	b := readCPU()
	total, used := readMemory()
	return metrics{
		CPUCount:    ncpu,
		CPUUsedPct:  cpuPercent(a, b, ncpu),
		MemTotalMiB: total / (1 << 20),
		MemUsedMiB:  used / (1 << 20),
		Timestamp:   nowMs(),
	}
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, sampleMetrics(metricsWindow, r.Context().Done()))
	return nil
}

// handleWatchMetrics streams one JSON object per line (no blank line, as the real execd) about
// every second until the client goes away or the server closes.
func (s *Server) handleWatchMetrics(w http.ResponseWriter, r *http.Request) error {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ctx := r.Context()
	for {
		m := sampleMetrics(watchInterval, ctx.Done())
		select {
		case <-ctx.Done():
			return nil
		case <-s.closing:
			return nil
		default:
		}
		b, _ := json.Marshal(m)
		if _, err := w.Write(append(b, '\n')); err != nil {
			return nil
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
	}
}
