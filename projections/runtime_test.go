package projections_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/projections/projectiontest"
	"github.com/alineo-labs/alineo/testenv"
)

// recorder is a Handler keeping entries in memory (offset with them, under
// one lock: exactly once), with switches to fail.
type recorder struct {
	mu      sync.Mutex
	es      []events.Entry
	offsets map[string]uint64
	calls   int
	// fail, when set, is asked before each apply; a non-nil error is returned.
	fail func(b projections.Batch, call int) error
}

func (r *recorder) Apply(_ context.Context, b projections.Batch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.fail != nil {
		if err := r.fail(b, r.calls); err != nil {
			return err
		}
	}
	if r.offsets == nil {
		r.offsets = map[string]uint64{}
	}
	if b.Offset <= r.offsets[b.Key] {
		return nil
	}
	r.es = append(r.es, b.Entries...)
	r.offsets[b.Key] = b.Offset
	return nil
}

func (r *recorder) Offset(_ context.Context, key string) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.offsets[key], nil
}

func (r *recorder) entries() []events.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.es)
}

func TestFilterDeliversOnlyMatching(t *testing.T) {
	b := projectiontest.Bus(t)
	es := projectiontest.History(11, 40, 3)
	projectiontest.Publish(t, b, es)
	cases := []struct {
		name     string
		f        projections.Filter
		keep     func(e events.Entry) bool
		pushdown []string // the consumer's filter subjects (none when it reads every ledger subject)
	}{
		{"events", projections.Filter{Events: []events.Event{events.ExecCompleted, events.CredentialBound}},
			func(e events.Entry) bool { return e.Event == events.ExecCompleted || e.Event == events.CredentialBound },
			[]string{"alineo.ledger.*.credential.bound", "alineo.ledger.*.exec.completed"}},
		{"sandboxes and events", projections.Filter{Sandboxes: []string{"sb-00003", "sb-00007"}, Events: []events.Event{events.ExecStarted}},
			func(e events.Entry) bool {
				return (e.SandboxID == "sb-00003" || e.SandboxID == "sb-00007") && e.Event == events.ExecStarted
			},
			[]string{"alineo.ledger.sb-00003.exec.started", "alineo.ledger.sb-00007.exec.started"}},
		{"sandbox pattern", projections.Filter{Sandboxes: []string{"sb-0001?"}},
			func(e events.Entry) bool { return strings.HasPrefix(e.SandboxID, "sb-0001") }, nil},
		{"name pattern", projections.Filter{Names: []string{"te*", "lint"}, Events: []events.Event{events.SandboxCreated}},
			func(e events.Entry) bool {
				return (e.Name == "test" || e.Name == "lint") && e.Event == events.SandboxCreated
			}, []string{"alineo.ledger.*.sandbox.created"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			r := &projections.Runtime{Bus: b, Handler: rec, Consumer: fmt.Sprintf("filter-%d", i), Filter: tc.f, BatchSize: 37}
			projectiontest.Start(t, r)
			var want []events.Entry
			for _, e := range es {
				if tc.keep(e) {
					want = append(want, e)
				}
			}
			if len(want) == 0 || len(want) == len(es) {
				t.Fatalf("filter keeps %d of %d: not a test", len(want), len(es))
			}
			testenv.Eventually(t, 10*time.Second, func() error {
				if got := len(rec.entries()); got != len(want) {
					return fmt.Errorf("%d entries delivered, want %d", got, len(want))
				}
				return nil
			})
			// The ledger keeps each sandbox's order (not the order across sandboxes).
			if got, want := bySandbox(rec.entries()), bySandbox(want); !maps.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("delivered %v\nwant %v", got, want)
			}
			ci, err := b.JetStream().Consumer(context.Background(), b.Config().Stream, r.Key())
			if err != nil {
				t.Fatal(err)
			}
			subs := ci.CachedInfo().Config.FilterSubjects
			if f := ci.CachedInfo().Config.FilterSubject; f != "" {
				subs = []string{f}
			}
			if !slices.Equal(subs, tc.pushdown) {
				t.Fatalf("filter subjects = %q, want %q", subs, tc.pushdown)
			}
		})
	}
}

func bySandbox(es []events.Entry) map[string][]string {
	m := map[string][]string{}
	for _, e := range es {
		m[e.SandboxID] = append(m[e.SandboxID], fmt.Sprintf("%s/%d/%d", e.Event, e.StepIndex, e.Ts))
	}
	return m
}

