package bustest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// OpenFunc opens a bus on a stream of its own (a fresh server, or a unique
// cfg.Stream / prefix), applying cfg's retention and replicas. The bus must be
// closed by t.Cleanup.
type OpenFunc func(t *testing.T, cfg bus.Config) *bus.Bus

var idSeq atomic.Int64

// ID returns a sandbox id unique within the test binary.
func ID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1_000_000, idSeq.Add(1))
}

// Entries returns a realistic run of sandbox id named name: created, then
// execs execs of started, outputs × exec.output (~200 B) and completed,
// a checkpoint, closed.
func Entries(name, id string, execs, outputs int) []events.Entry {
	ts := time.Now().UnixMilli()
	es := []events.Entry{events.New(ts, name, id, events.SandboxLevel, events.SandboxCreated,
		events.SandboxCreatedPayload{SandboxID: id, RunID: "run-" + id})}
	chunk := make([]byte, 200)
	for i := range chunk {
		chunk[i] = 'a' + byte(i%26)
	}
	for x := 1; x <= execs; x++ {
		es = append(es, events.New(ts, name, id, x, events.ExecStarted, events.ExecStartedPayload{Seq: x, Kind: events.KindCommand, Cmd: "echo " + strconv.Itoa(x)}))
		for o := range outputs {
			es = append(es, events.New(ts, name, id, x, events.ExecOutput, events.NewOutput(x, events.Stdout, append(chunk[:190:190], []byte(fmt.Sprintf("%010d", o))...))))
		}
		es = append(es, events.New(ts, name, id, x, events.ExecCompleted, events.ExecCompletedPayload{Seq: x, ExitCode: 0}))
	}
	es = append(es, events.New(ts, name, id, events.SandboxLevel, events.CheckpointCreated, events.CheckpointCreatedPayload{SnapshotID: "snap-" + id, Name: "tag"}))
	es = append(es, events.New(ts, name, id, events.SandboxLevel, events.SandboxClosed, nil))
	return es
}

// WithActors sets an actor on es's entries, as the SDK and the executors
// write them, leaving every third without one (as the TypeScript SDK writes).
func WithActors(es []events.Entry) []events.Entry {
	for i := range es {
		switch i % 3 {
		case 0:
			es[i].Actor = "alice via executor-1"
		case 1:
			es[i].Actor = "zoë@hôte"
		}
	}
	return es
}

// Run runs every case against buses opened by open.
func Run(t *testing.T, open OpenFunc) {
	t.Run("AppendReadOrder", func(t *testing.T) { testAppendReadOrder(t, open) })
	t.Run("InvalidEntry", func(t *testing.T) { testInvalid(t, open) })
	t.Run("ExtensionEvents", func(t *testing.T) { testExtensionEvents(t, open) })
	t.Run("Fencing", func(t *testing.T) { testFencing(t, open) })
	t.Run("Release", func(t *testing.T) { testRelease(t, open) })
	t.Run("ClaimsInFlight", func(t *testing.T) { testClaims(t, open) })
	t.Run("MessageIDDedupe", func(t *testing.T) { testDedupe(t, open) })
	t.Run("Barrier", func(t *testing.T) { testBarrier(t, open) })
	t.Run("SubscribeFromSeq", func(t *testing.T) { testSubscribe(t, open) })
	t.Run("SubscribeLiveAcrossReset", func(t *testing.T) { testSubscribeLiveReset(t, open) })
	t.Run("TraceHeader", func(t *testing.T) { testTraceHeader(t, open) })
	t.Run("ReplayFallback", func(t *testing.T) { testFallback(t, open) })
	t.Run("NoReadModel", func(t *testing.T) { testNoReadModel(t, open) })
}

