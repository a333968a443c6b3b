package api_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// BenchmarkDashboard100k: the dashboard's pages (the list unfiltered, by
// status, by name and deep in the list; a sandbox page; a run page) over a
// read model of 100k sessions, against the baseline of the JSON list route
// answering the same first page. Reports p50/p99/max of the pages and the
// p50 ratio; each page must answer within 200 ms. The failed-exec filter,
// which reads up to 1000 sessions from the ledger, is reported apart
// (p50 and its ratio to the baseline) and must answer within 1 s.
func BenchmarkDashboard100k(b *testing.B) {
	const sessions = 100_000
	e := newEnv(b, token)
	ts := seedSessions(b, e, sessions)
	pages := []string{
		"/", "/?status=running", "/?name=svc-7", fmt.Sprintf("/?before=%d", ts+sessions/2),
		"/ui/sandboxes/svc-1/sb000001", "/ui/runs/sb000001", "/ui/sandboxes/svc-1/sb000001/execs/1",
		fmt.Sprintf("/?from=%d&to=%d", ts+sessions/4, ts+sessions/2),
	}
	// The failed-exec filter reads sessions from the ledger, up to 1000 a
	// page: measured apart, against its own bound. None of the seeded
	// sessions failed, so each page reads the most it may.
	const failedPage = "/?failed=1"
	get := func(path string, want int) time.Duration {
		req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		if resp.StatusCode != want {
			b.Fatalf("%s: %d, want %d", path, resp.StatusCode, want)
		}
		return d
	}
	const rounds = 20
	var base, dash []time.Duration
	var worst time.Duration
	b.ResetTimer()
	for range b.N {
		for range rounds {
			base = append(base, get("/v1/sandboxes?limit=200", 200))
			for _, p := range pages {
				want := 200
				if p == "/ui/sandboxes/svc-1/sb000001/execs/1" {
					want = 404 // the seeded sessions have no execs: the not-found page
				}
				d := get(p, want)
				dash = append(dash, d)
				worst = max(worst, d)
			}
		}
	}
	var failed []time.Duration
	for range b.N {
		for range rounds / 4 {
			failed = append(failed, get(failedPage, 200))
		}
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(failed, 0.5)), "failed-filter-p50-ms")
	b.ReportMetric(float64(percentile(failed, 0.5))/float64(percentile(base, 0.5)), "failed-filter-ratio")
	if p99 := percentile(failed, 0.99); p99 > time.Second {
		b.Errorf("failed-exec filter p99 %v over 100k sessions, want under 1 s", p99)
	}
	b.ReportMetric(ms(percentile(dash, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(dash, 0.99)), "p99-ms")
	b.ReportMetric(ms(worst), "max-ms")
	b.ReportMetric(ms(percentile(base, 0.5)), "json-p50-ms")
	b.ReportMetric(float64(percentile(dash, 0.5))/float64(percentile(base, 0.5)), "ratio")
	if p99 := percentile(dash, 0.99); p99 > 200*time.Millisecond {
		b.Errorf("dashboard p99 %v over 100k sessions, want under 200 ms", p99)
	}
}
