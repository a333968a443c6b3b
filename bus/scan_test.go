package bus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
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

// TestScanAllLostMessages: on a stream that lost messages a scan goes on
// while the session's start is still in the stream, and is ReadAll (which
// completes it from the projection) when it is not; retention reaching into
// the session while it is scanned ends the scan with ErrRescan.
func TestScanAllLostMessages(t *testing.T) {
	ctx := context.Background()
	b := openEmbedded(t, bus.Config{})
	proj := &countedReads{}
	l, p := projectedLedger(t, b, func(s *memory.Store) adapters.Ledger { proj.Store = s; return proj })
	defer l.Close()
	gone := scanSession(t, l, "job", "sbx-0", 5) // the oldest: retention takes it all
	want := scanSession(t, l, "job", "sbx-1", 1500)
	other := scanSession(t, l, "job", "sbx-2", 10)
	if err := p.Await(ctx, other[len(other)-1].Seq); err != nil {
		t.Fatal(err)
	}
	stream, err := b.JetStream().Stream(ctx, b.Config().Stream)
	if err != nil {
		t.Fatal(err)
	}
	once := func(f func() error) func() {
		done := false
		return func() {
			if !done {
				done = true
				if err := f(); err != nil {
					t.Error(err)
				}
			}
		}
	}

	// A hole in another sandbox's messages, made as the scan reads: not
	// this session's loss.
	got, err := scanAll(l, "job", "sbx-1", once(func() error { return stream.DeleteMsg(ctx, other[3].Seq) }))
	if err != nil {
		t.Fatalf("scan while another sandbox's message is deleted: %v", err)
	}
	sameSeqs(t, got, want)

	// Retention removing the session's start as the scan reads.
	_, err = scanAll(l, "job", "sbx-1", once(func() error {
		return stream.Purge(ctx, jetstream.WithPurgeSequence(want[5].Seq))
	}))
	if !errors.Is(err, adapters.ErrRescan) {
		t.Fatalf("scan of a session whose start retention removed meanwhile = %v, want ErrRescan", err)
	}

	// Lost before the scan: a session whose start is gone, one gone whole,
	// both completed from the projection; one with a hole but its start.
	for _, tt := range []struct {
		id   string
		want []events.Entry
	}{{"sbx-1", want}, {"sbx-0", gone}, {"sbx-2", nil}} {
		if tt.want == nil {
			if tt.want, err = l.ReadAll(ctx, "job", tt.id); err != nil || len(tt.want) != len(other)-1 {
				t.Fatalf("ReadAll(%s) = %d entries, %v; want all but the deleted one", tt.id, len(tt.want), err)
			}
		}
		proj.reads.Store(0)
		got, err := scanAll(l, "job", tt.id, nil)
		if err != nil {
			t.Fatalf("scan of %s: %v", tt.id, err)
		}
		sameSeqs(t, got, tt.want)
		// Only a session whose start the stream lost is read from the
		// projection; the others are scanned.
		if n, lost := proj.reads.Load(), tt.id != "sbx-2"; (n > 0) != lost {
			t.Errorf("scan of %s read the projection %d times", tt.id, n)
		}
		// ReadAll alike.
		proj.reads.Store(0)
		all, err := l.ReadAll(ctx, "job", tt.id)
		if err != nil {
			t.Fatalf("ReadAll(%s): %v", tt.id, err)
		}
		sameSeqs(t, all, tt.want)
		if n, lost := proj.reads.Load(), tt.id != "sbx-2"; (n > 0) != lost {
			t.Errorf("ReadAll of %s read the projection %d times", tt.id, n)
		}
	}
}

// countedReads counts the ReadAll calls made of a memory store.
type countedReads struct {
	*memory.Store
	reads atomic.Int64
}

func (c *countedReads) ReadAll(ctx context.Context, name, id string) ([]events.Entry, error) {
	c.reads.Add(1)
	return c.Store.ReadAll(ctx, name, id)
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

// TestReadAllRetentionDuringRead: retention reaching past the messages a
// ReadAll has read, into those it has not reached yet, leaves a hole in
// what the stream gives it; the read completes it from the projection
// (before, it merged only what was older than its first message, and
// returned the session with the hole), and without a projection it is
// ErrHistoryTruncated.
func TestReadAllRetentionDuringRead(t *testing.T) {
	ctx := context.Background()
	b := openEmbedded(t, bus.Config{})
	l, p := projectedLedger(t, b, func(s *memory.Store) adapters.Ledger { return s })
	defer l.Close()
	bare, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	// Past a direct read's first two batches (1000, then 4000 messages), so
	// that its third is asked after the purge.
	const execs = 4000
	withProj := scanSession(t, l, "job", "sbx-1", execs)
	without := scanSession(t, l, "job", "sbx-2", execs)
	if err := p.Await(ctx, without[len(without)-1].Seq); err != nil {
		t.Fatal(err)
	}
	stream, err := b.JetStream().Stream(ctx, b.Config().Stream)
	if err != nil {
		t.Fatal(err)
	}
	purgeOnce := func(below uint64) {
		done := false
		bus.OnReadMessage(t, func() {
			if !done {
				done = true
				if err := stream.Purge(ctx, jetstream.WithPurgeSequence(below)); err != nil {
					t.Error(err)
				}
			}
		})
	}

	purgeOnce(withProj[6000].Seq)
	got, err := l.ReadAll(ctx, "job", "sbx-1")
	if err != nil {
		t.Fatal(err)
	}
	sameSeqs(t, got, withProj)

	purgeOnce(without[6000].Seq)
	if got, err := bare.ReadAll(ctx, "job", "sbx-2"); !errors.Is(err, bus.ErrHistoryTruncated) {
		t.Fatalf("ReadAll without a projection = %d entries, %v; want ErrHistoryTruncated", len(got), err)
	}
	bus.OnReadMessage(t, nil)
	got, err = l.ReadAll(ctx, "job", "sbx-2")
	if err != nil {
		t.Fatal(err)
	}
	sameSeqs(t, got, without)
}
