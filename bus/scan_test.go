package bus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
)

// scanSession appends a session of n execs to l and returns its entries as
// ReadAll reads them.
func scanSession(t *testing.T, l *bus.Ledger, name, id string, n int) []events.Entry {
	t.Helper()
	ctx := context.Background()
	es := []events.Entry{events.New(1, name, id, events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{RunID: "r"})}
	for step := 1; step <= n; step++ {
		ts := int64(1 + step)
		es = append(es,
			events.New(ts, name, id, step, events.ExecStarted, events.ExecStartedPayload{Seq: step, Kind: events.KindCommand, Cmd: "true"}),
			events.New(ts, name, id, step, events.ExecCompleted, events.ExecCompletedPayload{Seq: step}))
	}
	if err := l.AppendBatch(ctx, es); err != nil {
		t.Fatal(err)
	}
	got, err := l.ReadAll(ctx, name, id)
	if err != nil || len(got) != len(es) {
		t.Fatalf("ReadAll = %d entries, %v; want %d", len(got), err, len(es))
	}
	return got
}

// scanAll returns copies of what ScanAll handed, and its error.
func scanAll(l *bus.Ledger, name, id string, each func()) ([]events.Entry, error) {
	var got []events.Entry
	err := l.ScanAll(context.Background(), name, id, func(e *events.Entry) error {
		got = append(got, *e)
		if each != nil {
			each()
		}
		return nil
	})
	return got, err
}

func sameSeqs(t *testing.T, got, want []events.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("scan handed %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Seq != want[i].Seq || got[i].Hash != want[i].Hash || got[i].Event != want[i].Event {
			t.Fatalf("entry %d = %d %s, want %d %s", i, got[i].Seq, got[i].Event, want[i].Seq, want[i].Event)
		}
	}
}

// TestScanAllLostMessages: on a stream that lost messages a scan is
// ReadAll, which completes the session from the projection; a stream that
// loses messages while a scan reads it ends the scan with ErrRescan.
func TestScanAllLostMessages(t *testing.T) {
	ctx := context.Background()
	b := openEmbedded(t, bus.Config{})
	l, p := projectedLedger(t, b)
	defer l.Close()
	want := scanSession(t, l, "job", "sbx-1", 1500)
	other := scanSession(t, l, "job", "sbx-2", 10)

	// Lost while the scan reads: the first entry handed deletes a message
	// of another sandbox.
	stream, err := b.JetStream().Stream(ctx, b.Config().Stream)
	if err != nil {
		t.Fatal(err)
	}
	deleted := false
	_, err = scanAll(l, "job", "sbx-1", func() {
		if !deleted {
			deleted = true
			if err := stream.DeleteMsg(ctx, other[3].Seq); err != nil {
				t.Error(err)
			}
		}
	})
	if !errors.Is(err, adapters.ErrRescan) {
		t.Fatalf("scan of a stream that lost a message meanwhile = %v, want ErrRescan", err)
	}

	// Lost before: the session's head is gone from the stream, and comes
	// from the projection.
	if err := p.Await(ctx, want[len(want)-1].Seq); err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, want[0].Seq); err != nil {
		t.Fatal(err)
	}
	got, err := scanAll(l, "job", "sbx-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	sameSeqs(t, got, want)
}

// TestScanAllOutOfOrder: entries whose Ts goes back, which ReadAll sorts,
// end a scan with ErrRescan.
func TestScanAllOutOfOrder(t *testing.T) {
	l, err := bus.NewLedger(openEmbedded(t, bus.Config{}), bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	es := []events.Entry{
		events.New(10, "job", "sbx-1", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{RunID: "r"}),
		events.New(5, "job", "sbx-1", 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Kind: events.KindCommand, Cmd: "true"}),
	}
	if err := l.AppendBatch(ctx, es); err != nil {
		t.Fatal(err)
	}
	got, err := scanAll(l, "job", "sbx-1", nil)
	if !errors.Is(err, adapters.ErrRescan) {
		t.Fatalf("scan out of order = %d entries, %v; want ErrRescan", len(got), err)
	}
	all, err := l.ReadAll(ctx, "job", "sbx-1")
	if err != nil || len(all) != 2 || all[0].Ts != 5 {
		t.Fatalf("ReadAll = %+v, %v; want the two entries by Ts", all, err)
	}
}
