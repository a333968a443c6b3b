package alineo

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/events"
)

func TestLedgerKeepsEmitOrderUnderConcurrency(t *testing.T) {
	st := &fakeStore{}
	l := newLedger(st, "order", "sb-1")
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	var emitted []int // step indexes in the order emit returned
	for g := range goroutines {
		wg.Go(func() {
			var dones []<-chan error
			for i := range each {
				step := g*each + i + 1
				mu.Lock()
				done, err := l.emit(context.Background(), events.ExecCompleted, step, events.ExecCompletedPayload{Seq: step})
				emitted = append(emitted, step)
				mu.Unlock()
				if err != nil {
					t.Errorf("emit: %v", err)
					return
				}
				dones = append(dones, done)
			}
			for _, d := range dones {
				if err := <-d; err != nil {
					t.Errorf("write: %v", err)
				}
			}
		})
	}
	wg.Wait()
	got := st.all()
	if len(got) != goroutines*each {
		t.Fatalf("stored %d entries, want %d", len(got), goroutines*each)
	}
	for i, e := range got {
		if e.StepIndex != emitted[i] {
			t.Fatalf("entry %d has step %d, want %d (emit order)", i, e.StepIndex, emitted[i])
		}
		if i > 0 && e.Ts < got[i-1].Ts {
			t.Fatalf("entry %d ts %d < previous %d: (ts, seq) order would differ from emit order", i, e.Ts, got[i-1].Ts)
		}
	}
}

