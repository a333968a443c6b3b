package projections_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/bus/bustest"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/testenv"
)

func openBus(t testing.TB, cfg bus.Config) *bus.Bus {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = testenv.NATS(t)
	}
	b, err := bus.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newLedger(t testing.TB, b *bus.Bus, cfg bus.LedgerConfig) *bus.Ledger {
	t.Helper()
	l, err := bus.NewLedger(b, cfg)
	if err != nil {
		t.Fatalf("NewLedger: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// publish writes sandboxes sessions of a realistic mix through a ledger and
// waits until all are acknowledged. It returns the entries in append order.
func publish(t testing.TB, l *bus.Ledger, sandboxes, execs, outputs int) []events.Entry {
	t.Helper()
	ctx := context.Background()
	var all []events.Entry
	for i := range sandboxes {
		id := bustest.ID(fmt.Sprintf("p%d", i))
		es := bustest.WithActors(bustest.Entries(fmt.Sprintf("job-%d", i%3), id, execs, outputs))
		for _, e := range es {
			if err := l.Append(ctx, e); err != nil {
				t.Fatalf("Append: %v", err)
			}
		}
		all = append(all, es...)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	return all
}

// run starts p in the background; the returned func stops it and returns Run's error.
func run(t testing.TB, p *projections.Projector) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("projector did not stop within 10s")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func caughtUp(t testing.TB, b *bus.Bus, p *projections.Projector, timeout time.Duration) {
	t.Helper()
	last, err := b.LastSeq(context.Background())
	if err != nil {
		t.Fatalf("LastSeq: %v", err)
	}
	// The last stream message may be a fence; the offset reaches the last ledger message.
	si, err := b.Stream().Info(context.Background(), jetstream.WithSubjectFilter(b.LedgerFilter()))
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	_ = last
	want := si.State.LastSeq
	testenv.Eventually(t, timeout, func() error {
		if got := p.Progress().Offset; got < want {
			return fmt.Errorf("offset %d, want %d (progress %+v)", got, want, p.Progress())
		}
		return nil
	})
}

func TestProjectorRebuildVerify(t *testing.T) {
	b := openBus(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	live := memory.New()
	reg := prometheus.NewRegistry()
	p := &projections.Projector{Bus: b, Store: live, BatchSize: 64, Registerer: reg}
	stop := run(t, p)
	all := publish(t, l, 6, 4, 10)
	// Garbage on a ledger subject is parked; the projector keeps going.
	if _, err := b.JetStream().Publish(context.Background(), b.Config().SubjectPrefix+".junk.exec.output", []byte("\x00not json")); err != nil {
		t.Fatalf("publish garbage: %v", err)
	}
	all = append(all, publish(t, l, 2, 2, 3)...)
	caughtUp(t, b, p, 20*time.Second)
	if got, want := p.Progress().Parked, uint64(1); got != want {
		t.Fatalf("parked = %d, want %d", got, want)
	}
	if got, want := p.Progress().Applied, uint64(len(all)); got != want {
		t.Fatalf("applied = %d, want %d", got, want)
	}
	dlq, err := b.JetStream().Stream(context.Background(), b.DLQStream())
	if err != nil {
		t.Fatalf("DLQ stream: %v", err)
	}
	parked, err := dlq.GetLastMsgForSubject(context.Background(), b.Config().DLQSubject)
	if err != nil {
		t.Fatalf("parked message: %v", err)
	}
	if got := parked.Header.Get(bus.HeaderDLQSubject); !strings.HasSuffix(got, ".junk.exec.output") {
		t.Fatalf("parked subject header = %q", got)
	}
	// Every session reads back from the projection as appended.
	bySession := map[events.Session][]events.Entry{}
	for _, e := range all {
		bySession[e.Session()] = append(bySession[e.Session()], e)
	}
	for k, want := range bySession {
		got, err := live.ReadAll(context.Background(), k.Name, k.SandboxID)
		if err != nil {
			t.Fatalf("ReadAll: %v", err)
		}
		if err := bustest.Same(want, got); err != nil {
			t.Fatalf("projection of %v: %v", k, err)
		}
	}
	d, err := live.ListAllSandboxDetails(context.Background(), adapters.ListOptions{})
	if err != nil || len(d) != 8 {
		t.Fatalf("details = %d, %v; want 8", len(d), err)
	}
	if d[0].ExecCount == 0 || d[0].Status != adapters.StatusCompleted {
		t.Fatalf("details %+v: want completed with execs", d[0])
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Metrics are on the injected registry.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	found := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				found[mf.GetName()] = m.Counter.GetValue()
			case m.Gauge != nil:
				found[mf.GetName()] = m.Gauge.GetValue()
			case m.Histogram != nil:
				found[mf.GetName()] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	if got, want := found["alineo_projector_events_total"], float64(len(all)); got != want {
		t.Fatalf("events_total = %v, want %v (all: %v)", got, want, found)
	}
	if found["alineo_projector_parked_total"] != 1 || found["alineo_projector_batch_size"] == 0 {
		t.Fatalf("metrics = %v, want parked_total 1 and batches observed", found)
	}

	rebuilt := memory.New()
	var out bytes.Buffer
	st, err := projections.Rebuild(context.Background(), b, rebuilt, &out)
	if err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	if st.Applied != uint64(len(all)) || st.Skipped != 1 {
		t.Fatalf("Rebuild stats = %+v, want %d applied, 1 skipped", st, len(all))
	}
	if !strings.Contains(out.String(), "100%") {
		t.Fatalf("progress output %q has no 100%%", out.String())
	}
	if err := projections.Verify(context.Background(), live, rebuilt); err != nil {
		t.Fatalf("Verify(live, rebuilt): %v", err)
	}
	// Verify finds a difference.
	k := all[0].Session()
	if err := rebuilt.DeleteSandbox(context.Background(), k.Name, k.SandboxID); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	var me *projections.MismatchError
	if err := projections.Verify(context.Background(), live, rebuilt); !errors.Is(err, projections.ErrMismatch) || !errors.As(err, &me) {
		t.Fatalf("Verify after delete = %v, want *MismatchError", err)
	}
}

// TestProjectorResumesAndRecreates: a restarted projector continues from the
// store's offset; a projector for a fresh store recreates the durable consumer
// from the start.
func TestProjectorResumesAndRecreates(t *testing.T) {
	b := openBus(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	store := memory.New()
	p1 := &projections.Projector{Bus: b, Store: store, BatchSize: 50}
	stop := run(t, p1)
	publish(t, l, 3, 3, 5)
	caughtUp(t, b, p1, 20*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	more := publish(t, l, 2, 3, 5)
	p2 := &projections.Projector{Bus: b, Store: store, BatchSize: 50}
	stop = run(t, p2)
	caughtUp(t, b, p2, 20*time.Second)
	if got, want := p2.Progress().Applied, uint64(len(more)); got != want {
		t.Fatalf("restarted projector applied %d, want only the %d new entries", got, want)
	}
	// One projector applies a consumer at a time (owner.go): p2 goes first.
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	fresh := memory.New()
	p3 := &projections.Projector{Bus: b, Store: fresh, BatchSize: 50}
	run(t, p3)
	caughtUp(t, b, p3, 20*time.Second)
	if err := projections.Verify(context.Background(), store, fresh); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

// flaky fails ApplyBatch while down is set, as a database that is down.
type flaky struct {
	*memory.Store
	down  atomic.Bool
	fails atomic.Int64
}

func (f *flaky) ApplyBatch(ctx context.Context, consumer string, es []events.Entry, offset uint64) error {
	if f.down.Load() {
		f.fails.Add(1)
		return fmt.Errorf("%w: connection refused", adapters.ErrUnavailable)
	}
	return f.Store.ApplyBatch(ctx, consumer, es, offset)
}

func TestProjectorRetriesWhileStoreDown(t *testing.T) {
	b := openBus(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	store := &flaky{Store: memory.New()}
	p := &projections.Projector{Bus: b, Store: store, BatchSize: 20, MaxBackoff: 100 * time.Millisecond}
	run(t, p)
	first := publish(t, l, 1, 2, 2)
	caughtUp(t, b, p, 10*time.Second)
	store.down.Store(true)
	second := publish(t, l, 2, 3, 3)
	testenv.Eventually(t, 10*time.Second, func() error {
		if store.fails.Load() < 3 {
			return fmt.Errorf("%d failed applies", store.fails.Load())
		}
		return nil
	})
	store.down.Store(false)
	caughtUp(t, b, p, 10*time.Second)
	if got, want := p.Progress().Applied, uint64(len(first)+len(second)); got != want {
		t.Fatalf("applied = %d, want %d", got, want)
	}
	if p.Progress().Errors == 0 {
		t.Fatalf("errors = 0, want the failed attempts counted")
	}
}

func TestProjectorConfig(t *testing.T) {
	if err := (&projections.Projector{}).Run(context.Background()); !errors.Is(err, projections.ErrInvalidConfig) {
		t.Fatalf("Run without bus = %v, want ErrInvalidConfig", err)
	}
}

func FuzzDecode(f *testing.F) {
	good, _ := events.Marshal(events.New(1, "n", "sb", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte("hi"))))
	f.Add("alineo.ledger.sb.exec.output", good)
	f.Add("alineo.ledger.sb.exec.started", good)
	f.Add("alineo.ledger.x", []byte("{}"))
	f.Add("alineo.ledger.sb.exec.output", []byte("\xff"))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		e, err := projections.Decode("alineo.ledger", subject, data, 7)
		if err != nil {
			if !errors.Is(err, events.ErrInvalidEntry) {
				t.Fatalf("Decode error %v does not wrap ErrInvalidEntry", err)
			}
			return
		}
		if e.Seq != 7 || events.Validate(e) != nil {
			t.Fatalf("Decode accepted %+v", e)
		}
		want, _ := events.Subject("alineo.ledger", e.SandboxID, e.Event)
		if want != subject {
			t.Fatalf("Decode accepted subject %q for %s", subject, want)
		}
	})
}
