package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	streams  prometheus.Gauge
	streamed prometheus.Counter
	dropped  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "alineo", Subsystem: "api", Name: "requests_total",
			Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "alineo", Subsystem: "api", Name: "request_seconds",
			Help: "HTTP request latency by route (SSE streams excluded).", Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "alineo", Subsystem: "api", Name: "sse_streams",
			Help: "Open /v1/events/stream connections.",
		}),
		streamed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "alineo", Subsystem: "api", Name: "sse_events_total",
			Help: "Ledger events written to SSE streams.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "alineo", Subsystem: "api", Name: "sse_errors_total",
			Help: "SSE streams that ended with a subscription or write error.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.streams, m.streamed, m.dropped} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register api metrics: %w", err)
		}
	}
	return m, nil
}

// statusWriter records the status code; it keeps Flush reachable through
// Unwrap (http.ResponseController) and directly.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) instrument(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		s.m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		if route != "GET /v1/events/stream" {
			s.m.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}
	})
}
