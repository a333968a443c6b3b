package projections_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/projections/projectiontest"
	"github.com/alineo-labs/alineo/testenv"
)

// workflowLedger returns every session of the TypeScript SDK's workflow.db,
// in ledger order: run_started, step_start... among its own events.
func workflowLedger(t *testing.T) []events.Entry {
	t.Helper()
	src, err := sqlite.Open(testenv.Fixture(t, adaptertest.TypeScriptWorkflow.File), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var all []events.Entry
	for _, d := range slices.Backward(adaptertest.TypeScriptWorkflow.Details) {
		es, err := src.ReadAll(context.Background(), d.Name, d.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, es...)
	}
	return all
}

func bySession(es []events.Entry) map[string][]events.Entry {
	m := map[string][]events.Entry{}
	for _, e := range es {
		m[e.SandboxID] = append(m[e.SandboxID], e)
	}
	return m
}

// sameRows reports the first difference between got and want, ignoring Seq.
func sameRows(got, want []events.Entry) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d entries, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Event != w.Event || g.StepIndex != w.StepIndex || g.Ts != w.Ts || g.Error != w.Error || string(g.Payload) != string(w.Payload) {
			return fmt.Errorf("entry %d = %s/%d %s %q, want %s/%d %s %q", i, g.Event, g.StepIndex, g.Payload, g.Error, w.Event, w.StepIndex, w.Payload, w.Error)
		}
	}
	return nil
}

// TestProjectExtensionEvents: the TypeScript SDK's workflow ledger, carried
// on the bus, is projected into alineo_events as it was written: its
// workflow events are kept (none parked), and the details count only its
// execs.
func TestProjectExtensionEvents(t *testing.T) {
	want := workflowLedger(t)
	b := openBus(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	store, err := sqlite.Open(testenv.SQLitePath(t), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	p := &projections.Projector{Bus: b, Store: store, BatchSize: 16}
	stop := run(t, p)
	ctx := context.Background()
	for _, e := range want {
		if err := l.Append(ctx, e); err != nil {
			t.Fatalf("Append %s: %v", e.Event, err)
		}
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, b, p, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if pr := p.Progress(); pr.Parked != 0 {
		t.Fatalf("%d entries parked, want none", pr.Parked)
	}
	var got []events.Entry
	for _, d := range slices.Backward(adaptertest.TypeScriptWorkflow.Details) {
		es, err := store.ReadAll(ctx, d.Name, d.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, es...)
	}
	if err := sameRows(got, want); err != nil {
		t.Fatalf("projected: %v", err)
	}
	all, err := store.ListAllSandboxDetails(ctx, adapters.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].ExecCount != 2 || all[1].ExecCount != 3 {
		t.Fatalf("details = %+v, want 2 and 3 execs", all)
	}
}

// TestFilterExtensionEvents: a projection filtered on extension event names
// gets exactly those, pushed down to their own subjects.
func TestFilterExtensionEvents(t *testing.T) {
	b := projectiontest.Bus(t)
	es := workflowLedger(t)
	projectiontest.Publish(t, b, es)
	f := projections.Filter{Events: []events.Event{"step_complete", "workflow_failed"}}
	rec := &recorder{}
	r := &projections.Runtime{Bus: b, Handler: rec, Consumer: "ext", Filter: f, BatchSize: 7}
	projectiontest.Start(t, r)
	var want []events.Entry
	for _, e := range es {
		if e.Event == "step_complete" || e.Event == "workflow_failed" {
			want = append(want, e)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := len(rec.entries()); got != len(want) {
			return fmt.Errorf("%d entries delivered, want %d", got, len(want))
		}
		return nil
	})
	// The ledger keeps each sandbox's order (not the order across sandboxes).
	got, wantBy := bySession(rec.entries()), bySession(want)
	for id, w := range wantBy {
		if err := sameRows(got[id], w); err != nil {
			t.Fatalf("delivered for %s: %v", id, err)
		}
	}
	if got, want := f.Subjects("alineo.ledger"), []string{"alineo.ledger.*.step_complete", "alineo.ledger.*.workflow_failed"}; !slices.Equal(got, want) {
		t.Fatalf("Subjects = %q, want %q", got, want)
	}
	for _, bad := range []events.Event{"exec.finished", "Step", "a..b"} {
		if err := (projections.Filter{Events: []events.Event{bad}}).Validate(); err == nil {
			t.Errorf("Validate(event %q) = nil, want an error", bad)
		}
	}
}