func TestLedgerLaterWriteWaitsForSlowerEarlier(t *testing.T) {
	release := make(chan struct{})
	st := &fakeStore{before: func(e events.Entry) error {
		if e.StepIndex == 1 {
			<-release
		}
		return nil
	}}
	l := newLedger(st, "slow", "sb-1")
	first, err := l.emit(context.Background(), events.ExecCompleted, 1, events.ExecCompletedPayload{Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	second, err := l.emit(context.Background(), events.ExecCompleted, 2, events.ExecCompletedPayload{Seq: 2})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-second:
		t.Fatal("second write finished before the slower first one")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	got := st.all()
	if len(got) != 2 || got[0].StepIndex != 1 || got[1].StepIndex != 2 {
		t.Fatalf("entries = %+v, want steps 1 then 2", got)
	}
}

func TestLedgerFailedWriteFailsOnlyItsCaller(t *testing.T) {
	boom := errors.New("boom")
	st := &fakeStore{before: func(e events.Entry) error {
		if e.StepIndex == 3 {
			return boom
		}
		return nil
	}}
	l := newLedger(st, "fail", "sb-1")
	var dones []<-chan error
	for step := 1; step <= 6; step++ {
		d, err := l.emit(context.Background(), events.ExecCompleted, step, events.ExecCompletedPayload{Seq: step})
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, d)
	}
	for i, d := range dones {
		err := <-d
		if step := i + 1; step == 3 {
			if !errors.Is(err, boom) {
				t.Errorf("step 3 write = %v, want boom", err)
			}
		} else if err != nil {
			t.Errorf("step %d write = %v, want nil", step, err)
		}
	}
	var steps []int
	for _, e := range st.all() {
		steps = append(steps, e.StepIndex)
	}
	if want := []int{1, 2, 4, 5, 6}; !equalInts(steps, want) {
		t.Fatalf("stored steps %v, want %v", steps, want)
	}
	// The queue keeps going after the failure.
	if err := l.write(context.Background(), events.SandboxClosed, events.SandboxLevel, nil); err != nil {
		t.Fatal(err)
	}
}

func TestLedgerTsIsEmitTime(t *testing.T) {
	release := make(chan struct{})
	st := &fakeStore{before: func(e events.Entry) error {
		<-release
		return nil
	}}
	l := newLedger(st, "ts", "sb-1")
	var clock atomic.Int64
	clock.Store(1_000)
	l.now = func() time.Time { return time.UnixMilli(clock.Load()) }
	done, err := l.emit(context.Background(), events.SandboxPaused, events.SandboxLevel, nil)
	if err != nil {
		t.Fatal(err)
	}
	clock.Store(5_000) // the write happens "later"
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := st.all()[0].Ts; got != 1_000 {
		t.Fatalf("ts = %d, want 1000 (emit time, not write time)", got)
	}
	// A clock that steps back never reorders the handle's entries.
	clock.Store(500)
	if err := l.write(context.Background(), events.SandboxResumed, events.SandboxLevel, nil); err != nil {
		t.Fatal(err)
	}
	if got := st.all()[1].Ts; got != 1_000 {
		t.Fatalf("ts after clock step back = %d, want 1000", got)
	}
}

func TestLedgerInvalidEntryIsTypedError(t *testing.T) {
	l := newLedger(&fakeStore{}, "", "sb-1") // empty name
	err := l.write(context.Background(), events.SandboxClosed, events.SandboxLevel, nil)
	if !errors.Is(err, events.ErrInvalidEntry) {
		t.Fatalf("write = %v, want ErrInvalidEntry", err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLedgerChainStopsAfterAFailure(t *testing.T) {
	boom := errors.New("boom")
	st := &fakeStore{before: func(e events.Entry) error {
		if e.StepIndex == 2 {
			return boom
		}
		return nil
	}}
	l := newLedger(st, "chain", "sb-1")
	c := &chain{}
	var dones []<-chan error
	for step := 1; step <= 4; step++ {
		ch := c
		if step == 4 {
			ch = nil // another emitter: unaffected
		}
		d, err := l.emitChained(context.Background(), ch, events.ExecCompleted, step, events.ExecCompletedPayload{Seq: step})
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, d)
	}
	for i, d := range dones {
		err := <-d
		switch step := i + 1; step {
		case 1, 4:
			if err != nil {
				t.Errorf("step %d = %v, want nil", step, err)
			}
		case 2, 3:
			if !errors.Is(err, boom) {
				t.Errorf("step %d = %v, want boom", step, err)
			}
		}
	}
	var steps []int
	for _, e := range st.all() {
		steps = append(steps, e.StepIndex)
	}
	if want := []int{1, 4}; !equalInts(steps, want) {
		t.Fatalf("stored steps %v, want %v: step 3 follows a failed write of its chain", steps, want)
	}
}

func TestLedgerEmitManyIsOneBatch(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name     string
		failStep int // the step whose write fails, 0 for none
		want     []error
		stored   int
		batches  int
	}{
		{name: "both written together", want: []error{nil, nil}, stored: 2, batches: 1},
		{name: "first fails, second not written", failStep: 1, want: []error{boom, boom}, stored: 0},
		{name: "second fails alone", failStep: 2, want: []error{nil, boom}, stored: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &fakeStore{before: func(e events.Entry) error {
				if e.StepIndex == tt.failStep {
					return boom
				}
				return nil
			}}
			l := newLedger(st, "many", "sb-1")
			var done [2]<-chan error
			err := l.emitMany(context.Background(), &chain{}, done[:],
				emission{ev: events.ExecOutput, step: 1, payload: events.ExecOutputPayload{Seq: 1, Type: events.Stdout, Text: "hi\n"}},
				emission{ev: events.ExecCompleted, step: 2, payload: events.ExecCompletedPayload{Seq: 1}})
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range done {
				if got := <-d; !errors.Is(got, tt.want[i]) || (got == nil) != (tt.want[i] == nil) {
					t.Errorf("entry %d = %v, want %v", i, got, tt.want[i])
				}
			}
			if got := len(st.all()); got != tt.stored {
				t.Errorf("stored %d entries, want %d", got, tt.stored)
			}
			st.mu.Lock()
			batches := st.batches
			st.mu.Unlock()
			if tt.batches > 0 && batches != tt.batches {
				t.Errorf("AppendBatch called %d times, want %d", batches, tt.batches)
			}
		})
	}
}

func TestLedgerEmitManyCancelledQueuesNothing(t *testing.T) {
	st := &fakeStore{}
	l := newLedger(st, "many", "sb-1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Fill all slots but one, so the second emission cannot get one.
	for range ledgerQueueMax - 1 {
		l.slots <- struct{}{}
	}
	var done [2]<-chan error
	err := l.emitMany(ctx, nil, done[:],
		emission{ev: events.ExecCompleted, step: 1, payload: events.ExecCompletedPayload{Seq: 1}},
		emission{ev: events.ExecCompleted, step: 2, payload: events.ExecCompletedPayload{Seq: 2}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("emitMany = %v, want context.Canceled", err)
	}
	if got := len(l.slots); got != ledgerQueueMax-1 {
		t.Errorf("%d slots taken after the failed emitMany, want %d (its own released)", got, ledgerQueueMax-1)
	}
	l.mu.Lock()
	queued := len(l.queue)
	l.mu.Unlock()
	if queued != 0 {
		t.Errorf("%d entries queued, want 0", queued)
	}
}

// writeMany with no writer running writes in the calling goroutine: its
// results are there when it returns. Behind a running writer it queues, and
// the ledger keeps the order of the calls.
func TestLedgerWriteMany(t *testing.T) {
	st := &fakeStore{}
	l := newLedger(st, "inline", "sb-1")
	var done [2]<-chan error
	if err := l.writeMany(context.Background(), &chain{}, done[:],
		emission{ev: events.ExecOutput, step: 1, payload: events.ExecOutputPayload{Seq: 1, Type: events.Stdout, Text: "hi\n"}},
		emission{ev: events.ExecCompleted, step: 1, payload: events.ExecCompletedPayload{Seq: 1}}); err != nil {
		t.Fatal(err)
	}
	for i, d := range done {
		select {
		case err := <-d:
			if err != nil {
				t.Fatalf("entry %d: %v", i, err)
			}
		default:
			t.Fatalf("entry %d not written when writeMany returned on an idle ledger", i)
		}
	}
	l.mu.Lock()
	running := l.running
	l.mu.Unlock()
	if running {
		t.Fatal("the ledger still has a writer after writeMany wrote its entries")
	}

	// A writer is busy with step 2: writeMany's step 3 waits behind it.
	release := make(chan struct{})
	st.before = func(e events.Entry) error {
		if e.StepIndex == 2 {
			<-release
		}
		return nil
	}
	first, err := l.emit(context.Background(), events.ExecCompleted, 2, events.ExecCompletedPayload{Seq: 2})
	if err != nil {
		t.Fatal(err)
	}
	var third [1]<-chan error
	if err := l.writeMany(context.Background(), nil, third[:], emission{ev: events.ExecCompleted, step: 3,
		payload: events.ExecCompletedPayload{Seq: 3}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-third[0]:
		t.Fatal("writeMany wrote past a running writer's entry")
	default:
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-third[0]; err != nil {
		t.Fatal(err)
	}
	var steps []int
	for _, e := range st.all() {
		steps = append(steps, e.StepIndex)
	}
	if len(steps) != 4 || steps[2] != 2 || steps[3] != 3 {
		t.Fatalf("stored steps %v, want [1 1 2 3]", steps)
	}
}

// keepingStore fails its first AppendBatch as a store whose commit is still
// in flight when its ctx times out does, keeping the batch it was given,
// and stores everything else.
type keepingStore struct {
	fakeStore
	kept []events.Entry // the first batch, as handed over
	copy []events.Entry // its entries as they were then
}

func (s *keepingStore) AppendBatch(ctx context.Context, es []events.Entry) error {
	if s.kept == nil {
		s.kept, s.copy = es, slices.Clone(es)
		return context.DeadlineExceeded
	}
	return s.fakeStore.AppendBatch(ctx, es)
}

// The writer reuses its buffers from batch to batch, but not one a failed
// write was given: the store may still be reading it. Later batches then
// leave it as it was, and every entry is stored once, in order.
func TestLedgerKeepsNoBufferAFailedWriteHolds(t *testing.T) {
	st := &keepingStore{}
	l := newLedger(st, "keep", "sb-1")
	for round := range 4 {
		var done [3]<-chan error
		ems := make([]emission, len(done))
		for i := range ems {
			step := 3*round + i + 1
			ems[i] = emission{ev: events.ExecCompleted, step: step, payload: events.ExecCompletedPayload{Seq: step}}
		}
		if err := l.writeMany(context.Background(), nil, done[:], ems...); err != nil {
			t.Fatal(err)
		}
		for i, d := range done {
			if err := <-d; err != nil {
				t.Fatalf("round %d entry %d: %v", round, i, err)
			}
		}
	}
	if len(st.kept) != 3 || !slices.EqualFunc(st.kept, st.copy, func(a, b events.Entry) bool { return reflect.DeepEqual(a, b) }) {
		t.Fatalf("the failed batch's entries changed after the write failed:\n got %+v\nwant %+v", st.kept, st.copy)
	}
	var steps []int
	for _, e := range st.all() {
		steps = append(steps, e.StepIndex)
	}
	if want := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; !equalInts(steps, want) {
		t.Fatalf("stored steps %v, want %v", steps, want)
	}
}
