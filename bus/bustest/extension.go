package bustest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
)

// extensionEntries is a run with extension events among its own: dotted and
// underscore names, at the sandbox level and at an exec's step, with an
// error and without a payload.
func extensionEntries(name, id string) []events.Entry {
	ts := time.Now().UnixMilli()
	ext := func(step int, ev events.Event, payload string) events.Entry {
		e := events.Entry{Ts: ts, Name: name, SandboxID: id, StepIndex: step, Event: ev}
		if payload != "" {
			e.Payload = json.RawMessage(payload)
		}
		return e
	}
	run := Entries(name, id, 2, 1) // created, 2 × (started, output, completed), checkpoint, closed
	failed := ext(2, "step_failed", `{"step":2}`)
	failed.Error = "exit 3"
	es := []events.Entry{run[0], ext(-1, "run_started", `{"workflow":"build"}`), ext(1, "step_start", `{"step":1}`)}
	es = append(es, run[1:4]...)
	es = append(es, ext(1, "step_complete", `{"step":1}`), ext(-1, "ext.permission_requested", `{"tool":"bash"}`),
		ext(-1, "agent.turn-1.checkpoint", ""))
	es = append(es, run[4:7]...)
	es = append(es, failed)
	return append(es, run[7:]...)
}

// testExtensionEvents: extension events are published under their own
// subject (alineo.ledger.<id>.<name>, a dotted name as several tokens), read
// back in order with the run's other events, delivered by a subscription
// filtered on their names, and a malformed one is refused.
func testExtensionEvents(t *testing.T, open OpenFunc) {
	b := open(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	ctx := ctxT(t)
	id := ID("ext")
	es := extensionEntries("wf", id)
	appendAll(t, l, es[:5])
	if err := l.AppendBatch(ctx, es[5:]); err != nil {
		t.Fatalf("AppendBatch: %v", err)
	}
	if err := l.Sync(ctx, id); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	got, err := l.ReadAll(ctx, "wf", id)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	if err := Same(es, got); err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	prefix := b.Config().SubjectPrefix
	for _, ev := range []events.Event{"run_started", "ext.permission_requested", "agent.turn-1.checkpoint"} {
		subject := prefix + "." + id + "." + string(ev)
		m, err := b.LastMsg(ctx, subject)
		if err != nil {
			t.Fatalf("last message on %s: %v", subject, err)
		}
		gotID, gotEv, err := events.ParseSubject(prefix, m.Subject)
		if err != nil || gotID != id || gotEv != ev {
			t.Fatalf("ParseSubject(%s) = %q, %q, %v", m.Subject, gotID, gotEv, err)
		}
	}

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	want := []events.Event{"step_complete", "ext.permission_requested", "step_failed"}
	sub, err := b.Subscribe(sctx, bus.Filter{SandboxID: id, Events: want, FromSeq: 1})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	var delivered []events.Event
	for e, err := range sub {
		if err != nil {
			t.Fatalf("subscription: %v", err)
		}
		delivered = append(delivered, e.Event)
		if len(delivered) == len(want) {
			break
		}
	}
	if strings.Join(evNames(delivered), ",") != strings.Join(evNames(want), ",") {
		t.Fatalf("filtered subscription delivered %v, want %v", delivered, want)
	}
	for _, bad := range []events.Event{"exec.nope", "Step", "a..b", "a.*"} {
		if _, err := b.Subscribe(sctx, bus.Filter{SandboxID: id, Events: []events.Event{bad}}); !errors.Is(err, events.ErrInvalidSubject) {
			t.Errorf("Subscribe(event %q) = %v, want ErrInvalidSubject", bad, err)
		}
		e := events.Entry{Ts: 1, Name: "wf", SandboxID: id, StepIndex: -1, Event: bad}
		if err := l.Append(ctx, e); !errors.Is(err, adapters.ErrInvalidEntry) {
			t.Errorf("Append(event %q) = %v, want ErrInvalidEntry", bad, err)
		}
	}
	if got, err := l.ReadAll(ctx, "wf", id); err != nil || len(got) != len(es) {
		t.Fatalf("ReadAll after invalid appends = %d entries, %v; want %d", len(got), err, len(es))
	}
}

func evNames(evs []events.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = string(ev)
	}
	return out
}
