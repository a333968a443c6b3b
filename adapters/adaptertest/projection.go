package adaptertest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// ProjectionStore is a Store a projector writes into.
type ProjectionStore interface {
	adapters.Store
	adapters.ProjectionStore
}

// RunProjection runs the ProjectionStore conformance suite: ApplyBatch and
// Offset, idempotent redelivery, offsets atomic with rows, details maintained.
// newStore returns a fresh, empty store for each subtest.
func RunProjection(t *testing.T, newStore func(t *testing.T) ProjectionStore) {
	cases := []struct {
		name string
		f    func(t *testing.T, s ProjectionStore)
	}{
		{"ApplyAndRead", testApplyAndRead},
		{"Redelivery", testRedelivery},
		{"OffsetOnly", testOffsetOnly},
		{"InvalidWritesNothing", testApplyInvalid},
		{"DetailsCountedOnce", testApplyDetails},
		{"Consumers", testConsumers},
		{"MixedWithAppend", testMixedWithAppend},
		{"Close", testApplyClose},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			c.f(t, s)
		})
	}
}

// ledger returns n entries of one session as a bus would carry them, with
// stream sequences from first: created, then exec events, never closed.
func ledger(name, id string, first uint64, n int) []events.Entry {
	var es []events.Entry
	for i := range n {
		var e events.Entry
		switch {
		case i == 0:
			e = entry(T0, name, id, -1, events.SandboxCreated)
		case i%3 == 1:
			e = entry(T0+int64(i), name, id, i/3+1, events.ExecStarted)
		case i%3 == 2:
			e = entry(T0+int64(i), name, id, i/3+1, events.ExecOutput)
		default:
			e = entry(T0+int64(i), name, id, i/3, events.ExecCompleted)
		}
		e.Seq = first + uint64(i)
		if i%2 == 0 {
			e.Actor = fmt.Sprintf("user-%d via executor-1", i%3)
		}
		es = append(es, e)
	}
	return es
}

func mustApply(t *testing.T, s ProjectionStore, consumer string, es []events.Entry, offset uint64) {
	t.Helper()
	if err := s.ApplyBatch(ctx(t), consumer, es, offset); err != nil {
		t.Fatalf("ApplyBatch(%s, %d entries, %d): %v", consumer, len(es), offset, err)
	}
}

func checkOffset(t *testing.T, s ProjectionStore, consumer string, want uint64) {
	t.Helper()
	got, err := s.Offset(ctx(t), consumer)
	if err != nil || got != want {
		t.Fatalf("Offset(%s) = %d, %v; want %d", consumer, got, err, want)
	}
}

// checkProjected checks the session reads back as es, each with its ledger Seq.
func checkProjected(t *testing.T, s ProjectionStore, es []events.Entry) {
	t.Helper()
	got := mustRead(t, s, es[0].Name, es[0].SandboxID)
	sameEntries(t, got, es)
	for i := range es {
		if got[i].Seq != es[i].Seq {
			t.Fatalf("entry %d: Seq = %d, want the ledger sequence %d", i, got[i].Seq, es[i].Seq)
		}
	}
}

func testApplyAndRead(t *testing.T, s ProjectionStore) {
	checkOffset(t, s, "proj", 0)
	es := ledger("job", "sbx-1", 101, 10)
	mustApply(t, s, "proj", es[:4], 104)
	checkOffset(t, s, "proj", 104)
	mustApply(t, s, "proj", es[4:], 110)
	checkOffset(t, s, "proj", 110)
	checkProjected(t, s, es)
	cp := es[9]
	cp.Event, cp.Payload, cp.Seq = events.CheckpointCreated, []byte(`{"snapshotId":"snap-p"}`), 200
	mustApply(t, s, "proj", []events.Entry{cp}, 200)
	last, err := s.LastCheckpoint(ctx(t), "job", "sbx-1")
	if err != nil || last == nil || last.Seq != 200 {
		t.Fatalf("LastCheckpoint = %+v, %v; want the entry with Seq 200", last, err)
	}
}

func testRedelivery(t *testing.T, s ProjectionStore) {
	es := ledger("job", "sbx-1", 1, 12)
	mustApply(t, s, "proj", es[:6], 6)
	// The same batch again (a redelivery after a lost ack), then an overlapping one.
	mustApply(t, s, "proj", es[:6], 6)
	mustApply(t, s, "proj", es[3:9], 9)
	// A batch that repeats an entry within itself.
	mustApply(t, s, "proj", append(append([]events.Entry{}, es[9:]...), es[11]), 12)
	checkProjected(t, s, es)
	checkOffset(t, s, "proj", 12)
}

func testOffsetOnly(t *testing.T, s ProjectionStore) {
	mustApply(t, s, "proj", nil, 42)
	checkOffset(t, s, "proj", 42)
	mustApply(t, s, "proj", []events.Entry{}, 43)
	checkOffset(t, s, "proj", 43)
}

