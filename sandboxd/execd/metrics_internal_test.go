package execd

import (
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestPIDNamespaceMetrics re-runs this test inside a new PID namespace (unshare(1) with its own
// /proc), where the metrics come from the namespace's processes rather than the host.
func TestPIDNamespaceMetrics(t *testing.T) {
	if os.Getenv("EXECD_TEST_IN_PIDNS") == "1" {
		sec, rss, ok := pidNamespaceUsage()
		m := sampleMetrics(50*time.Millisecond, nil)
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"ok": ok, "sec": sec, "rss": rss, "m": m})
		return
	}
	if _, _, ok := pidNamespaceUsage(); ok {
		t.Skip("already in a child PID namespace")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for unshare --pid; run the tests as root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare(1) not installed")
	}
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", os.Args[0], "-test.run=^TestPIDNamespaceMetrics$")
	cmd.Env = append(os.Environ(), "EXECD_TEST_IN_PIDNS=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("unshare: %v (%s)", err, out)
	}
	var got struct {
		OK  bool    `json:"ok"`
		Sec float64 `json:"sec"`
		RSS uint64  `json:"rss"`
		M   metrics `json:"m"`
	}
	if err := json.Unmarshal(firstLine(out), &got); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	t.Logf("in a PID namespace: cpu %.2fs, rss %d bytes, metrics %+v", got.Sec, got.RSS, got.M)
	if !got.OK || got.RSS == 0 || got.Sec < 0 {
		t.Fatalf("in a PID namespace: %+v, want ok with a resident set", got)
	}
	// Without a cgroup, memory used is the namespace's resident set (a test binary: well under
	// 1 GiB), not the machine's.
	if _, ok := cgroupPath("memory"); !ok && got.M.MemUsedMiB > 1024 {
		t.Fatalf("mem_used_mib = %.1f, want the namespace's processes only", got.M.MemUsedMiB)
	}
}

func firstLine(b []byte) []byte {
	for i, c := range b {
		if c == '\n' {
			return b[:i]
		}
	}
	return b
}
