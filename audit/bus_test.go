package audit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/audit"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// TestVerifyBus: the bus ledger chains what it publishes, a Takeover and a
// re-claim after Release continue the chain from the stream's head, and a
// rewritten message (deleted, or republished edited) breaks it.
func TestVerifyBus(t *testing.T) {
	url := testenv.NATS(t)
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l1, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Close()
	appendN := func(l *bus.Ledger, id string, ts int64, n int) {
		t.Helper()
		for i := range n {
			e := events.New(ts+int64(i), "n", id, i+1, events.ExecCompleted, events.ExecCompletedPayload{Seq: i + 1})
			if err := l.AppendBatch(ctx, []events.Entry{e}); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendN(l1, "A", 1000, 3)
	appendN(l1, "B", 1000, 2)
	// Release, then the same ledger re-claims A (its own fence): a new epoch.
	if err := l1.Release(ctx, "A"); err != nil {
		t.Fatal(err)
	}
	appendN(l1, "A", 2000, 2)
	// Another writer takes B over.
	l2, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if _, err := l2.Takeover(ctx, "B"); err != nil {
		t.Fatal(err)
	}
	appendN(l2, "B", 3000, 2)

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	src := audit.Stream{JS: js}
	res, err := audit.Verify(ctx, src, audit.Filter{}, audit.Options{})
	if err != nil || len(res.Sessions) != 2 || res.Entries != 9 {
		t.Fatalf("Verify = %+v, %v; want 2 chained sessions, 9 entries", res, err)
	}
	for _, s := range res.Sessions {
		if s.State != audit.Chained || s.Unchained != 0 {
			t.Fatalf("session %s; want chained from its first entry", s)
		}
	}
	es, err := l1.ReadAll(ctx, "n", "A")
	if err != nil || len(es) != 5 || es[4].PrevHash != es[3].Hash || es[0].Hash == "" {
		t.Fatalf("ReadAll(A) = %+v, %v; want 5 chained entries", es, err)
	}

	// Delete A's third entry from the stream.
	st, err := js.Stream(ctx, bus.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, es[2].Seq); err != nil {
		t.Fatal(err)
	}
	res, err = audit.Verify(ctx, src, audit.Filter{}, audit.Options{})
	if !errors.Is(err, audit.ErrBroken) || res.Broken != 1 {
		t.Fatalf("after a delete: %+v, %v; want A broken", res, err)
	}
	for _, s := range res.Sessions {
		if s.SandboxID == "A" && s.BrokenAt != es[3].Seq {
			t.Fatalf("A broken at seq %d, want %d", s.BrokenAt, es[3].Seq)
		}
	}
	// One sandbox alone: B still holds.
	if res, err := audit.Verify(ctx, src, audit.Filter{SandboxID: "B"}, audit.Options{}); err != nil || res.Entries != 4 {
		t.Fatalf("Verify(B) = %+v, %v", res, err)
	}
}
