package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/alineo-labs/alineo/jobs"
)

// workerMetrics registers the metrics of w on reg: the jobs running, the
// takeovers and the leases lost (read from w.Stats when scraped), and the
// steps, counted by the returned func from w's progress events.
func workerMetrics(reg prometheus.Registerer, w *jobs.Worker) (step func(jobs.Event)) {
	steps := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "alineo_executor_steps_total",
		Help: "Job steps this executor ended, by how: done (ran live), replayed (answered from the replay cache), skipped (before the resume point) or failed.",
	}, []string{"state"})
	for _, s := range []jobs.StepState{jobs.StepDone, jobs.StepReplayed, jobs.StepSkipped, jobs.StepFailed} {
		steps.WithLabelValues(string(s)) // every state present from the start, at 0
	}
	reg.MustRegister(steps,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "alineo_executor_jobs_running",
			Help: "Jobs running in this executor now.",
		}, func() float64 { return float64(w.Stats().Running) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "alineo_executor_takeovers_total",
			Help: "Jobs this executor took over from an earlier attempt (resumed from its checkpoint or started over).",
		}, func() float64 { return float64(w.Stats().Takeovers) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "alineo_executor_leases_lost_total",
			Help: "Job attempts this executor lost to a later delivery (fenced by a takeover, or superseded after their lease lapsed).",
		}, func() float64 { return float64(w.Stats().LeasesLost) }),
	)
	return func(ev jobs.Event) {
		if ev.Index < 0 {
			return
		}
		switch ev.State {
		case jobs.StepDone, jobs.StepReplayed, jobs.StepSkipped, jobs.StepFailed:
			steps.WithLabelValues(string(ev.State)).Inc()
		}
	}
}
