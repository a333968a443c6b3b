package api_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// seedSessions applies n sessions straight to the read model (no bus):
// names svc-0..svc-49, ids sb000000..., every other one closed, started one
// ms apart. It returns the first session's start.
func seedSessions(b *testing.B, e *env, sessions int) int64 {
	b.Helper()
	ctx := context.Background()
	ts := time.Now().UnixMilli() - int64(sessions)
	batch := make([]events.Entry, 0, 5000)
	seq := uint64(0)
	for i := range sessions {
		seq++
		id := fmt.Sprintf("sb%06d", i)
		en := events.New(ts+int64(i), fmt.Sprintf("svc-%d", i%50), id, events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: id})
		en.Seq = seq
		batch = append(batch, en)
		if i%2 == 0 {
			seq++
			c := events.New(ts+int64(i), en.Name, id, events.SandboxLevel, events.SandboxClosed, nil)
			c.Seq = seq
			batch = append(batch, c)
		}
		if len(batch) >= 4999 || i == sessions-1 {
			if err := e.store.ApplyBatch(ctx, "bench", batch, seq); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	return ts
}

// BenchmarkListSandboxes100k: GET /v1/sandboxes (a page of 100, with a status
// filter, and a page deep in the list) over a read model of 100k sessions,
// against the baseline of the same ListAllSandboxDetails call on the store
// directly. Reports p50/p99 of both and the p50 ratio (HTTP overhead).
func BenchmarkListSandboxes100k(b *testing.B) {
	const sessions = 100_000
	e := newEnv(b, token)
	ctx := context.Background()
	ts := seedSessions(b, e, sessions)
	queries := []struct {
		path string
		opts adapters.ListOptions
	}{
		{"/v1/sandboxes?limit=100", adapters.ListOptions{Limit: 101}},
		{"/v1/sandboxes?limit=100&status=running", adapters.ListOptions{Limit: 101, Status: adapters.StatusRunning}},
		{fmt.Sprintf("/v1/sandboxes?limit=100&before=%d", ts+sessions/2), adapters.ListOptions{Limit: 101, Before: ts + sessions/2}},
	}
	const rounds = 30
	var direct, viaHTTP []time.Duration
	b.ResetTimer()
	for range b.N {
		for range rounds {
			for _, q := range queries {
				t0 := time.Now()
				ds, err := e.store.ListAllSandboxDetails(ctx, q.opts)
				direct = append(direct, time.Since(t0))
				if err != nil || len(ds) != 101 {
					b.Fatalf("direct %v: %d, %v", q.opts, len(ds), err)
				}
				req, _ := http.NewRequest("GET", e.srv.URL+q.path, nil)
				req.Header.Set("Authorization", "Bearer "+token)
				t0 = time.Now()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				viaHTTP = append(viaHTTP, time.Since(t0))
				if resp.StatusCode != 200 {
					b.Fatalf("%s: %d", q.path, resp.StatusCode)
				}
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(viaHTTP, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(viaHTTP, 0.99)), "p99-ms")
	b.ReportMetric(ms(percentile(direct, 0.5)), "store-p50-ms")
	b.ReportMetric(ms(percentile(direct, 0.99)), "store-p99-ms")
	b.ReportMetric(float64(percentile(viaHTTP, 0.5))/float64(percentile(direct, 0.5)), "ratio")
}

// BenchmarkSSEFanout: 100 SSE subscribers on /v1/events/stream while a
// writer publishes 10k events/s for 1 s; the delivery latency of every event
// at every subscriber (receipt time minus the entry's Ts), against the
// baseline of one direct bus subscriber seeing the same events.
//
// On two shared cores 100 × 10k events/s (1M deliveries/s) saturates the
// machine, so the same run also measures 1k events/s, a load it sustains.
func BenchmarkSSEFanout(b *testing.B) {
	for _, rate := range []int{10_000, 1_000} {
		b.Run(fmt.Sprintf("subs=100/rate=%d", rate), func(b *testing.B) { benchFanout(b, 100, rate) })
	}
}

func benchFanout(b *testing.B, subscribers, rate int) {
	const duration = time.Second
	total := rate * int(duration/time.Second)
	e := newEnv(b, token)
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		ready := make(chan struct{}, subscribers)
		for range subscribers {
			req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/events/stream?sandbox=fan", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("subscribe: %v", err)
			}
			wg.Go(func() {
				defer resp.Body.Close()
				ready <- struct{}{}
				local := make([]time.Duration, 0, total)
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() && len(local) < total {
					line := sc.Bytes()
					i := bytes.Index(line, []byte(`"ts":`))
					if !bytes.HasPrefix(line, []byte("data: ")) || i < 0 {
						continue
					}
					j := i + 5
					for j < len(line) && line[j] >= '0' && line[j] <= '9' {
						j++
					}
					tsv, _ := strconv.ParseInt(string(line[i+5:j]), 10, 64)
					local = append(local, time.Since(time.UnixMilli(tsv)))
				}
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			})
		}
		for range subscribers {
			<-ready
		}
		// Baseline: one direct subscriber on the bus.
		var base []time.Duration
		direct, err := e.bus.Subscribe(ctx, busFilter("fan"))
		if err != nil {
			b.Fatal(err)
		}
		baseDone := make(chan struct{})
		go func() {
			defer close(baseDone)
			for en, err := range direct {
				if err != nil {
					return
				}
				base = append(base, time.Since(time.UnixMilli(en.Ts)))
				if len(base) == total {
					return
				}
			}
		}()
		time.Sleep(200 * time.Millisecond) // let every stream's consumer start (they were flushed already)
		b.ResetTimer()
		start := time.Now()
		const tick = 10 * time.Millisecond
		perTick := max(1, rate*int(tick)/int(time.Second))
		for sent := 0; sent < total; {
			// Append hands each entry to the async-publish window without
			// waiting for its ack, so the offered load is the target rate.
			for range perTick {
				en := events.New(time.Now().UnixMilli(), "fan", "fan", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte("x")))
				if err := e.ledger.Append(ctx, en); err != nil {
					b.Fatal(err)
				}
			}
			sent += perTick
			if d := time.Until(start.Add(time.Duration(sent) * time.Second / time.Duration(rate))); d > 0 {
				time.Sleep(d)
			}
		}
		pubElapsed := time.Since(start)
		waitDone := make(chan struct{})
		go func() { wg.Wait(); <-baseDone; close(waitDone) }()
		select {
		case <-waitDone:
		case <-time.After(60 * time.Second):
			b.Logf("timed out waiting for every delivery")
		}
		elapsed := time.Since(start)
		cancel()
		wg.Wait()
		b.StopTimer()
		mu.Lock()
		b.ReportMetric(float64(len(lat))/float64(subscribers*total), "delivered-frac")
		b.ReportMetric(float64(total)/pubElapsed.Seconds(), "published-ev/s")
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "delivered-ev/s")
		b.ReportMetric(ms(percentile(lat, 0.5)), "p50-ms")
		b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
		b.ReportMetric(ms(percentile(base, 0.99)), "direct-p99-ms")
		if p := percentile(base, 0.99); p > 0 {
			b.ReportMetric(float64(percentile(lat, 0.99))/float64(p), "ratio")
		}
		mu.Unlock()
	}
}