func newLedger(t *testing.T, b *bus.Bus, cfg bus.LedgerConfig) *bus.Ledger {
	t.Helper()
	l, err := bus.NewLedger(b, cfg)
	if err != nil {
		t.Fatalf("NewLedger: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func appendAll(t *testing.T, l *bus.Ledger, es []events.Entry) {
	t.Helper()
	ctx := ctxT(t)
	for _, e := range es {
		if err := l.Append(ctx, e); err != nil {
			t.Fatalf("Append %s: %v", e.Event, err)
		}
	}
}

// Same reports the first difference between want and got, ignoring Seq in
// want (zero there) but requiring got's Seq to increase.
func Same(want, got []events.Entry) error {
	if len(got) != len(want) {
		return fmt.Errorf("len = %d, want %d", len(got), len(want))
	}
	var last uint64
	for i := range want {
		g, w := got[i], want[i]
		if g.Seq <= last {
			return fmt.Errorf("entry %d: seq %d not after %d", i, g.Seq, last)
		}
		last = g.Seq
		if g.Ts != w.Ts || g.Name != w.Name || g.SandboxID != w.SandboxID || g.StepIndex != w.StepIndex ||
			g.Event != w.Event || g.Error != w.Error || g.Actor != w.Actor || !jsonEqual(g.Payload, w.Payload) ||
			(g.Branch == nil) != (w.Branch == nil) || (g.Branch != nil && *g.Branch != *w.Branch) {
			return fmt.Errorf("entry %d = %+v, want %+v", i, g, w)
		}
	}
	return nil
}

func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

func testAppendReadOrder(t *testing.T, open OpenFunc) {
	b := open(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	ctx := ctxT(t)
	id := ID("order")
	es := WithActors(Entries("build", id, 5, 8))
	// A second session on the same sandbox id must not leak into the first.
	other := events.New(es[0].Ts, "other", id, events.SandboxLevel, events.SandboxPaused, nil)
	appendAll(t, l, es[:3])
	appendAll(t, l, []events.Entry{other})
	appendAll(t, l, es[3:])
	if err := l.Sync(ctx, id); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	got, err := l.ReadAll(ctx, "build", id)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	if err := Same(es, got); err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	// Same millisecond, different Ts: read order is (Ts, Seq).
	id2 := ID("ts")
	late := events.New(2000, "n", id2, events.SandboxLevel, events.SandboxCreated, nil)
	early := events.New(1000, "n", id2, events.SandboxLevel, events.SandboxPaused, nil)
	appendAll(t, l, []events.Entry{late, early})
	got, err = l.ReadAll(ctx, "n", id2)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	if len(got) != 2 || got[0].Ts != 1000 || got[1].Ts != 2000 {
		t.Fatalf("ReadAll order = %+v, want ts 1000 then 2000", got)
	}
	cp, err := l.LastCheckpoint(ctx, "build", id)
	if err != nil || cp == nil {
		t.Fatalf("LastCheckpoint = %v, %v; want an entry", cp, err)
	}
	if got, want := cp.Event, events.CheckpointCreated; got != want {
		t.Fatalf("LastCheckpoint event = %q, want %q", got, want)
	}
	cps, err := l.ListCheckpoints(ctx, "build", id)
	if err != nil {
		t.Fatalf("ListCheckpoints: %v", err)
	}
	if len(cps) != 1 || cps[0].SnapshotID != "snap-"+id || cps[0].Tag != "tag" {
		t.Fatalf("ListCheckpoints = %+v, want one snap-%s tagged tag", cps, id)
	}
	if got, err := l.ReadAll(ctx, "build", ID("unknown")); err != nil || len(got) != 0 {
		t.Fatalf("ReadAll(unknown) = %v, %v; want empty", got, err)
	}
	if err := l.DeleteSandbox(ctx, "other", id); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	// On a replicated stream the replay's consumer may sit on a replica that
	// applies the delete a moment later: deletes are eventually visible.
	testenv.Eventually(t, 5*time.Second, func() error {
		if got, err := l.ReadAll(ctx, "other", id); err != nil || len(got) != 0 {
			return fmt.Errorf("ReadAll after delete = %v, %v; want empty", got, err)
		}
		return nil
	})
	if got, err := l.ReadAll(ctx, "build", id); err != nil || len(got) != len(es) {
		t.Fatalf("ReadAll(build) after deleting other = %d entries, %v; want %d", len(got), err, len(es))
	}
}

func testInvalid(t *testing.T, open OpenFunc) {
	b := open(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	ctx := ctxT(t)
	id := ID("bad")
	for _, e := range []events.Entry{
		{Ts: 1, Name: "", SandboxID: id, Event: events.SandboxCreated},
		{Ts: 1, Name: "n", SandboxID: id, Event: "exec.nope"},
		{Ts: 1, Name: "n", SandboxID: "a.b", Event: events.SandboxCreated},
		{Ts: 1, Name: "n", SandboxID: id, Event: events.ExecCompleted, Payload: json.RawMessage(`{"seq":"x"}`)},
	} {
		if err := l.Append(ctx, e); !errors.Is(err, adapters.ErrInvalidEntry) {
			t.Errorf("Append(%+v) = %v, want ErrInvalidEntry", e, err)
		}
	}
	good := events.New(1, "n", id, events.SandboxLevel, events.SandboxCreated, nil)
	if err := l.AppendBatch(ctx, []events.Entry{good, {Ts: 1, Name: "n", SandboxID: id}}); !errors.Is(err, adapters.ErrInvalidEntry) {
		t.Errorf("AppendBatch with an invalid entry = %v, want ErrInvalidEntry", err)
	}
	if got, err := l.ReadAll(ctx, "n", id); err != nil || len(got) != 0 {
		t.Fatalf("ReadAll after invalid appends = %v, %v; want nothing stored", got, err)
	}
}

func testFencing(t *testing.T, open OpenFunc) {
	b := open(t, bus.Config{})
	a := newLedger(t, b, bus.LedgerConfig{WriterID: "a"})
	c := newLedger(t, b, bus.LedgerConfig{WriterID: "c"})
	ctx := ctxT(t)
	id := ID("fence")
	es := Entries("n", id, 2, 2)
	appendAll(t, a, es[:4])
	if err := a.Sync(ctx, id); err != nil {
		t.Fatalf("Sync a: %v", err)
	}
	// A second writer cannot just start writing: its claim fails, at Append
	// or, when the claim was still in flight, at the barrier; nothing is stored.
	if err := appendOrSync(ctx, c, es[4]); !errors.Is(err, adapters.ErrFenced) {
		t.Fatalf("second writer Append/Sync = %v, want ErrFenced", err)
	}
	if err := c.Append(ctx, es[5]); !errors.Is(err, adapters.ErrFenced) {
		t.Fatalf("second writer's next Append = %v, want ErrFenced (sticky until Takeover)", err)
	}
	if got, err := c.ReadAll(ctx, "n", id); err != nil || len(got) != 4 {
		t.Fatalf("after the refused writer: %d entries, %v; want the first writer's 4", len(got), err)
	}
	epoch, err := c.Takeover(ctx, id)
	if err != nil {
		t.Fatalf("Takeover: %v", err)
	}
	if epoch <= a.Epoch(id) {
		t.Fatalf("takeover epoch %d not after old epoch %d", epoch, a.Epoch(id))
	}
	// The stale writer's next publish is rejected by the stream.
	errA := appendOrSync(ctx, a, es[4])
	var fe *bus.FencedError
	if !errors.Is(errA, adapters.ErrFenced) || !errors.As(errA, &fe) || fe.SandboxID != id {
		t.Fatalf("stale writer = %v, want *FencedError for %s", errA, id)
	}
	if err := a.Append(ctx, es[5]); !errors.Is(err, adapters.ErrFenced) {
		t.Fatalf("stale writer, next call = %v, want ErrFenced (sticky)", err)
	}
	appendAll(t, c, es[4:])
	if err := c.Sync(ctx, id); err != nil {
		t.Fatalf("Sync c: %v", err)
	}
	got, err := c.ReadAll(ctx, "n", id)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	if err := Same(es, got); err != nil {
		t.Fatalf("after takeover: %v", err)
	}
	// Concurrent stale appends during a takeover are never interleaved after it.
	id2 := ID("race")
	es2 := Entries("n", id2, 20, 5)
	var wg sync.WaitGroup
	var staleOK atomic.Int64
	appendAll(t, a, es2[:1])
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, e := range es2[1:] {
			if a.Append(ctx, e) != nil {
				return
			}
			staleOK.Add(1)
		}
	}()
	// Let some stale appends through first (any number is fine).
	testenv.Eventually(t, 5*time.Second, func() error {
		if staleOK.Load() < 5 {
			return errors.New("no stale appends yet")
		}
		return nil
	})
	takeover, err := c.Takeover(ctx, id2)
	if err != nil {
		t.Fatalf("Takeover 2: %v", err)
	}
	wg.Wait()
	_ = a.Sync(ctx, id2)
	marker := events.New(time.Now().UnixMilli(), "n", id2, events.SandboxLevel, events.SandboxResumed, nil)
	appendAll(t, c, []events.Entry{marker})
	if err := c.Sync(ctx, id2); err != nil {
		t.Fatalf("Sync c: %v", err)
	}
	got, err = c.ReadAll(ctx, "n", id2)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	for i, e := range got {
		if e.Seq > takeover && e.Event != events.SandboxResumed {
			t.Fatalf("entry %d (%s, seq %d) of the stale writer stored after the takeover fence %d", i, e.Event, e.Seq, takeover)
		}
	}
	if err := Same(es2[:len(got)-1], got[:len(got)-1]); err != nil {
		t.Fatalf("stale writer's stored prefix: %v", err)
	}
}

// appendOrSync appends e and, when Append accepted it, waits for the barrier:
// a publish's (or a claim's) failure shows at one or the other.
func appendOrSync(ctx context.Context, l *bus.Ledger, e events.Entry) error {
	if err := l.Append(ctx, e); err != nil {
		return err
	}
	return l.Sync(ctx, e.SandboxID)
}

func testRelease(t *testing.T, open OpenFunc) {
	b := open(t, bus.Config{})
	a := newLedger(t, b, bus.LedgerConfig{WriterID: "a"})
	c := newLedger(t, b, bus.LedgerConfig{WriterID: "c"})
	ctx := ctxT(t)
	id := ID("release")
	es := Entries("n", id, 2, 2)
	appendAll(t, a, es[:3])
	if err := a.Sync(ctx, id); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	old := a.Epoch(id)
	if old == 0 {
		t.Fatal("Epoch after Sync = 0, want the claim's fence sequence")
	}
	if err := a.Release(ctx, id); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := a.Epoch(id); got != 0 {
		t.Fatalf("Epoch after Release = %d, want 0", got)
	}
	// Another writer is still fenced out by a's fence.
	if err := appendOrSync(ctx, c, es[3]); !errors.Is(err, adapters.ErrFenced) {
		t.Fatalf("other writer after Release = %v, want ErrFenced", err)
	}
	// a claims it again under a new epoch, so message ids never repeat.
	appendAll(t, a, es[3:])
	if err := a.Sync(ctx, id); err != nil {
		t.Fatalf("Sync after re-claim: %v", err)
	}
	if got := a.Epoch(id); got <= old {
		t.Fatalf("epoch after re-claim = %d, want > %d", got, old)
	}
	got, err := a.ReadAll(ctx, "n", id)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	if err := Same(es, got); err != nil {
		t.Fatalf("after release and re-claim: %v", err)
	}
}

// testClaims appends to many new sandboxes at once through a small window,
// so claims are in flight with appends queued behind them, some sandboxes
// held by another writer: every claimed sandbox holds exactly its entries in
// order after its fence; a refused claim stores nothing of what was queued.
func testClaims(t *testing.T, open OpenFunc) {
	b := open(t, bus.Config{})
	a := newLedger(t, b, bus.LedgerConfig{WriterID: "a", MaxPending: 8})
	c := newLedger(t, b, bus.LedgerConfig{WriterID: "c", MaxPending: 8})
	ctx := ctxT(t)
	const sandboxes = 12
	var ids []string
	var all [][]events.Entry
	for i := range sandboxes {
		id := ID(fmt.Sprintf("claim%d", i))
		ids = append(ids, id)
		all = append(all, Entries("n", id, 3, 4)) // 1 + 3×6 + 2 = 21 entries
	}
	// c holds every third sandbox first.
	for i := 0; i < sandboxes; i += 3 {
		appendAll(t, c, all[i][:1])
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("Flush c: %v", err)
	}
	// a appends round-robin: each new sandbox's claim is in flight while a
	// moves on, and a's appends to it queue behind the fence.
	refused := make([]error, sandboxes)
	for j := range len(all[0]) {
		for i, es := range all {
			if i%3 == 0 && j == 0 {
				continue // c wrote it
			}
			if refused[i] != nil {
				continue
			}
			if err := a.Append(ctx, es[j]); err != nil {
				if !errors.Is(err, adapters.ErrFenced) {
					t.Fatalf("Append %s #%d: %v", ids[i], j, err)
				}
				refused[i] = err
			}
		}
	}
	if err := a.Flush(ctx); err != nil && !errors.Is(err, adapters.ErrFenced) {
		t.Fatalf("Flush a = %v, want nil or the refused claims' ErrFenced", err)
	}
	for i, id := range ids {
		got, err := a.ReadAll(ctx, "n", id)
		if err != nil {
			t.Fatalf("ReadAll %s: %v", id, err)
		}
		if i%3 == 0 {
			if err := a.Sync(ctx, id); refused[i] == nil && !errors.Is(err, adapters.ErrFenced) {
				t.Errorf("%s held by c: a's Append accepted and Sync = %v, want ErrFenced", id, err)
			}
			if err := Same(all[i][:1], got); err != nil {
				t.Errorf("%s held by c: %v (a's queued appends must not be stored)", id, err)
			}
			continue
		}
		if err := a.Sync(ctx, id); err != nil {
			t.Errorf("Sync %s: %v", id, err)
		}
		if err := Same(all[i], got); err != nil {
			t.Errorf("%s: %v", id, err)
		}
		if epoch := a.Epoch(id); epoch == 0 || len(got) > 0 && epoch >= got[0].Seq {
			t.Errorf("%s: epoch %d, want the fence's sequence, before the first entry's", id, epoch)
		}
	}
	closeWithClaim(t, b, a)
}

// closeWithClaim checks that Close with a claim in flight flushes it, and
// ends the claim's goroutine; reader reads the result.
func closeWithClaim(t *testing.T, b *bus.Bus, reader *bus.Ledger) {
	ctx := ctxT(t)
	d, err := bus.NewLedger(b, bus.LedgerConfig{WriterID: "d"})
	if err != nil {
		t.Fatalf("NewLedger: %v", err)
	}
	id := ID("closing")
	es := Entries("n", id, 1, 2)
	for _, e := range es {
		if err := d.Append(ctx, e); err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close with a claim in flight: %v", err)
	}
	if err := d.Append(ctx, es[0]); !errors.Is(err, bus.ErrClosed) {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}
	got, err := reader.ReadAll(ctx, "n", id)
	if err != nil || Same(es, got) != nil {
		t.Fatalf("after Close: %d entries, %v; want the %d appended", len(got), err, len(es))
	}
}

func testDedupe(t *testing.T, open OpenFunc) {
	b := open(t, bus.Config{})
	ctx := ctxT(t)
	id := ID("dup")
	subj, _ := events.Subject(b.Config().SubjectPrefix, id, events.SandboxCreated)
	data, _ := events.Marshal(events.New(1, "n", id, events.SandboxLevel, events.SandboxCreated, nil))
	var seqs []uint64
	for range 3 {
		m := nats.NewMsg(subj)
		m.Data = data
		m.Header.Set("Alineo-Name", "n")
		ack, err := b.JetStream().PublishMsg(ctx, m, jetstream.WithMsgID(id+".1.1"))
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	if seqs[0] != seqs[1] || seqs[1] != seqs[2] {
		t.Fatalf("same message id acked at sequences %v, want one sequence", seqs)
	}
	l := newLedger(t, b, bus.LedgerConfig{})
	got, err := l.ReadAll(ctx, "n", id)
	if err != nil || len(got) != 1 {
		t.Fatalf("ReadAll = %d entries, %v; want 1", len(got), err)
	}
}

func testBarrier(t *testing.T, open OpenFunc) {
	b := open(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{MaxPending: 64})
	ctx := ctxT(t)
	id := ID("barrier")
	es := Entries("n", id, 10, 50)
	appendAll(t, l, es)
	if err := l.Sync(ctx, id); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	// After Sync, the last event is in the stream: read it straight from the
	// stream, not through the ledger (whose reads sync first).
	last, err := b.LastMsg(ctx, b.Config().SubjectPrefix+"."+id+".>")
	if err != nil {
		t.Fatalf("last message: %v", err)
	}
	e, err := bus.DecodeMsg(last.Data, last.Sequence)
	if err != nil {
		t.Fatalf("decode last: %v", err)
	}
	if got, want := e.Event, es[len(es)-1].Event; got != want {
		t.Fatalf("last stored event = %q, want %q", got, want)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if err := l.Sync(ctx, ID("never")); err != nil {
		t.Fatalf("Sync of a sandbox never written = %v, want nil", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	appendAll(t, l, es[:1]) // reopen a window, then cancel the barrier's ctx
	if err := l.Sync(cctx, id); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Sync(cancelled) = %v, want nil or context.Canceled", err)
	}
}

func testSubscribe(t *testing.T, open OpenFunc) {
	b := open(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	ctx := ctxT(t)
	id := ID("sub")
	es := WithActors(Entries("n", id, 3, 2)) // 1 + 3*4 + 2 = 15
	appendAll(t, l, es[:10])
	stored, err := l.ReadAll(ctx, "n", id)
	if err != nil || len(stored) != 10 {
		t.Fatalf("ReadAll = %d, %v", len(stored), err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	from := stored[4].Seq
	seq, err := b.Subscribe(sctx, bus.Filter{SandboxID: id, FromSeq: from})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	only, err := b.Subscribe(sctx, bus.Filter{SandboxID: id, Events: []events.Event{events.ExecCompleted}, FromSeq: 1})
	if err != nil {
		t.Fatalf("Subscribe(events): %v", err)
	}
	if _, err := b.Subscribe(sctx, bus.Filter{SandboxID: "a.b"}); err == nil {
		t.Fatalf("Subscribe(bad id) = nil error, want one")
	}
	done := make(chan error, 1)
	var got []events.Entry
	go func() {
		for e, err := range seq {
			if err != nil {
				done <- err
				return
			}
			got = append(got, e)
			if len(got) == len(es)-4 {
				cancel() // the range must end cleanly on ctx cancel
			}
		}
		done <- nil
	}()
	appendAll(t, l, es[10:])
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("subscription: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("subscription delivered %d of %d entries", len(got), len(es)-4)
	}
	if err := Same(es[4:], got); err != nil {
		t.Fatalf("subscription: %v", err)
	}
	if got[0].Seq != from {
		t.Fatalf("first seq = %d, want %d", got[0].Seq, from)
	}
	var completed int
	for e, err := range only {
		if err != nil {
			t.Fatalf("filtered subscription: %v", err)
		}
		if e.Event != events.ExecCompleted {
			t.Fatalf("filtered subscription got %q", e.Event)
		}
		completed++
		if completed == 3 {
			break
		}
	}
}

// memProjection is the projection of the fallback case: it holds what a
// projector had written before retention removed it from the stream.
type memProjection struct {
	adapters.Ledger // nil: only ReadAll is used
	mu              sync.Mutex
	es              []events.Entry
}

func (m *memProjection) ReadAll(_ context.Context, name, id string) ([]events.Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []events.Entry
	for _, e := range m.es {
		if e.Name == name && e.SandboxID == id {
			out = append(out, e)
		}
	}
	return out, nil
}

func testFallback(t *testing.T, open OpenFunc) {
	// No MaxAge at first: retention removes the first half only once the
	// read model holds it (trim), so no reader races the expiry.
	b := open(t, bus.Config{})
	ctx := ctxT(t)
	rm := &memProjection{}
	l := newLedger(t, b, bus.LedgerConfig{Projection: rm})
	id := ID("old")
	es := Entries("n", id, 4, 3)
	half := len(es) / 2
	// Keep the read model the way a projector would: every entry with its seq.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub, err := b.Subscribe(sctx, bus.Filter{FromSeq: 1})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	go func() {
		for e, err := range sub {
			if err != nil {
				return
			}
			rm.mu.Lock()
			rm.es = append(rm.es, e)
			rm.mu.Unlock()
		}
	}()
	appendAll(t, l, es[:half])
	if err := l.Sync(ctx, id); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		rm.mu.Lock()
		defer rm.mu.Unlock()
		if len(rm.es) < half {
			return fmt.Errorf("read model has %d of %d", len(rm.es), half)
		}
		return nil
	})
	// Age retention removes the first half from the stream.
	trim(t, b, b.Config().SubjectPrefix+"."+id+".>")
	// The writer's fence survives retention: it keeps writing.
	appendAll(t, l, es[half:])
	if err := l.Sync(ctx, id); err != nil {
		t.Fatalf("Sync after retention: %v (the fence must survive MaxAge)", err)
	}
	got, err := l.ReadAll(ctx, "n", id)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	if err := Same(es, got); err != nil {
		t.Fatalf("ReadAll with fallback: %v", err)
	}
	cp, err := l.LastCheckpoint(ctx, "n", id)
	if err != nil || cp == nil || cp.Event != events.CheckpointCreated {
		t.Fatalf("LastCheckpoint = %v, %v", cp, err)
	}
	// Without a read model the truncation is reported, not hidden.
	bare := newLedger(t, b, bus.LedgerConfig{})
	id2 := ID("lost")
	es2 := Entries("n", id2, 1, 1)
	appendAll(t, bare, es2[:2])
	if err := bare.Sync(ctx, id2); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	purge(t, b, b.Config().SubjectPrefix+"."+id2+".>")
	appendAll(t, bare, es2[2:])
	// A read is served by the replica its ordered consumer sits on, which may
	// not have applied the purge yet and then still holds the whole history:
	// a complete answer is right, a partial one without the error never is.
	testenv.Eventually(t, 20*time.Second, func() error {
		got, err := bare.ReadAll(ctx, "n", id2)
		switch {
		case errors.Is(err, bus.ErrHistoryTruncated):
			return nil
		case err == nil && Same(es2, got) == nil:
			t.Logf("ReadAll read the whole history from a replica that had not applied the purge; reading again")
			return fmt.Errorf("a replica still holds the purged history")
		}
		t.Fatalf("ReadAll of truncated history without read model = %d entries, %v; want ErrHistoryTruncated", len(got), err)
		return nil
	})
}

// purge removes every message on subject from the stream. Unlike age
// retention, which each replica applies to its own store on its own clock (a
// replica may still hold what the leader removed, and keep it once MaxAge is
// restored), a purge is replicated: every replica removes the same messages.
func purge(t *testing.T, b *bus.Bus, subject string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stream().Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		t.Fatalf("purge %s: %v", subject, err)
	}
}

// trim lets age retention (MaxAge 1 s) remove every message of the stream
// older than a second, waits until subject holds none, then restores the
// stream's configuration. Each request has a deadline of its own, and only
// the server's "no message" answer counts as removed.
func trim(t *testing.T, b *bus.Bus, subject string) {
	t.Helper()
	js := b.JetStream()
	update := func(sc jetstream.StreamConfig) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := js.UpdateStream(ctx, sc); err != nil {
			t.Fatalf("update stream %s: %v", sc.Name, err)
		}
	}
	orig := b.StreamConfig()
	aged := orig
	aged.MaxAge = time.Second
	aged.Duplicates = min(aged.Duplicates, aged.MaxAge)
	update(aged)
	testenv.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := b.LastMsg(ctx, subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("last message of %s: %w", subject, err)
		}
		return fmt.Errorf("message %d still in the stream", got.Sequence)
	})
	update(orig)
}

// testNoReadModel checks that a Ledger is only a ledger: it serves none of
// the read model (the tables a projector keeps do), and after Close its
// ledger methods return ErrClosed.
func testNoReadModel(t *testing.T, open OpenFunc) {
	b := open(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	ctx := ctxT(t)
	if _, ok := any(l).(adapters.ReadModel); ok {
		t.Errorf("*bus.Ledger implements adapters.ReadModel; want a ledger only")
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Append(ctx, events.New(1, "n", "x", -1, events.SandboxCreated, nil)); !errors.Is(err, adapters.ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
	if _, err := l.ReadAll(ctx, "n", "x"); !errors.Is(err, adapters.ErrClosed) {
		t.Errorf("ReadAll after Close = %v, want ErrClosed", err)
	}
}

// testSubscribeLiveReset: a live subscription (no FromSeq) whose consumer is
// lost before its first message (a stream leader killed, say) still delivers
// every entry appended after Subscribe returned. nats.go recreates an ordered
// consumer that has delivered nothing with its first configuration: with
// DeliverNew that skips whatever was appended meanwhile.
func testSubscribeLiveReset(t *testing.T, open OpenFunc) {
	b := open(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	ctx := ctxT(t)
	id := ID("live-reset")
	es := Entries("n", id, 2, 1)
	appendAll(t, l, es[:1]) // history before the subscription: not delivered
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seq, err := b.Subscribe(sctx, bus.Filter{SandboxID: id})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	// Lose the consumer, then append while it is being recreated.
	names := b.Stream().ConsumerNames(ctx)
	for name := range names.Name() {
		if err := b.Stream().DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatalf("delete consumer %s: %v", name, err)
		}
	}
	appendAll(t, l, es[1:])
	var got []events.Entry
	done := make(chan error, 1)
	go func() {
		for e, err := range seq {
			if err != nil {
				done <- err
				return
			}
			got = append(got, e)
			if len(got) == len(es)-1 {
				break
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("subscription: %v", err)
		}
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatalf("live subscription delivered %d of the %d entries appended after it began", len(got), len(es)-1)
	}
	if err := Same(es[1:], got); err != nil {
		t.Fatalf("live subscription: %v", err)
	}
}

// testTraceHeader: an entry's trace context travels in its message's
// traceparent header; an entry without one has no such header.
func testTraceHeader(t *testing.T, open OpenFunc) {
	b := open(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	ctx := ctxT(t)
	id := ID("trace")
	es := Entries("n", id, 1, 0)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	es[1].Trace = tp
	if err := l.AppendBatch(ctx, es); err != nil {
		t.Fatal(err)
	}
	stored, err := l.ReadAll(ctx, "n", id)
	if err != nil || len(stored) != len(es) {
		t.Fatalf("ReadAll = %d entries, %v", len(stored), err)
	}
	for i, e := range stored {
		m, err := b.Msg(ctx, e.Seq)
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		if i == 1 {
			want = tp
		}
		if got := m.Header.Get(bus.HeaderTraceParent); got != want {
			t.Errorf("entry %d (%s): traceparent header %q, want %q", i, e.Event, got, want)
		}
	}
}
