package execd_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/alineo-labs/alineo/sandboxd/execd"
)

func p50(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkPTYKeystrokeEcho measures a keystroke sent over the PTY WebSocket until its echo
// comes back (target p50 < 5 ms). Metric: p50-ms.
func BenchmarkPTYKeystrokeEcho(b *testing.B) {
	s, err := execd.New(execd.Config{Root: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	hs := httptest.NewServer(s)
	defer hs.Close()
	ctx := context.Background()
	resp, err := hs.Client().Post(hs.URL+"/pty", "application/json", strings.NewReader(`{"command":"cat"}`))
	if err != nil {
		b.Fatal(err)
	}
	var created struct {
		SessionID string `json:"session_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/pty/"+created.SessionID+"/ws", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.CloseNow()
	if _, _, err := c.Read(ctx); err != nil { // connected
		b.Fatal(err)
	}
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := c.Write(ctx, websocket.MessageBinary, []byte{0, 'x'}); err != nil {
			b.Fatal(err)
		}
		if _, m, err := c.Read(ctx); err != nil || len(m) < 2 {
			b.Fatalf("echo: %q %v", m, err)
		}
		lat = append(lat, time.Since(start))
	}
	b.ReportMetric(ms(p50(lat)), "p50-ms")
}

// BenchmarkCodeContextRoundTrip compares `1+1` in a python code context (POST /code) with a
// fresh `python3 -c 1+1` (target ratio ≤ 0.2). Metrics: ratio, ctx-p50-ms, exec-p50-ms.
func BenchmarkCodeContextRoundTrip(b *testing.B) {
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("python3 not installed")
	}
	s, err := execd.New(execd.Config{Root: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	hs := httptest.NewServer(s)
	defer hs.Close()
	client := hs.Client()
	resp, err := client.Post(hs.URL+"/code/context", "application/json", strings.NewReader(`{"language":"python"}`))
	if err != nil {
		b.Fatal(err)
	}
	var cx struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&cx)
	resp.Body.Close()
	body := `{"code":"1+1","context":{"id":"` + cx.ID + `","language":"python"}}`
	var viaCtx, viaExec []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		resp, err := client.Post(hs.URL+"/code", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		evs, err := parseStream(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		if got, _ := resultText(summarize(evs)); got != "2" {
			b.Fatalf("result %q", got)
		}
		viaCtx = append(viaCtx, time.Since(start))
		start = time.Now()
		if err := exec.Command(py, "-c", "1+1").Run(); err != nil {
			b.Fatal(err)
		}
		viaExec = append(viaExec, time.Since(start))
	}
	c, e := p50(viaCtx), p50(viaExec)
	b.ReportMetric(float64(c)/float64(e), "ratio")
	b.ReportMetric(ms(c), "ctx-p50-ms")
	b.ReportMetric(ms(e), "exec-p50-ms")
}
