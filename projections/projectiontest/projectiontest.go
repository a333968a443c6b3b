package projectiontest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/testenv"
)

// Base is the Ts of the first event of a History: 2026-11-01 00:00 UTC.
var Base = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// Names are the session names a History uses, sandbox i being Names[i%len].
var Names = []string{"build", "test", "lint", "deploy", "bench"}

// Hosts are the hosts credentials of a History are bound for.
var Hosts = []string{"api.github.com", "registry.npmjs.org", "*.amazonaws.com", "pypi.org"}

// History returns a history of sandboxes sandboxes, each with execs execs (1
// to 3 output chunks each), interleaved round robin across sandboxes the way
// concurrent sandboxes write, every entry valid. It is deterministic for a
// seed. With execs = 10 it averages ~50 events per sandbox (200 sandboxes:
// ~10k events).
func History(seed uint64, sandboxes, execs int) []events.Entry {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	per := make([][]events.Entry, sandboxes)
	for i := range sandboxes {
		per[i] = sandbox(r, i, execs)
	}
	var all []events.Entry
	for k := 0; ; k++ {
		added := false
		for i := range per {
			if k < len(per[i]) {
				all = append(all, per[i][k])
				added = true
			}
		}
		if !added {
			return all
		}
	}
}

func sandbox(r *rand.Rand, i, execs int) []events.Entry {
	name, id := Names[i%len(Names)], fmt.Sprintf("sb-%05d", i)
	ts := Base + int64(i)*int64(9*time.Minute/time.Millisecond) // spread over days
	es := []events.Entry{events.New(ts, name, id, events.SandboxLevel, events.SandboxCreated,
		events.SandboxCreatedPayload{SandboxID: id, RunID: "run-" + id, EgressDefault: events.Deny})}
	host := Hosts[i%len(Hosts)]
	es = append(es, events.New(ts+1, name, id, events.SandboxLevel, events.EgressRuleAdded,
		events.EgressRulePayload{Action: events.Allow, Target: host}))
	es = append(es, events.New(ts+2, name, id, events.SandboxLevel, events.CredentialBound,
		events.CredentialPayload{Name: fmt.Sprintf("token-%d", i%7), Source: "env",
			Binding: &events.CredentialBinding{Hosts: []string{host}, Type: "bearer"}}))
	ts += 10
	for x := 1; x <= execs; x++ {
		es = append(es, events.New(ts, name, id, x, events.ExecStarted,
			events.ExecStartedPayload{Seq: x, Kind: events.KindCommand, Cmd: fmt.Sprintf("step %d", x)}))
		for o := range 1 + r.IntN(3) {
			es = append(es, events.New(ts+int64(o), name, id, x, events.ExecOutput,
				events.NewOutput(x, events.Stdout, fmt.Appendf(nil, "line %d of step %d\n", o, x))))
		}
		ts += 5 + int64(r.IntN(2000)) // duration 5 ms .. 2 s
		code := 0
		if r.IntN(10) == 0 {
			code = 1 + r.IntN(3)
		}
		es = append(es, events.New(ts, name, id, x, events.ExecCompleted, events.ExecCompletedPayload{Seq: x, ExitCode: code}))
		ts += int64(r.IntN(50))
	}
	if i%3 == 0 {
		es = append(es, events.New(ts, name, id, events.SandboxLevel, events.EgressRuleRemoved,
			events.EgressRulePayload{Action: events.Allow, Target: host}))
	}
	if i%4 == 0 {
		es = append(es, events.New(ts+1, name, id, events.SandboxLevel, events.CredentialRevoked,
			events.CredentialPayload{Name: fmt.Sprintf("token-%d", i%7)}))
	}
	es = append(es, events.New(ts+2, name, id, events.SandboxLevel, events.CheckpointCreated,
		events.CheckpointCreatedPayload{SnapshotID: "snap-" + id}))
	es = append(es, events.New(ts+3, name, id, events.SandboxLevel, events.SandboxClosed, nil))
	// Who caused them: a user through an executor, or, on every fourth
	// session, nobody known (as the TypeScript SDK writes).
	if i%4 != 0 {
		for k := range es {
			es[k].Actor = fmt.Sprintf("user-%d via executor-%d", i%5, i%2)
		}
	}
	return es
}

// Bus opens a bus on a fresh embedded NATS server, closed by t.Cleanup.
func Bus(t testing.TB) *bus.Bus {
	t.Helper()
	b, err := bus.Open(context.Background(), bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatalf("bus.Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// Writer writes histories to a bus through one bus.Ledger (a sandbox's
// history must come from one writer, or the next one is fenced).
type Writer struct {
	b *bus.Bus
	l *bus.Ledger
}

// NewWriter returns a Writer on b, closed by t.Cleanup.
func NewWriter(t testing.TB, b *bus.Bus) *Writer {
	t.Helper()
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatalf("NewLedger: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return &Writer{b: b, l: l}
}

// Write appends es and waits for every acknowledgement. It returns the
// stream sequence of the last entry written. Safe to call from any goroutine
// (it reports errors instead of failing t).
func (w *Writer) Write(ctx context.Context, es []events.Entry) (uint64, error) {
	for _, e := range es {
		if err := w.l.Append(ctx, e); err != nil {
			return 0, fmt.Errorf("append: %w", err)
		}
	}
	if err := w.l.Flush(ctx); err != nil {
		return 0, fmt.Errorf("flush: %w", err)
	}
	return w.l.LastSeq(), nil
}

// Publish writes es to b through a new Writer. It returns the stream
// sequence of the last entry.
func Publish(t testing.TB, b *bus.Bus, es []events.Entry) uint64 {
	t.Helper()
	last, err := NewWriter(t, b).Write(context.Background(), es)
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// LastSeq returns the stream sequence of the last message f selects (0 if
// none): what a projection with filter f is caught up with when its offset
// reaches it.
func LastSeq(t testing.TB, b *bus.Bus, f projections.Filter) uint64 {
	t.Helper()
	var last uint64
	for _, s := range f.Subjects(b.Config().SubjectPrefix) {
		m, err := b.LastMsg(context.Background(), s)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("last message on %s: %v", s, err)
		}
		last = max(last, m.Sequence)
	}
	return last
}

// Start runs r in the background; the returned func stops it (idempotent)
// and returns Run's error. t.Cleanup stops it too.
func Start(t testing.TB, r *projections.Runtime) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// Await waits up to timeout for r to commit up to seq.
func Await(t testing.TB, r *projections.Runtime, seq uint64, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := r.Await(ctx, seq); err != nil {
		t.Fatalf("await offset %d: %v (progress %+v)", seq, err, r.Progress())
	}
}
