package adapters

import "github.com/alineo-labs/alineo/events"

// DetailsOf derives a session's details from its entries (all of one session,
// as Ledger.ReadAll returns them), as a Store keeps them: StartedAt and RunID
// from the earliest sandbox.created, CompletedAt from the latest
// sandbox.closed, ExecCount from the exec.completed entries (in either
// vocabulary: sandbox_created, sandbox_closed and exec_complete count the same). It returns nil
// when the session has no sandbox.created. It lets a program with a Ledger
// alone answer GetSandboxDetails.
func DetailsOf(es []events.Entry) *SandboxDetails {
	var d *SandboxDetails
	var completed int64
	execs := 0
	for _, e := range es {
		switch e.Event.Canonical() {
		case events.SandboxCreated:
			if d == nil || e.Ts < d.StartedAt {
				if d == nil {
					d = &SandboxDetails{Name: e.Name, SandboxID: e.SandboxID}
				}
				d.StartedAt, d.RunID = e.Ts, runID(e)
			}
		case events.SandboxClosed:
			completed = max(completed, e.Ts)
		case events.ExecCompleted:
			execs++
		}
	}
	if d == nil {
		return nil
	}
	d.ExecCount, d.Status = execs, StatusRunning
	if completed != 0 {
		d.Status, d.CompletedAt = StatusCompleted, completed
	}
	return d
}

// runID returns the runId of a sandbox.created payload, or the SandboxID when
// it has none.
func runID(e events.Entry) string {
	var p struct {
		RunID string `json:"runId"`
	}
	if e.Decode(&p) != nil || p.RunID == "" {
		return e.SandboxID
	}
	return p.RunID
}