func TestFilterInvalid(t *testing.T) {
	b := projectiontest.Bus(t)
	for _, f := range []projections.Filter{
		{Events: []events.Event{"exec.finished"}},
		{Names: []string{"[a-"}},
		{Sandboxes: []string{"a.b"}},
	} {
		r := &projections.Runtime{Bus: b, Handler: &recorder{}, Consumer: "x", Filter: f}
		if err := r.Run(context.Background()); !errors.Is(err, projections.ErrInvalidConfig) {
			t.Errorf("Run with %+v = %v, want ErrInvalidConfig", f, err)
		}
	}
	for _, p := range []projections.Partitioning{{N: 2, Index: 2}, {N: -1}, {N: 1, Index: 1}} {
		r := &projections.Runtime{Bus: b, Handler: &recorder{}, Consumer: "x", Partition: p}
		if err := r.Run(context.Background()); !errors.Is(err, projections.ErrInvalidConfig) {
			t.Errorf("Run with partition %+v = %v, want ErrInvalidConfig", p, err)
		}
	}
	if err := (&projections.Runtime{Bus: b}).Run(context.Background()); !errors.Is(err, projections.ErrInvalidConfig) {
		t.Errorf("Run without handler = %v", err)
	}
	for _, max := range []int{-1, 99, 801} {
		r := &projections.Runtime{Bus: b, Handler: &recorder{}, Consumer: "x", BatchSize: 100, MaxBatchSize: max}
		if err := r.Run(context.Background()); !errors.Is(err, projections.ErrInvalidConfig) {
			t.Errorf("Run with MaxBatchSize %d = %v, want ErrInvalidConfig", max, err)
		}
	}
}

var errStoreDown = errors.New("store down")

// A failing handler is retried with backoff; a poison entry it names is
// parked on the dead-letter subject and the projection goes on.
func TestHandlerErrorRetriedAndPoisonParked(t *testing.T) {
	b := projectiontest.Bus(t)
	es := projectiontest.History(12, 10, 3)
	projectiontest.Publish(t, b, es)
	poisonID, poisonStep := "sb-00004", 2
	var poisonSeq uint64
	rec := &recorder{fail: func(bt projections.Batch, call int) error {
		if call <= 3 {
			return errStoreDown
		}
		for _, e := range bt.Entries {
			if e.SandboxID == poisonID && e.StepIndex == poisonStep && e.Event == events.ExecCompleted {
				poisonSeq = e.Seq
				return fmt.Errorf("apply: %w", projections.Poison(e.Seq, errors.New("cannot apply")))
			}
		}
		return nil
	}}
	r := &projections.Runtime{Bus: b, Handler: rec, Name: "poisoned", BatchSize: 50, MaxBackoff: 20 * time.Millisecond}
	projectiontest.Start(t, r)
	last := projectiontest.LastSeq(t, b, projections.Filter{})
	projectiontest.Await(t, r, last, 20*time.Second)
	p := r.Progress()
	if p.Errors < 3 || p.Parked != 1 || p.Applied != uint64(len(es)-1) {
		t.Fatalf("progress = %+v, want ≥3 errors, 1 parked, %d applied", p, len(es)-1)
	}
	if got := len(rec.entries()); got != len(es)-1 {
		t.Fatalf("%d entries applied, want %d", got, len(es)-1)
	}
	for _, e := range rec.entries() {
		if e.Seq == poisonSeq {
			t.Fatalf("poison entry %d applied", poisonSeq)
		}
	}
	m, err := b.JetStream().Stream(context.Background(), b.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	msg, err := m.GetLastMsgForSubject(context.Background(), b.Config().DLQSubject)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get(projections.HeaderDLQProjection); got != "poisoned" {
		t.Errorf("parked by %q, want poisoned", got)
	}
	if got, want := msg.Header.Get(bus.HeaderDLQSeq), fmt.Sprint(poisonSeq); got != want {
		t.Errorf("parked seq %s, want %s", got, want)
	}
	if !strings.Contains(msg.Header.Get(bus.HeaderDLQReason), "cannot apply") {
		t.Errorf("reason = %q", msg.Header.Get(bus.HeaderDLQReason))
	}
}

// While the store is down the lag metric reports the consumer's pending count.
func TestLagDuringStoreOutage(t *testing.T) {
	b := projectiontest.Bus(t)
	var mu sync.Mutex
	down := false
	rec := &recorder{fail: func(projections.Batch, int) error {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return errStoreDown
		}
		return nil
	}}
	reg := prometheus.NewRegistry()
	r := &projections.Runtime{Bus: b, Handler: rec, Name: "lagged", Registerer: reg, LagInterval: 20 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond, BatchSize: 100}
	projectiontest.Start(t, r)
	w := projectiontest.NewWriter(t, b)
	ctx := context.Background()
	es := projectiontest.History(13, 20, 5)
	half := len(es) / 2
	seq, err := w.Write(ctx, es[:half])
	if err != nil {
		t.Fatal(err)
	}
	projectiontest.Await(t, r, seq, 10*time.Second)
	mu.Lock()
	down = true
	mu.Unlock()
	if _, err := w.Write(ctx, es[half:]); err != nil {
		t.Fatal(err)
	}
	want := uint64(len(es) - half)
	gauge := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "alineo_projector_lag_events" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if p := r.Progress(); p.Lag != want || gauge() != float64(want) {
			return fmt.Errorf("lag %d, gauge %v; want %d pending during the outage", p.Lag, gauge(), want)
		}
		return nil
	})
	mu.Lock()
	down = false
	mu.Unlock()
	testenv.Eventually(t, 10*time.Second, func() error {
		if p := r.Progress(); p.Lag != 0 || gauge() != 0 || len(rec.entries()) != len(es) {
			return fmt.Errorf("after the outage: %+v, gauge %v", p, gauge())
		}
		return nil
	})
}

