package egress_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/egress"
)

// latencies issues n sequential GETs (keep-alive) alternating between the
// baseline and the subject after a warm-up, so both see the same machine load,
// and returns their durations.
func latencies(b *testing.B, base, subj *http.Client, baseURL, subjURL string, n int) (bd, sd []time.Duration) {
	b.Helper()
	one := func(c *http.Client, url string) time.Duration {
		start := time.Now()
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: status %d", url, resp.StatusCode)
		}
		return time.Since(start)
	}
	for range 10 {
		one(base, baseURL)
		one(subj, subjURL)
	}
	for range n {
		bd = append(bd, one(base, baseURL))
		sd = append(sd, one(subj, subjURL))
	}
	return bd, sd
}

func pct(ds []time.Duration, p float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[int(p*float64(len(s)-1))]) / float64(time.Millisecond)
}

// BenchmarkProxyLatency measures sequential request latency through the proxy
// against the same requests sent directly, in the same run: plain HTTP with an
// allow rule, and HTTPS terminated by the proxy with a header injected.
func BenchmarkProxyLatency(b *testing.B) {
	const n = 300
	up := newUpstream(b, false)
	tlsUp := newUpstream(b, true)
	e := startProxy(b, egress.Config{
		Token: testToken, CredentialProxy: true,
		UpstreamTLS: &tls.Config{RootCAs: pool(b, tlsUp.Certificate())},
		Policy:      &egress.Policy{Egress: []egress.Rule{{Action: egress.Deny, Target: "*.example.org"}, {Action: egress.Allow, Target: "example.com"}}},
	})
	body := mustJSON(b, map[string]any{
		"credentials": []any{cred("k", "bench-secret")},
		"bindings": []any{map[string]any{"name": "k", "match": map[string]any{"hosts": []string{"example.com"}, "ports": []int{mustPort(b, tlsUp.port())}},
			"auth": map[string]any{"type": "bearer", "credential": "k"}}},
	})
	if code, resp := e.call(b, "POST", "/credential-vault", body); code != http.StatusCreated {
		b.Fatalf("POST vault = %d %s", code, resp)
	}
	direct := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool(b, tlsUp.Certificate())}}}
	proxied := e.client(pool(b, e.p.CACertPEM()))
	var d, p, dt, pt []time.Duration
	for b.Loop() {
		d, p = latencies(b, direct, proxied, up.URL+"/", "http://example.com:"+up.port()+"/", n)
		dt, pt = latencies(b, direct, proxied, tlsUp.URL+"/", "https://example.com:"+tlsUp.port()+"/", n)
	}
	b.ReportMetric(pct(d, 0.5), "direct-p50-ms")
	b.ReportMetric(pct(p, 0.5), "http-p50-ms")
	b.ReportMetric(pct(p, 0.99), "http-p99-ms")
	b.ReportMetric(pct(p, 0.5)/pct(d, 0.5), "http-ratio")
	b.ReportMetric(pct(dt, 0.5), "direct-tls-p50-ms")
	b.ReportMetric(pct(pt, 0.5), "mitm-p50-ms")
	b.ReportMetric(pct(pt, 0.99), "mitm-p99-ms")
	b.ReportMetric(pct(pt, 0.5)/pct(dt, 0.5), "mitm-ratio")
}
