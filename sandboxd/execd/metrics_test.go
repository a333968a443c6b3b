package execd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/execd"
)

type metricsBody struct {
	CPUCount    *float64 `json:"cpu_count"`
	CPUUsedPct  *float64 `json:"cpu_used_pct"`
	MemTotalMiB *float64 `json:"mem_total_mib"`
	MemUsedMiB  *float64 `json:"mem_used_mib"`
	Timestamp   *int64   `json:"timestamp"`
}

func checkMetrics(t *testing.T, b []byte) {
	t.Helper()
	var m metricsBody
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("metrics %q: %v", b, err)
	}
	if m.CPUCount == nil || m.CPUUsedPct == nil || m.MemTotalMiB == nil || m.MemUsedMiB == nil || m.Timestamp == nil {
		t.Fatalf("metrics %s: a required field is missing", b)
	}
	if *m.CPUCount < 1 || *m.CPUUsedPct < 0 || *m.CPUUsedPct > 100 || *m.MemTotalMiB <= 0 ||
		*m.MemUsedMiB <= 0 || *m.MemUsedMiB > *m.MemTotalMiB {
		t.Fatalf("metrics out of range: %s", b)
	}
	if d := time.Since(time.UnixMilli(*m.Timestamp)); d < 0 || d > time.Minute {
		t.Fatalf("timestamp %d is %v from now", *m.Timestamp, d)
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, execd.Config{})
	resp := e.do("GET", "/metrics", nil)
	checkMetrics(t, wantStatus(t, resp, 200))
	if got := resp.Header.Get("Content-Type"); got != "application/json; charset=utf-8" {
		t.Fatalf("Content-Type = %q", got)
	}
}

func TestWatchMetrics(t *testing.T) {
	e := newEnv(t, execd.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.http.URL+"/metrics/watch", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	// Lines are `{...}\n` with no blank line between them (API-NOTES §7).
	for i := 0; i < 2; i++ {
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		checkMetrics(t, line)
	}
}