// N partitioned workers, killed and restarted along the way, leave the same
// tables as one projector, each sandbox's entries in stream order.
func TestPartitionedEqualsSingle(t *testing.T) {
	sandboxes, execs := 1000, 24 // ~100k events
	if raceEnabled || testing.Short() {
		sandboxes, execs = 200, 5
	}
	b := projectiontest.Bus(t)
	es := projectiontest.History(14, sandboxes, execs)
	t.Logf("%d events over %d sandboxes", len(es), sandboxes)
	last := projectiontest.Publish(t, b, es)

	single := memory.New()
	one := &projections.Projector{Bus: b, Store: single, Consumer: "single"}
	stopOne := runProjector(t, one)
	defer stopOne()

	shared := memory.New()
	const n = 4
	start := func(i int) (*projections.Projector, func() error) {
		p := &projections.Projector{Bus: b, Store: shared, Consumer: "parts", BatchSize: 250, Partition: projections.Partitioning{N: n, Index: i}}
		return p, runProjector(t, p)
	}
	workers := make([]*projections.Projector, n)
	stops := make([]func() error, n)
	for i := range n {
		workers[i], stops[i] = start(i)
	}
	// Kill each worker once it has made progress, and start a new one in its place.
	for i := range n {
		testenv.Eventually(t, 60*time.Second, func() error {
			if workers[i].Progress().Offset == 0 {
				return errors.New("no progress yet")
			}
			return nil
		})
		if err := stops[i](); err != nil {
			t.Fatal(err)
		}
		workers[i], stops[i] = start(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for i, w := range workers {
		if err := w.Await(ctx, last); err != nil {
			t.Fatalf("partition %d: %v (%+v)", i, err, w.Progress())
		}
	}
	if err := one.Await(ctx, last); err != nil {
		t.Fatal(err)
	}
	if err := projections.Verify(ctx, single, shared); err != nil {
		t.Fatalf("partitioned tables differ from a single projector's: %v", err)
	}
	// Each sandbox's entries are in stream order.
	for _, id := range []string{"sb-00000", "sb-00001", fmt.Sprintf("sb-%05d", sandboxes-1)} {
		got, err := shared.ReadAll(ctx, projectiontest.Names[0], id)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.IsSortedFunc(got, func(a, b events.Entry) int { return int(a.Seq) - int(b.Seq) }) {
			t.Fatalf("%s out of order", id)
		}
	}
	ci, err := b.JetStream().Consumer(ctx, b.Config().Stream, projections.PartitionKey("parts", 1, n))
	if err != nil {
		t.Fatalf("partition consumer: %v", err)
	}
	if ci.CachedInfo().Name != "parts-p1-of-4" {
		t.Fatalf("consumer %q", ci.CachedInfo().Name)
	}
}

func runProjector(t *testing.T, p *projections.Projector) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestPartitionOfIsStable(t *testing.T) {
	// Part of the storage format: these must never change.
	got := []int{projections.PartitionOf("a", 4), projections.PartitionOf("sandbox-1", 4), projections.PartitionOf("x", 1)}
	if want := []int{0, 2, 0}; !slices.Equal(got, want) {
		t.Fatalf("PartitionOf = %v, want %v", got, want)
	}
	counts := make([]int, 4)
	for i := range 4000 {
		counts[projections.PartitionOf(fmt.Sprintf("sb-%05d", i), 4)]++
	}
	for i, c := range counts {
		if c < 800 || c > 1200 {
			t.Fatalf("partition %d holds %d of 4000: unbalanced %v", i, c, counts)
		}
	}
}

// A handler slower than AckWait makes the server redeliver messages of the
// batch being applied, interleaved with new ones: every entry is still
// applied exactly once (a redelivery must not end a batch below its new
// entries).
func TestRedeliveryDuringSlowApply(t *testing.T) {
	b := projectiontest.Bus(t)
	es := projectiontest.History(15, 30, 4)
	last := projectiontest.Publish(t, b, es)
	rec := &recorder{fail: func(bt projections.Batch, call int) error {
		if call <= 3 {
			time.Sleep(700 * time.Millisecond) // past AckWait: the server redelivers
		}
		return nil
	}}
	r := &projections.Runtime{Bus: b, Handler: rec, Consumer: "slow", BatchSize: 40, AckWait: 200 * time.Millisecond}
	projectiontest.Start(t, r)
	projectiontest.Await(t, r, last, 30*time.Second)
	got := rec.entries()
	seen := map[uint64]bool{}
	for _, e := range got {
		if seen[e.Seq] {
			t.Fatalf("entry %d applied twice", e.Seq)
		}
		seen[e.Seq] = true
	}
	if len(got) != len(es) {
		t.Fatalf("%d entries applied, want %d", len(got), len(es))
	}
}

// While the store applies a batch, the next one keeps growing past
// BatchSize (up to MaxBatchSize) rather than queueing behind it: a store that
// falls behind commits more per transaction. Every entry is applied once,
// in order.
func TestBatchGrowsWhileStoreBusy(t *testing.T) {
	b := projectiontest.Bus(t)
	es := projectiontest.History(16, 60, 4)
	last := projectiontest.Publish(t, b, es)
	if len(es) < 600 {
		t.Fatalf("%d entries: not a test", len(es))
	}
	var sizes []int
	release := make(chan struct{})
	rec := &recorder{fail: func(bt projections.Batch, call int) error {
		sizes = append(sizes, len(bt.Entries)) // under rec.mu
		if call == 1 {
			<-release
		}
		return nil
	}}
	r := &projections.Runtime{Bus: b, Handler: rec, Consumer: "grow", BatchSize: 20, MaxBatchSize: 160}
	if err := r.Init(); err != nil {
		t.Fatal(err)
	}
	projectiontest.Start(t, r)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before Start's: a failed test still stops
	// While the first batch (BatchSize, ready at once) is held, the collector
	// reads ahead. Delivered but not yet collected are at most the pull
	// buffer (4 × BatchSize) and the reader's queue (BatchSize): 200
	// delivered means the collector has at least 99, well past BatchSize.
	testenv.Eventually(t, 10*time.Second, func() error {
		ci, err := b.JetStream().Consumer(context.Background(), b.Config().Stream, r.Key())
		if err != nil {
			return err
		}
		if d := ci.CachedInfo().Delivered.Stream; d < 200 {
			return fmt.Errorf("delivered up to %d", d)
		}
		return nil
	})
	once.Do(func() { close(release) })
	projectiontest.Await(t, r, last, 30*time.Second)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(sizes) < 2 || sizes[1] <= 20 || slices.Max(sizes) > 160 {
		t.Fatalf("batch sizes %v: want the second above BatchSize 20, none above MaxBatchSize 160", sizes)
	}
	if len(rec.es) != len(es) {
		t.Fatalf("%d entries applied, want %d", len(rec.es), len(es))
	}
	for i := 1; i < len(rec.es); i++ {
		if rec.es[i].Seq <= rec.es[i-1].Seq {
			t.Fatalf("entry %d (seq %d) after seq %d", i, rec.es[i].Seq, rec.es[i-1].Seq)
		}
	}
}
