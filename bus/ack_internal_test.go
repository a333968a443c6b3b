package bus

import (
	"context"
	"testing"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/validated"
	"github.com/alineo-labs/alineo/testenv"
)

// TestAppendValidatedIsAcknowledged: the SDK's appends (AppendValidated)
// return once the stream acknowledged them, one entry or several: nothing of
// the sandbox is in flight when they return, and LastSeq covers them. (Append
// alone returns once its message is in the async window.)
func TestAppendValidatedIsAcknowledged(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := NewLedger(b, LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const id = "sbx-acked"
	entry := func(step int, ev events.Event, p any) events.Entry {
		return events.New(int64(step+2), "job", id, step, ev, p)
	}
	batches := [][]events.Entry{
		{entry(events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: id})}, // claims the sandbox
		{entry(1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Cmd: "echo hi"})},
		{entry(1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte("hi\n"))), entry(1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1})},
	}
	appended := 0
	for i, es := range batches {
		before := l.LastSeq()
		if err := l.AppendValidated(ctx, validated.Trust(es)); err != nil {
			t.Fatal(err)
		}
		appended += len(es)
		if n := l.lookup(id).inflight.Load(); n != 0 {
			t.Fatalf("batch %d: %d entries still in flight when AppendValidated returned", i, n)
		}
		if got := l.LastSeq(); got < before+uint64(len(es)) {
			t.Fatalf("batch %d: LastSeq %d after, %d before: its %d entries are not all acknowledged", i, got, before, len(es))
		}
	}
	got, err := l.ReadAll(ctx, "job", id)
	if err != nil || len(got) != appended {
		t.Fatalf("ReadAll = %d entries, %v; want %d", len(got), err, appended)
	}
}
