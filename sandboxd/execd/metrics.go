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

// What the numbers mean: the CPU and memory of the cgroup execd runs in (cgroup v2, or the v1
// cpuacct and memory controllers), which for an isolated sandbox is the sandbox's cgroup. When
// no cgroup file is readable (e.g. /sys/fs/cgroup is not mounted in the sandbox) they fall back
// to /proc/stat and /proc/meminfo, i.e. the whole machine. In --no-isolation mode execd is in
// its parent's cgroup, so the numbers describe that cgroup (often the whole host), not one
// sandbox. cpu_count is GOMAXPROCS (cgroup-aware), as in the real execd.

// cpuSample is a cumulative CPU reading: used and wall are in the same unit for one source.
type cpuSample struct {
	used  float64 // CPU time used (seconds), cgroup; or busy jiffies, /proc/stat
	total float64 // wall time (seconds) for cgroup; all jiffies for /proc/stat
	cg    bool
}

func readCPU() cpuSample {
	if ns, ok := cgroupCPUSeconds(); ok {
		return cpuSample{used: ns, total: float64(time.Now().UnixNano()) / 1e9, cg: true}
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
	return cpuSample{used: total - idle, total: total}
}

func cpuPercent(a, b cpuSample, ncpu float64) float64 {
	dt := b.total - a.total
	if dt <= 0 || a.cg != b.cg {
		return 0
	}
	pct := (b.used - a.used) / dt * 100
	if a.cg {
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
		}
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
