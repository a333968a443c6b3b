package egress

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of the egress proxies of one server,
// labelled by sandbox (Config.Name): the denials (counted every one, though
// their log lines are rate-limited) and the connections refused over
// Config.MaxClientConns. A sandbox's series go when the last Proxy of that
// name is closed. Register it once (it is a prometheus.Collector) and give it
// to every Proxy in Config.Metrics. Safe for concurrent use.
type Metrics struct {
	denied  *prometheus.CounterVec
	refused *prometheus.CounterVec
	conns   *prometheus.GaugeVec

	// mu guards refs: the proxies alive per sandbox name.
	mu   sync.Mutex
	refs map[string]int
}

var _ prometheus.Collector = (*Metrics)(nil)

// NewMetrics returns metrics named alineo_sandboxd_egress_*.
func NewMetrics() *Metrics {
	labels := []string{"sandbox"}
	return &Metrics{
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "alineo", Subsystem: "sandboxd_egress", Name: "denied_total",
			Help: "Outbound requests and connections the egress policy refused, every one (the log shows a rate-limited sample).",
		}, labels),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "alineo", Subsystem: "sandboxd_egress", Name: "refused_connections_total",
			Help: "Connections to the egress proxy closed at once because the sandbox had MaxClientConns open.",
		}, labels),
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "alineo", Subsystem: "sandboxd_egress", Name: "client_connections",
			Help: "Connections from the sandbox to its egress proxy open now, idle ones and tunnels included.",
		}, labels),
		refs: map[string]int{},
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.denied.Describe(ch)
	m.refused.Describe(ch)
	m.conns.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.denied.Collect(ch)
	m.refused.Collect(ch)
	m.conns.Collect(ch)
}

// proxyMetrics are one Proxy's series of a Metrics.
type proxyMetrics struct {
	denied, refused prometheus.Counter
	conns           prometheus.Gauge
	release         func()
}

// forProxy returns the series of sandbox name, held until release.
func (m *Metrics) forProxy(name string) *proxyMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refs[name]++
	return &proxyMetrics{
		denied:  m.denied.WithLabelValues(name),
		refused: m.refused.WithLabelValues(name),
		conns:   m.conns.WithLabelValues(name),
		release: sync.OnceFunc(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.refs[name]--; m.refs[name] > 0 {
				return
			}
			delete(m.refs, name)
			m.denied.DeleteLabelValues(name)
			m.refused.DeleteLabelValues(name)
			m.conns.DeleteLabelValues(name)
		}),
	}
}