func testApplyInvalid(t *testing.T, s ProjectionStore) {
	mustApply(t, s, "proj", ledger("job", "sbx-1", 1, 3), 3)
	tests := []struct {
		name  string
		edit  func(es []events.Entry)
		field string
	}{
		{"zero seq", func(es []events.Entry) { es[1].Seq = 0 }, "seq"},
		{"empty name", func(es []events.Entry) { es[1].Name = "" }, "name"},
		{"unknown event", func(es []events.Entry) { es[1].Event = "exec.nope" }, "event"}, // "nope" is an extension event
		{"malformed extension event", func(es []events.Entry) { es[1].Event = "Nope" }, "event"},
		{"bad payload", func(es []events.Entry) { es[1].Payload = []byte("{") }, "payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es := ledger("job", "sbx-1", 4, 3)
			es[0].Ts, es[1].Ts, es[2].Ts = T0+100, T0+101, T0+102
			tt.edit(es)
			checkInvalid(t, s.ApplyBatch(ctx(t), "proj", es, 6), tt.field)
			checkOffset(t, s, "proj", 3)
			if got := mustRead(t, s, "job", "sbx-1"); len(got) != 3 {
				t.Fatalf("a failed batch left %d entries, want the 3 before it", len(got))
			}
		})
	}
	if err := s.ApplyBatch(ctx(t), "", nil, 1); !errors.Is(err, adapters.ErrInvalidEntry) {
		t.Fatalf("ApplyBatch with an empty consumer = %v, want ErrInvalidEntry", err)
	}
}

func testApplyDetails(t *testing.T, s ProjectionStore) {
	es := ledger("job", "sbx-1", 1, 10) // execs 1..3 completed
	closed := entry(T0+50, "job", "sbx-1", -1, events.SandboxClosed)
	closed.Seq = 11
	es = append(es, closed)
	for range 3 { // three deliveries of everything
		mustApply(t, s, "proj", es[:5], 5)
		mustApply(t, s, "proj", es, 11)
	}
	d, err := s.GetSandboxDetails(ctx(t), "job", "sbx-1")
	if w := details("job", "sbx-1", T0, 3, T0+50); err != nil || d == nil || *d != w {
		t.Fatalf("GetSandboxDetails = %+v, %v; want %+v", d, err, w)
	}
	all, err := s.ListAllSandboxDetails(ctx(t), adapters.ListOptions{Status: adapters.StatusCompleted, Limit: 20})
	if err != nil || len(all) != 1 {
		t.Fatalf("ListAllSandboxDetails(completed) = %+v, %v; want 1", all, err)
	}
}

func testConsumers(t *testing.T, s ProjectionStore) {
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			consumer := fmt.Sprintf("proj-%d", c)
			es := ledger("job", fmt.Sprintf("sbx-%d", c), uint64(c*1000+1), 30)
			for i := 0; i < len(es); i += 5 {
				if err := s.ApplyBatch(ctx(t), consumer, es[i:i+5], es[i+4].Seq); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for c := range 4 {
		checkOffset(t, s, fmt.Sprintf("proj-%d", c), uint64(c*1000+30))
		checkProjected(t, s, ledger("job", fmt.Sprintf("sbx-%d", c), uint64(c*1000+1), 30))
	}
}

func testMixedWithAppend(t *testing.T, s ProjectionStore) {
	// A direct append and a projected entry of other sessions do not collide.
	mustAppend(t, s, entry(T0, "direct", "sbx-d", -1, events.SandboxCreated))
	mustApply(t, s, "proj", ledger("proj", "sbx-p", 1, 4), 4)
	if got := mustRead(t, s, "direct", "sbx-d"); len(got) != 1 || got[0].Seq == 0 {
		t.Fatalf("direct session = %+v, want one entry with a Seq", got)
	}
	checkProjected(t, s, ledger("proj", "sbx-p", 1, 4))
	// Deleting a projected session frees its ledger sequences.
	if err := s.DeleteSandbox(ctx(t), "proj", "sbx-p"); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, "proj", ledger("proj", "sbx-p", 1, 4), 4)
	checkProjected(t, s, ledger("proj", "sbx-p", 1, 4))
}

func testApplyClose(t *testing.T, s ProjectionStore) {
	mustApply(t, s, "proj", ledger("job", "sbx-1", 1, 2), 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyBatch(ctx(t), "proj", nil, 3); !errors.Is(err, adapters.ErrClosed) {
		t.Fatalf("ApplyBatch after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Offset(ctx(t), "proj"); !errors.Is(err, adapters.ErrClosed) {
		t.Fatalf("Offset after Close = %v, want ErrClosed", err)
	}
}
