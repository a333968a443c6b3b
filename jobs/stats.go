package jobs

import "sync/atomic"

// WorkerStats is what a Worker is doing and has done since it started, for
// its metrics (cmd/executor serves them).
type WorkerStats struct {
	// Running is the deliveries of jobs running in this worker now.
	Running int
	// Takeovers counts the jobs this worker took over from an earlier
	// attempt (the previous attempt's sandbox ended, the job resumed from its
	// checkpoint or started over).
	Takeovers uint64
	// LeasesLost counts the attempts this worker lost to a later delivery of
	// their job: fenced by another worker's takeover, or superseded after
	// their lease lapsed.
	LeasesLost uint64
}

// workerCounters are the counters of WorkerStats.
type workerCounters struct {
	takeovers, leasesLost atomic.Uint64
}

// Stats returns the worker's figures. Safe for concurrent use, also while
// Run runs.
func (w *Worker) Stats() WorkerStats {
	w.mu.Lock()
	running := len(w.local)
	w.mu.Unlock()
	return WorkerStats{Running: running, Takeovers: w.counters.takeovers.Load(), LeasesLost: w.counters.leasesLost.Load()}
}

// noteTakeover counts a takeover when prev is an earlier attempt's status
// (it recorded a sandbox or a checkpoint).
func (w *Worker) noteTakeover(prev Status) {
	if prev.SandboxID != "" || prev.Checkpoint != nil {
		w.counters.takeovers.Add(1)
	}
}

// noteLeaseLost counts an attempt that lost its job to a later delivery.
func (w *Worker) noteLeaseLost() { w.counters.leasesLost.Add(1) }
