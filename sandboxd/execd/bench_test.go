package execd_test

import (
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/execd"
)

// BenchmarkEchoRoundTrip compares `echo hi` through POST /command over loopback (request,
// stream parse up to the terminal event) with a plain fork/exec of `sh -c 'echo hi'`. Each
// b.N iteration runs a fixed workload of rounds of both, so -benchtime 1x gives numbers too.
// Metrics: ratio (handler p50 / exec p50), p50-ms and p99-ms of the handler, exec-p50-ms.
func BenchmarkEchoRoundTrip(b *testing.B) {
	const rounds = 200
	s, err := execd.New(execd.Config{Root: b.TempDir(), Shell: "/bin/sh"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	hs := httptest.NewServer(s)
	defer hs.Close()
	client := hs.Client()

	viaHandler := func() {
		resp, err := client.Post(hs.URL+"/command", "application/json", strings.NewReader(`{"command":"echo hi"}`))
		if err != nil {
			b.Fatal(err)
		}
		evs, err := parseStream(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		if res := summarize(evs); len(res.stdout) != 1 || res.stdout[0] != "hi" {
			b.Fatalf("stdout = %q", res.stdout)
		}
	}
	viaExec := func() {
		out, err := exec.Command("/bin/sh", "-c", "echo hi").Output()
		if err != nil || string(out) != "hi\n" {
			b.Fatalf("exec: %q %v", out, err)
		}
	}
	var hd, ed []time.Duration
	b.ResetTimer()
	for range b.N {
		for range rounds {
			t0 := time.Now()
			viaExec()
			t1 := time.Now()
			viaHandler()
			hd = append(hd, time.Since(t1))
			ed = append(ed, t1.Sub(t0))
		}
	}
	b.StopTimer()
	pct := func(d []time.Duration, p float64) float64 {
		slices.Sort(d)
		return float64(d[int(float64(len(d)-1)*p)]) / float64(time.Millisecond)
	}
	hp50, hp99 := pct(hd, 0.50), pct(hd, 0.99)
	ep50, ep99 := pct(ed, 0.50), pct(ed, 0.99)
	b.ReportMetric(hp50/ep50, "ratio")
	b.ReportMetric(hp50, "p50-ms")
	b.ReportMetric(hp99, "p99-ms")
	b.ReportMetric(ep50, "exec-p50-ms")
	b.ReportMetric(ep99, "exec-p99-ms")
}
