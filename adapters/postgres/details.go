package postgres

import (
	"github.com/jackc/pgx/v5"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// summarised reports whether ev changes a session's details.
func summarised(ev events.Event) bool {
	return ev == events.SandboxCreated || ev == events.SandboxClosed || ev == events.ExecCompleted
}

// delta is what a set of entries changes in one session's details.
type delta struct {
	started   int64 // Ts of the earliest sandbox.created; 0 for none
	runID     string
	completed int64 // Ts of the latest sandbox.closed; 0 for none
	execs     int   // number of exec.completed
}

// deltas collects the changes of a batch, per session, in first-seen order.
type deltas struct {
	order []events.Session
	m     map[events.Session]*delta
}

func (ds *deltas) add(e events.Entry) {
	if !summarised(e.Event) {
		return
	}
	k := e.Session()
	d := ds.m[k]
	if d == nil {
		if ds.m == nil {
			ds.m = make(map[events.Session]*delta)
		}
		d = &delta{}
		ds.m[k] = d
		ds.order = append(ds.order, k)
	}
	switch e.Event {
	case events.SandboxCreated:
		if d.started == 0 || e.Ts < d.started {
			d.started, d.runID = e.Ts, runID(e)
		}
	case events.SandboxClosed:
		d.completed = max(d.completed, e.Ts)
	case events.ExecCompleted:
		d.execs++
	}
}

// queue queues an upsert of each session's delta into alineo_sandbox_details.
func (ds *deltas) queue(b *pgx.Batch) {
	for _, k := range ds.order {
		d := ds.m[k]
		status := adapters.StatusRunning
		var started, completed, run any
		if d.started != 0 {
			started, run = d.started, d.runID
		}
		if d.completed != 0 {
			completed, status = d.completed, adapters.StatusCompleted
		}
		b.Queue(upsertDetails, k.Name, k.SandboxID, string(status), started, completed, int32(d.execs), run)
	}
}

// runID returns the runId of a sandbox.created payload, or the SandboxID.
func runID(e events.Entry) string {
	var p struct {
		RunID string `json:"runId"`
	}
	if e.Decode(&p) != nil || p.RunID == "" {
		return e.SandboxID
	}
	return p.RunID
}
