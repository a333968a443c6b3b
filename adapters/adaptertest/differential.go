package adaptertest

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// Differential applies the same random workload (appends, batches, projected
// batches, deletes, all with colliding timestamps, a third of the entries under
// the TypeScript SDK's event names) to a reference store and to
// the store under test, and checks every read answers the same. Pass fresh,
// empty stores; the reference is normally memory.New(). Seq values are not
// compared (row ids differ between stores), except those of projected entries.
func Differential(t *testing.T, reference, subject ProjectionStore, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	names := []string{"a", "b", `c "q"`}
	ids := []string{"s1", "s2", "s3"}
	evs := []events.Event{events.SandboxCreated, events.ExecStarted, events.ExecOutput, events.ExecCompleted,
		events.CheckpointCreated, events.SandboxPaused, events.SandboxClosed}
	var ledgerSeq uint64
	random := func() events.Entry {
		name, id := names[r.IntN(len(names))], ids[r.IntN(len(ids))]
		ts := T0 + int64(r.IntN(20)) // many ties
		ev := evs[r.IntN(len(evs))]
		e := entry(ts, name, id, 1+r.IntN(3), ev)
		switch ev {
		case events.SandboxCreated:
			e.StepIndex = -1
			if r.IntN(3) == 0 { // no runId: falls back to the id
				e = events.New(ts, name, id, -1, ev, events.SandboxCreatedPayload{SandboxID: id})
			}
		case events.CheckpointCreated:
			e = checkpoint(ts, name, id, fmt.Sprintf("snap-%d", r.IntN(1000)), []string{"", "tag"}[r.IntN(2)])
		case events.SandboxPaused, events.SandboxClosed:
			e.StepIndex = -1
		}
		if r.IntN(5) == 0 {
			b := r.IntN(2)
			e.Branch = &b
		}
		if r.IntN(3) == 0 { // the TypeScript SDK's name: an alias every read accepts
			e.Event = events.TypeScript.Name(e.Event)
		}
		return e
	}
	both := func(what string, f func(s ProjectionStore) error) {
		t.Helper()
		errRef, errSub := f(reference), f(subject)
		if (errRef == nil) != (errSub == nil) {
			t.Fatalf("%s: reference error %v, subject error %v", what, errRef, errSub)
		}
	}
	for op := range 300 {
		switch k := r.IntN(10); {
		case k < 5:
			e := random()
			both(fmt.Sprintf("op %d: Append", op), func(s ProjectionStore) error { return s.Append(ctx(t), e) })
		case k < 7:
			es := make([]events.Entry, 1+r.IntN(8))
			for i := range es {
				es[i] = random()
			}
			both(fmt.Sprintf("op %d: AppendBatch", op), func(s ProjectionStore) error { return s.AppendBatch(ctx(t), es) })
		case k < 9:
			es := make([]events.Entry, r.IntN(6))
			for i := range es {
				es[i] = random()
				if ledgerSeq > 3 && r.IntN(4) == 0 {
					es[i].Seq = 1 + uint64(r.IntN(int(ledgerSeq))) // a redelivery
				} else {
					ledgerSeq++
					es[i].Seq = ledgerSeq
				}
			}
			both(fmt.Sprintf("op %d: ApplyBatch", op), func(s ProjectionStore) error { return s.ApplyBatch(ctx(t), "p", es, ledgerSeq) })
		default:
			name, id := names[r.IntN(len(names))], ids[r.IntN(len(ids))]
			both(fmt.Sprintf("op %d: DeleteSandbox", op), func(s ProjectionStore) error { return s.DeleteSandbox(ctx(t), name, id) })
		}
	}

	for _, name := range names {
		for _, id := range ids {
			sameSession(t, reference, subject, name, id)
		}
	}
	sameListings(t, reference, subject, names)
	ow, err1 := reference.Offset(ctx(t), "p")
	og, err2 := subject.Offset(ctx(t), "p")
	if err1 != nil || err2 != nil || og != ow {
		t.Fatalf("Offset = %d, %v; want %d, %v", og, err2, ow, err1)
	}
}

// sameSession fails t unless both stores answer every read of one session
// alike.
func sameSession(t *testing.T, reference, subject ProjectionStore, name, id string) {
	t.Helper()
	want, got := mustRead(t, reference, name, id), mustRead(t, subject, name, id)
	if len(got) != len(want) {
		t.Fatalf("ReadAll(%s, %s): %d entries, want %d", name, id, len(got), len(want))
	}
	for i := range want {
		if err := sameEntry(got[i], want[i]); err != nil {
			t.Fatalf("ReadAll(%s, %s) entry %d: %v", name, id, i, err)
		}
	}
	cw, err1 := reference.ListCheckpoints(ctx(t), name, id)
	cg, err2 := subject.ListCheckpoints(ctx(t), name, id)
	if err1 != nil || err2 != nil || (len(cw) > 0 || len(cg) > 0) && !reflect.DeepEqual(cg, cw) {
		t.Fatalf("ListCheckpoints(%s, %s) = %+v, %v; want %+v, %v", name, id, cg, err2, cw, err1)
	}
	lw, err1 := reference.LastCheckpoint(ctx(t), name, id)
	lg, err2 := subject.LastCheckpoint(ctx(t), name, id)
	if err1 != nil || err2 != nil || (lw == nil) != (lg == nil) || (lw != nil && sameEntry(*lg, *lw) != nil) {
		t.Fatalf("LastCheckpoint(%s, %s) = %+v, %v; want %+v, %v", name, id, lg, err2, lw, err1)
	}
	dw, err1 := reference.GetSandboxDetails(ctx(t), name, id)
	dg, err2 := subject.GetSandboxDetails(ctx(t), name, id)
	if err1 != nil || err2 != nil || !reflect.DeepEqual(dg, dw) {
		t.Fatalf("GetSandboxDetails(%s, %s) = %+v, %v; want %+v, %v", name, id, dg, err2, dw, err1)
	}
}

// sameListings fails t unless both stores list alike under each option.
func sameListings(t *testing.T, reference, subject ProjectionStore, names []string) {
	t.Helper()
	for _, opts := range []adapters.ListOptions{
		{}, {Limit: 2}, {Status: adapters.StatusRunning}, {Status: adapters.StatusCompleted, Limit: 3},
		{Before: T0 + 10}, {RunID: "run-s1"}, {RunID: "s2"}, {SandboxID: "s1"}, {SandboxID: "s2", Limit: 1},
	} {
		dw, err1 := reference.ListAllSandboxDetails(ctx(t), opts)
		dg, err2 := subject.ListAllSandboxDetails(ctx(t), opts)
		if err1 != nil || err2 != nil || (len(dw) > 0 || len(dg) > 0) && !reflect.DeepEqual(dg, dw) {
			t.Fatalf("ListAllSandboxDetails(%+v):\n got %+v, %v\nwant %+v, %v", opts, dg, err2, dw, err1)
		}
		for _, name := range names {
			dw, err1 := reference.ListSandboxDetails(ctx(t), name, opts)
			dg, err2 := subject.ListSandboxDetails(ctx(t), name, opts)
			if err1 != nil || err2 != nil || (len(dw) > 0 || len(dg) > 0) && !reflect.DeepEqual(dg, dw) {
				t.Fatalf("ListSandboxDetails(%s, %+v):\n got %+v, %v\nwant %+v, %v", name, opts, dg, err2, dw, err1)
			}
		}
	}
}
