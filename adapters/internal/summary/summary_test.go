package summary_test

import (
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/internal/summary"
	"github.com/alineo-labs/alineo/events"
)

func TestDeltas(t *testing.T) {
	var ds summary.Deltas
	add := func(ts int64, id string, ev events.Event, p any) {
		ds.Add(events.New(ts, "job", id, -1, ev, p))
	}
	add(10, "a", events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "a", RunID: "run-1"})
	add(11, "a", events.ExecStarted, events.ExecStartedPayload{Seq: 1, Cmd: "x"})
	add(12, "a", events.ExecCompleted, events.ExecCompletedPayload{Seq: 1})
	add(13, "b", events.ExecCompleted, events.ExecCompletedPayload{Seq: 1})
	add(14, "a", events.ExecCompleted, events.ExecCompletedPayload{Seq: 2})
	add(15, "a", events.SandboxClosed, nil)
	add(9, "c", events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "c"})

	if got, want := ds.Len(), 3; got != want {
		t.Fatalf("Len = %d, want %d", got, want)
	}
	rows := ds.Rows()
	a, b, c := rows[0], rows[1], rows[2]
	if a.Session.SandboxID != "a" || a.Status != adapters.StatusCompleted || a.Started != int64(10) ||
		a.Completed != int64(15) || a.RunID != "run-1" || a.Execs != 2 {
		t.Errorf("a = %+v", a)
	}
	if b.Session.SandboxID != "b" || b.Status != adapters.StatusRunning || b.Started != nil ||
		b.Completed != nil || b.RunID != nil || b.Execs != 1 {
		t.Errorf("b = %+v (a delta without sandbox.created must leave started and runId alone)", b)
	}
	if c.RunID != "c" {
		t.Errorf("c.RunID = %v, want the sandbox id when the payload has no runId", c.RunID)
	}
}
