package soak

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
)

// WitnessName is the session name of the soak's own ledger writer.
const WitnessName = "soak-witness"

// Acked is a batch the witness appended and the stream acknowledged (its
// Sync returned nil): every entry of it must be in the stream exactly once.
type Acked struct {
	SandboxID string
	Step      int
	// Events and Steps are each entry's event and step index.
	Events []events.Event
	Steps  []int
}

// witness appends small exec batches to a session of its own through a
// bus.Ledger while the faults run, and records those the stream acknowledged.
// A writer whose publish failed is replaced by a new one that takes the
// session over (bus.Ledger.Takeover), as a worker would.
type witness struct {
	b    *bus.Bus
	id   string
	logf func(string, ...any)

	mu     sync.Mutex
	acked  []Acked
	failed int
}

func (w *witness) run(ctx context.Context) error {
	l, err := bus.NewLedger(w.b, bus.LedgerConfig{AckTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer func() { l.Close() }()
	ts := func() int64 { return time.Now().UnixMilli() }
	created := events.New(ts(), WitnessName, w.id, events.SandboxLevel, events.SandboxCreated,
		events.SandboxCreatedPayload{SandboxID: w.id})
	for step := 0; ; step++ {
		var batch []events.Entry
		if step == 0 {
			batch = []events.Entry{created}
		} else {
			cmd := fmt.Sprintf("witness %d", step)
			batch = []events.Entry{
				events.New(ts(), WitnessName, w.id, step, events.ExecStarted, events.ExecStartedPayload{Seq: step, Cmd: cmd}),
				events.New(ts(), WitnessName, w.id, step, events.ExecOutput, events.NewOutput(step, events.Stdout, []byte(cmd+"\n"))),
				events.New(ts(), WitnessName, w.id, step, events.ExecCompleted, events.ExecCompletedPayload{Seq: step}),
			}
		}
		if ctx.Err() != nil {
			batch = []events.Entry{events.New(ts(), WitnessName, w.id, events.SandboxLevel, events.SandboxClosed,
				events.SandboxClosedPayload{Reason: "soak over"})}
		}
		var acked bool
		if l, acked, err = w.append(ctx, l, step, batch); err != nil {
			return err
		}
		if batch[0].Event == events.SandboxClosed && acked {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// append appends batch and waits for its acknowledgement. On a failure it
// takes the session over with a new Ledger and reports the batch not
// acknowledged (it may be partly stored; the next batch has a new step).
func (w *witness) append(ctx context.Context, l *bus.Ledger, step int, batch []events.Entry) (*bus.Ledger, bool, error) {
	deadline := time.Now().Add(2 * time.Minute)
	{
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		err := l.AppendBatch(actx, batch)
		if err == nil {
			err = l.Sync(actx, w.id)
		}
		cancel()
		if err == nil {
			a := Acked{SandboxID: w.id, Step: step}
			for _, e := range batch {
				a.Events, a.Steps = append(a.Events, e.Event), append(a.Steps, e.StepIndex)
			}
			w.mu.Lock()
			w.acked = append(w.acked, a)
			w.mu.Unlock()
			return l, true, nil
		}
		w.mu.Lock()
		w.failed++
		w.mu.Unlock()
		w.logf("witness: append step %d: %v; taking the session over with a new writer", step, err)
		l.Close()
		nl, err := bus.NewLedger(w.b, bus.LedgerConfig{AckTimeout: 10 * time.Second})
		if err != nil {
			return l, false, err
		}
		l = nl
		for {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
			_, err := l.Takeover(tctx, w.id)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return l, false, fmt.Errorf("witness: takeover of %s not done in 2 minutes: %w", w.id, err)
			}
			time.Sleep(time.Second)
		}
		return l, false, nil
	}
}

func (w *witness) result() ([]Acked, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Acked(nil), w.acked...), w.failed
}
