package projections

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	events  prometheus.Counter
	parked  prometheus.Counter
	errors  prometheus.Counter
	lag     prometheus.Gauge
	offset  prometheus.Gauge
	batches prometheus.Histogram
}

func newMetrics(projection, consumer string) *metrics {
	labels := prometheus.Labels{"consumer": consumer, "projection": projection}
	return &metrics{
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "alineo", Subsystem: "projector", Name: "events_total",
			Help: "Ledger entries applied by the projection (rate() gives events/s).", ConstLabels: labels,
		}),
		parked: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "alineo", Subsystem: "projector", Name: "parked_total",
			Help: "Ledger messages parked on the dead-letter subject: undecodable, or poison to the projection.", ConstLabels: labels,
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "alineo", Subsystem: "projector", Name: "errors_total",
			Help: "Failed attempts (database or stream) that were retried.", ConstLabels: labels,
		}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "alineo", Subsystem: "projector", Name: "lag_events",
			Help: "Ledger messages on the consumer's subjects not yet committed (from the consumer's pending count).", ConstLabels: labels,
		}),
		offset: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "alineo", Subsystem: "projector", Name: "offset",
			Help: "Stream sequence of the last applied batch.", ConstLabels: labels,
		}),
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "alineo", Subsystem: "projector", Name: "batch_size",
			Help: "Messages per applied batch.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.events, m.parked, m.errors, m.lag, m.offset, m.batches}
}
