package sandboxd

import (
	"errors"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/alineo-labs/alineo/sandboxd/images"
)

// Metrics are the Prometheus metrics of one Server (Config.Metrics), named
// alineo_sandboxd_*: the sandboxes by state, the latency of creates and of
// the commands the sandboxes' execd served, the image pulls (by
// result, their bytes and duration), and the snapshots' bytes written to
// and read from the blob store and operations by result. Register it once
// (it is a prometheus.Collector); the sandboxes, pull bytes and snapshot
// bytes are read from the server when scraped. Give one Metrics to one
// Server. Safe for concurrent use.
type Metrics struct {
	createSeconds *prometheus.HistogramVec
	execSeconds   prometheus.Histogram
	pulls         *prometheus.CounterVec
	pullSeconds   prometheus.Histogram
	snapOps       *prometheus.CounterVec

	sandboxes *prometheus.Desc
	pullBytes *prometheus.Desc
	snapBytes *prometheus.Desc

	// mu guards srv: the server read at a scrape (nil before Open).
	mu  sync.Mutex
	srv *Server
}

var _ prometheus.Collector = (*Metrics)(nil)

// The results of a pull (alineo_sandboxd_image_pulls_total's label) and of
// a create or a snapshot operation.
const (
	resultOK           = "ok"
	resultNotFound     = "not_found"
	resultUnauthorized = "unauthorized"
	resultFailed       = "failed"
)

// The snapshot operations counted by result.
const (
	snapOpCapture = "capture"
	snapOpRestore = "restore"
	snapOpDelete  = "delete"
)

// allStates are the sandbox states, each a series of alineo_sandboxd_sandboxes
// from the start.
var allStates = []State{StatePending, StateRunning, StatePausing, StatePaused, StateResuming, StateStopping, StateTerminated, StateFailed}

// NewMetrics returns a server's metrics, every series present from the
// start at 0.
func NewMetrics() *Metrics {
	m := &Metrics{
		createSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "alineo_sandboxd_create_duration_seconds",
			Help:    "Time from a create request to its sandbox Running (result ok) or Failed (result failed), the image pull included.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 13),
		}, []string{"result"}),
		execSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "alineo_sandboxd_exec_duration_seconds",
			Help:    "Time from a command request (POST /command or /code) to the end of its answer, the command's stream, measured in each sandbox's execd.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}),
		pulls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "alineo_sandboxd_image_pulls_total",
			Help: "Image pulls from a registry, by result: ok, not_found, unauthorized or failed (unreachable registry, bad blob, unpack).",
		}, []string{"result"}),
		pullSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "alineo_sandboxd_image_pull_duration_seconds",
			Help:    "Duration of the image pulls from a registry, whatever their result.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}),
		snapOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "alineo_sandboxd_snapshot_operations_total",
			Help: "Snapshot operations, by operation (capture, restore into a new sandbox, delete) and result (ok, failed).",
		}, []string{"op", "result"}),
		sandboxes: prometheus.NewDesc("alineo_sandboxd_sandboxes",
			"Sandboxes the server knows now, by state (final ones until their retention ends).", []string{"state"}, nil),
		pullBytes: prometheus.NewDesc("alineo_sandboxd_image_pull_bytes_total",
			"Compressed layer bytes downloaded from registries.", nil, nil),
		snapBytes: prometheus.NewDesc("alineo_sandboxd_snapshot_bytes_total",
			"Snapshot content bytes written to (new blobs) and read from the blob store, by store (file, s3, gs, azblob).", []string{"direction", "store"}, nil),
	}
	for _, r := range []string{resultOK, resultFailed} {
		m.createSeconds.WithLabelValues(r)
	}
	for _, r := range []string{resultOK, resultNotFound, resultUnauthorized, resultFailed} {
		m.pulls.WithLabelValues(r)
	}
	for _, op := range []string{snapOpCapture, snapOpRestore, snapOpDelete} {
		for _, r := range []string{resultOK, resultFailed} {
			m.snapOps.WithLabelValues(op, r)
		}
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.createSeconds.Describe(ch)
	ch <- m.execSeconds.Desc()
	m.pulls.Describe(ch)
	ch <- m.pullSeconds.Desc()
	m.snapOps.Describe(ch)
	ch <- m.sandboxes
	ch <- m.pullBytes
	ch <- m.snapBytes
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.createSeconds.Collect(ch)
	m.execSeconds.Collect(ch)
	m.pulls.Collect(ch)
	m.pullSeconds.Collect(ch)
	m.snapOps.Collect(ch)
	m.mu.Lock()
	s := m.srv
	m.mu.Unlock()
	counts := map[State]int{}
	var pulled int64
	var blobs struct{ written, read int64 }
	store := ""
	if s != nil {
		for _, sb := range s.all() {
			sb.mu.Lock()
			counts[sb.rec.Status.State]++
			sb.mu.Unlock()
		}
		pulled = s.img.store.Stats().BytesDownloaded
		st := s.snap.blobs.Stats()
		blobs.written, blobs.read = st.Written, st.Read
		store = blobStoreKind(s.snap.blobs)
	}
	for _, st := range allStates {
		ch <- prometheus.MustNewConstMetric(m.sandboxes, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
	ch <- prometheus.MustNewConstMetric(m.pullBytes, prometheus.CounterValue, float64(pulled))
	if store != "" {
		ch <- prometheus.MustNewConstMetric(m.snapBytes, prometheus.CounterValue, float64(blobs.written), "written", store)
		ch <- prometheus.MustNewConstMetric(m.snapBytes, prometheus.CounterValue, float64(blobs.read), "read", store)
	}
}

// attach makes m read s at a scrape.
func (m *Metrics) attach(s *Server) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.srv = s
}

// created observes a create that reached Running (ok) or Failed, started at t0.
func (m *Metrics) created(t0 time.Time, ok bool) {
	r := resultOK
	if !ok {
		r = resultFailed
	}
	m.createSeconds.WithLabelValues(r).Observe(time.Since(t0).Seconds())
}

// pulled observes a pull from a registry that took took and ended with err
// (images.Config.Pulled).
func (m *Metrics) pulled(took time.Duration, err error) {
	m.pullSeconds.Observe(took.Seconds())
	r := resultOK
	switch {
	case err == nil:
	case errors.Is(err, images.ErrNotFound):
		r = resultNotFound
	case errors.Is(err, images.ErrUnauthorized):
		r = resultUnauthorized
	default:
		r = resultFailed
	}
	m.pulls.WithLabelValues(r).Inc()
}

// execDone observes a command execd served (runtime.Config.ExecDone).
func (m *Metrics) execDone(took time.Duration) {
	m.execSeconds.Observe(took.Seconds())
}

// snapshotOp counts a snapshot operation op that ended with err.
func (m *Metrics) snapshotOp(op string, err error) {
	r := resultOK
	if err != nil {
		r = resultFailed
	}
	m.snapOps.WithLabelValues(op, r).Inc()
}

// blobStoreKind names the kind of the snapshots' blob store: "file", or a
// remote store's URL scheme (s3, gs, azblob).
func blobStoreKind(b interface {
	Remote() bool
	URL() string
}) string {
	if !b.Remote() {
		return "file"
	}
	if u, err := url.Parse(b.URL()); err == nil && u.Scheme != "" {
		return u.Scheme
	}
	return "remote"
}
