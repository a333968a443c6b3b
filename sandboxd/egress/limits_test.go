package egress_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/alineo-labs/alineo/sandboxd/egress"
	"github.com/alineo-labs/alineo/testenv"
)

// metricValue returns the value of metric name for sandbox in reg, or -1 if
// reg has no such series.
func metricValue(t testing.TB, reg *prometheus.Registry, name, sandbox string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "sandbox" && l.GetValue() == sandbox {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// closedByPeer reports whether the proxy closed c: a read returns EOF (or a
// reset) rather than timing out.
func closedByPeer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestIdleConnectionsCapped: a sandbox that opens many idle connections to
// its proxy gets MaxClientConns of them; the others are closed at once, and
// the server holds no goroutine for them. (Before the cap, each idle
// connection kept a goroutine and its buffers: 18,000 of them cost sandboxd
// 190 MB.)
func TestIdleConnectionsCapped(t *testing.T) {
	const max, n = 16, 400
	m := egress.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	e := startProxy(t, egress.Config{Name: "sbx-idle", MaxClientConns: max, HeaderTimeout: time.Minute, Metrics: m})
	base := runtime.NumGoroutine()

	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.Dial("tcp", e.proxy.Host)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	closed := make([]bool, n)
	testenv.Eventually(t, 10*time.Second, func() error {
		k := 0
		for i, c := range conns {
			if !closed[i] {
				closed[i] = closedByPeer(c)
			}
			if closed[i] {
				k++
			}
		}
		if got, want := k, n-max; got != want {
			return fmt.Errorf("connections closed by the proxy = %d, want %d", got, want)
		}
		return nil
	})
	if got, limit := runtime.NumGoroutine()-base, 2*max; got > limit {
		t.Errorf("goroutines grew by %d with %d idle connections open, want at most %d", got, n, limit)
	}
	if got, want := metricValue(t, reg, "alineo_sandboxd_egress_refused_connections_total", "sbx-idle"), float64(n-max); got != want {
		t.Errorf("refused_connections_total = %v, want %v", got, want)
	}
	if got, want := metricValue(t, reg, "alineo_sandboxd_egress_client_connections", "sbx-idle"), float64(max); got != want {
		t.Errorf("client_connections = %v, want %v", got, want)
	}

	// At the cap a new client gets nowhere; once some idle connections are
	// closed, it is served again.
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(e.proxy), DisableKeepAlives: true}}
	if _, _, err := get(t, c, "http://denied.test/"); err == nil {
		t.Fatal("a request at the cap was served, want its connection closed")
	}
	for i, cn := range conns {
		if !closed[i] {
			cn.Close()
		}
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		code, _, err := get(t, c, "http://denied.test/")
		if err != nil || code != http.StatusForbidden {
			return fmt.Errorf("after the idle connections closed: %d %v, want 403", code, err)
		}
		return nil
	})
	if !strings.Contains(e.logs.String(), "too many open") {
		t.Errorf("the refusals are not logged:\n%s", e.logs)
	}
}

// TestSilentConnectionTimesOut: a connection that sends no request is closed
// after HeaderTimeout and gives its slot back.
func TestSilentConnectionTimesOut(t *testing.T) {
	e := startProxy(t, egress.Config{MaxClientConns: 1, HeaderTimeout: 50 * time.Millisecond})
	c, err := net.Dial("tcp", e.proxy.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("silent connection: %v, want it closed by the proxy", err)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(e.proxy)}}
	testenv.Eventually(t, 5*time.Second, func() error {
		code, _, err := get(t, hc, "http://denied.test/")
		if err != nil || code != http.StatusForbidden {
			return fmt.Errorf("after the timeout: %d %v, want 403", code, err)
		}
		return nil
	})
}

// TestDeniedLogsSampled: 5000 denied requests, one with a 60 KB host name,
// add a few kilobytes to the log (before, 955 KB, and the host name whole),
// every denial is counted in the metrics, and the log's lines plus its "N
// more" summaries account for each one.
func TestDeniedLogsSampled(t *testing.T) {
	const n, workers = 5000, 4
	m := egress.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	e := startProxy(t, egress.Config{Name: "sbx-flood", Metrics: m})
	long := strings.Repeat("a", 60_000) + ".test"
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(e.proxy), MaxIdleConnsPerHost: workers}}
	if code, _, err := get(t, c, "http://"+long+"/"); err != nil || code != http.StatusForbidden {
		t.Fatalf("long host: %d %v, want 403", code, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n-1; i += workers {
				code, _, err := get(t, c, "http://denied.test/"+strconv.Itoa(i))
				if err != nil || code != http.StatusForbidden {
					errs <- fmt.Errorf("request %d: %d %v, want 403", i, code, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got, want := metricValue(t, reg, "alineo_sandboxd_egress_denied_total", "sbx-flood"), float64(n); got != want {
		t.Errorf("denied_total = %v, want %v", got, want)
	}
	if err := e.p.Close(); err != nil { // writes the last summary
		t.Fatal(err)
	}
	if got := metricValue(t, reg, "alineo_sandboxd_egress_denied_total", "sbx-flood"); got != -1 {
		t.Errorf("denied_total of a closed proxy = %v, want the series gone", got)
	}

	logs := e.logs.String()
	if got, limit := len(logs), 16<<10; got > limit {
		t.Errorf("log grew by %d bytes for %d denials, want at most %d", got, n, limit)
	}
	if strings.Contains(logs, strings.Repeat("a", 254)) {
		t.Error("the 60 KB host name is logged beyond 253 bytes")
	}
	if want := "truncated, " + strconv.Itoa(len(long)) + " bytes"; !strings.Contains(logs, want) {
		t.Errorf("the long host's line does not say %q:\n%.300s", want, logs)
	}
	lines, more := 0, 0
	moreRe := regexp.MustCompile(`more=(\d+)`)
	for _, l := range strings.Split(logs, "\n") {
		switch {
		case strings.Contains(l, `msg="egress denied"`):
			lines++
		case strings.Contains(l, "egress denied: "):
			mm := moreRe.FindStringSubmatch(l)
			if mm == nil {
				t.Fatalf("summary line without a count: %s", l)
			}
			k, _ := strconv.Atoi(mm[1])
			more += k
		}
	}
	if lines == 0 || more == 0 || lines+more != n {
		t.Errorf("log has %d denial lines and summaries of %d more: %d in all, want both and %d in all", lines, more, lines+more, n)
	}
	t.Logf("%d denials: %d log bytes, %d lines, %d summarized", n, len(logs), lines, more)
}
