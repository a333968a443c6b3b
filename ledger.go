package alineo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/validated"
	"github.com/alineo-labs/alineo/internal/workers"
)

const (
	// ledgerQueueMax bounds the entries queued and not yet written per handle;
	// a producer beyond it waits.
	ledgerQueueMax = 4096
	// ledgerBatchMax bounds one AppendBatch.
	ledgerBatchMax = 512
	// ledgerWriteTimeout bounds one store call. Writes do not follow the caller's
	// ctx: an entry that was queued is written (or fails) on its own.
	ledgerWriteTimeout = 30 * time.Second
)

// ledger is one handle's ordered writer. Entries are stamped and queued when
// they are emitted, in emit order, and written by at most one goroutine at a
// time in that order, in batches when several are waiting. A batch that fails
// is retried entry by entry (AppendBatch is all or nothing), so a failed entry
// fails only its own emitter. The writer goroutine exists only while the queue
// is non-empty; a caller about to wait for its entries (writeMany) is the
// writer itself when none is running.
//
// The writer is where the SDK's entries enter the system: it validates each
// one (events.Validate) before writing it, fails an invalid one alone, and
// hands the valid ones to a store of this module through AppendValidated, so
// the store does not validate them again (see the adapters package doc). A
// custom Ledger gets Append and AppendBatch.
type ledger struct {
	store     adapters.Ledger
	trusted   validated.Appender // store, when it takes validated entries; else nil
	name      string
	sandboxID string
	actor     string // every entry's Actor
	now       func() time.Time

	// The writer's own buffers, reused batch after batch: only the writer
	// (one goroutine at a time, handed over under mu) uses them.
	one   [1]events.Entry // appendOne's batch
	batch []pendingEntry  // the batch taken from the queue
	es    []events.Entry  // its entries, for appendBatch

	slots chan struct{} // one per queued entry, bounds the queue

	mu sync.Mutex
	// queue holds the entries queued and not yet taken by the writer; its
	// array is reused once the writer has emptied it (reuse).
	queue   []pendingEntry
	running bool
	lastTs  int64
}

type pendingEntry struct {
	e     events.Entry
	done  chan error // buffered, receives the write's result
	chain *chain     // nil, or the exec the entry belongs to
}

func newLedger(store adapters.Ledger, name, sandboxID string) *ledger {
	trusted := validated.AppenderOf(store) // nil for a custom ledger, or a wrapper of ours
	return &ledger{
		store: store, trusted: trusted, name: name, sandboxID: sandboxID, now: time.Now,
		slots: make(chan struct{}, ledgerQueueMax),
	}
}

// emit queues an event and returns a channel that receives the result of its
// write. The event's Ts is taken now; events emitted one after the other keep
// that order in the ledger (Ts never goes backwards within a handle). It waits
// only while the queue is full, and returns ctx.Err() if ctx ends first.
func (l *ledger) emit(ctx context.Context, ev events.Event, step int, payload any) (<-chan error, error) {
	return l.emitChained(ctx, nil, ev, step, payload)
}

// emitChained is emit for an entry of chain c (nil for none): it is not written
// if an earlier entry of c failed.
func (l *ledger) emitChained(ctx context.Context, c *chain, ev events.Event, step int, payload any) (<-chan error, error) {
	var done [1]<-chan error
	if err := l.emitMany(ctx, c, done[:], emission{ev: ev, step: step, payload: payload}); err != nil {
		return nil, err
	}
	return done[0], nil
}

// emission is one event for emitMany.
type emission struct {
	ev      events.Event
	step    int
	payload any
	// prevHash is the PrevHash of a session's first entry: a fork's
	// sandbox.created names its parent's head ("" for none).
	prevHash string
}

// emitMany is emitChained for several events at once: they are queued together,
// in order, so the writer takes them into one batch (one transaction) unless the
// batch is full. done[i] receives the result of es[i]'s write. Either all are
// queued or none (the error is then ctx's).
func (l *ledger) emitMany(ctx context.Context, c *chain, done []<-chan error, es ...emission) error {
	lead, err := l.queueMany(ctx, c, done, es)
	if err == nil && lead {
		workers.Go(ctx, l.drain)
	}
	return err
}

// writeMany is emitMany for a caller that waits for the writes right away:
// when no writer is running, the caller writes the entries itself, sparing
// the hand-over to a writer goroutine and back; otherwise they queue behind
// the running writer's. Either way done[i] receives es[i]'s result, and
// when writeMany returns having written them, done is already filled.
func (l *ledger) writeMany(ctx context.Context, c *chain, done []<-chan error, es ...emission) error {
	lead, err := l.queueMany(ctx, c, done, es)
	if err == nil && lead {
		l.writeLed(ctx, len(es))
	}
	return err
}

// emitLed is emitChained for a caller that will wait for the write in a
// goroutine of its own, which it is about to start: when no writer is
// running, lead is true and that goroutine must call writeLed(ctx, 1), which
// writes the entry there, sparing the hand-over to a writer goroutine and
// back (an exec's exec.started, which its request waits for).
func (l *ledger) emitLed(ctx context.Context, c *chain, ev events.Event, step int, payload any) (done <-chan error, lead bool, err error) {
	var d [1]<-chan error
	lead, err = l.queueMany(ctx, c, d[:], []emission{{ev: ev, step: step, payload: payload}})
	return d[0], lead, err
}

// queueMany stamps and queues es, done[i] receiving es[i]'s result. It
// reports lead when no writer was running: the caller is the writer now, and
// must write (writeLed) or start one (drain); the queue held nothing before es.
func (l *ledger) queueMany(ctx context.Context, c *chain, done []<-chan error, es []emission) (lead bool, err error) {
	for i := range es {
		select {
		case l.slots <- struct{}{}:
		case <-ctx.Done():
			for range i {
				<-l.slots
			}
			return false, ctx.Err()
		}
	}
	l.mu.Lock()
	ts := l.now().UnixMilli()
	if ts < l.lastTs {
		ts = l.lastTs
	}
	l.lastTs = ts
	tp := traceParent(ctx)
	for i, em := range es {
		var e events.Entry
		if raw, ok := em.payload.(json.RawMessage); ok { // already encoded
			e = events.Entry{Ts: ts, Name: l.name, SandboxID: l.sandboxID, StepIndex: em.step, Event: em.ev, Payload: raw}
		} else {
			e = events.New(ts, l.name, l.sandboxID, em.step, em.ev, em.payload)
		}
		e.Trace, e.Actor, e.PrevHash = tp, l.actor, em.prevHash
		ch := make(chan error, 1)
		done[i] = ch
		l.queue = append(l.queue, pendingEntry{e: e, done: ch, chain: c})
	}
	lead = !l.running
	l.running = true
	l.mu.Unlock()
	return lead, nil
}

// writeLed writes the first n entries of the queue, those of the caller that
// queueMany made the writer, and nothing queued after them: what was queued
// meanwhile goes to a writer goroutine, which runs with ctx's profiler labels.
func (l *ledger) writeLed(ctx context.Context, n int) {
	for n > 0 {
		w := min(n, ledgerBatchMax)
		l.drainBatch(w)
		n -= w
	}
	l.mu.Lock()
	if len(l.queue) == 0 {
		l.running = false
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	workers.Go(ctx, l.drain)
}

// scratchMax bounds the entries a buffer the ledger reuses may hold and be
// kept: the array a burst grew is dropped once it is drained, not held for
// the handle's life.
const scratchMax = 64

// reuse returns s emptied, its array cleared for the collector and kept to
// be filled again, or nil when it grew beyond scratchMax.
func reuse[T any](s []T) []T {
	if cap(s) > scratchMax {
		return nil
	}
	clear(s[:cap(s)])
	return s[:0]
}

// write emits an event and waits for it to be written. The write itself does not
// stop when ctx ends once the entry is queued: the result is always known.
func (l *ledger) write(ctx context.Context, ev events.Event, step int, payload any) error {
	var done [1]<-chan error
	if err := l.writeMany(ctx, nil, done[:], emission{ev: ev, step: step, payload: payload}); err != nil {
		return err
	}
	return <-done[0]
}

// drain writes the queue, batch by batch, until it is empty.
func (l *ledger) drain() {
	for l.drainBatch(ledgerBatchMax) {
	}
}

// drainBatch writes the next batch of the queue, at most limit entries, and
// reports whether it wrote one; on an empty queue it stops the writer
// (running = false) and reports false. Only the writer calls it.
func (l *ledger) drainBatch(limit int) bool {
	l.mu.Lock()
	n := min(len(l.queue), limit)
	if n == 0 {
		l.running = false
		l.mu.Unlock()
		return false
	}
	l.batch = append(l.batch[:0], l.queue[:n]...)
	if n == len(l.queue) {
		l.queue = reuse(l.queue)
	} else {
		clear(l.queue[:n])
		l.queue = l.queue[n:]
	}
	l.mu.Unlock()

	l.writeBatch(l.batch)
	for range n {
		<-l.slots
	}
	l.batch = reuse(l.batch)
	return true
}

func (l *ledger) writeBatch(batch []pendingEntry) {
	// Entries whose chain already failed are not written; an invalid entry
	// fails alone (and its chain).
	live := batch[:0] // filtered in place: batch is the writer's own
	for _, p := range batch {
		if p.chain != nil && p.chain.err != nil {
			p.done <- &chainError{err: p.chain.err}
			continue
		}
		if err := events.Validate(p.e); err != nil {
			l.finish(p, fmt.Errorf("alineo: record %s: %w", p.e.Event, err))
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ledgerWriteTimeout)
	defer cancel()
	if len(live) == 1 {
		l.finish(live[0], l.appendOne(ctx, live[0].e))
		return
	}
	es := l.es[:0]
	for _, p := range live {
		es = append(es, p.e)
	}
	err := l.appendBatch(ctx, es)
	// Kept only after a write that succeeded: one that failed (its ctx
	// timed out, say) may have left es with a commit still in flight.
	l.es = nil
	if err == nil {
		l.es = reuse(es)
	}
	if err == nil || errors.Is(err, adapters.ErrClosed) {
		for _, p := range live {
			l.finish(p, err)
		}
		return
	}
	// Nothing was written: find out which entries fail, in order.
	for _, p := range live {
		if p.chain != nil && p.chain.err != nil {
			p.done <- &chainError{err: p.chain.err}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), ledgerWriteTimeout)
		l.finish(p, l.appendOne(ctx, p.e))
		cancel()
	}
}

// appendOne writes e, which passed events.Validate.
func (l *ledger) appendOne(ctx context.Context, e events.Entry) error {
	if l.trusted != nil {
		l.one[0] = e
		err := l.trusted.AppendValidated(ctx, validated.Trust(l.one[:]))
		l.one[0] = events.Entry{}
		return err
	}
	return l.store.Append(ctx, e)
}

// appendBatch writes es, each of which passed events.Validate, all or nothing.
func (l *ledger) appendBatch(ctx context.Context, es []events.Entry) error {
	if l.trusted != nil {
		return l.trusted.AppendValidated(ctx, validated.Trust(es))
	}
	return l.store.AppendBatch(ctx, es)
}

// finish reports the result of p's write, and marks its chain failed on error.
func (l *ledger) finish(p pendingEntry, err error) {
	if err != nil && p.chain != nil {
		p.chain.err = err
	}
	p.done <- err
}

// chain links the entries of one exec: once one of them failed to be written,
// the later ones are not written either, so the ledger never holds an exec's
// exec.completed with one of its output rows missing. Its err is used only by
// the drain goroutine (one at a time, handed over under ledger.mu).
type chain struct{ err error }

// chainError is the result of an entry not written because an earlier entry of
// its chain failed.
type chainError struct{ err error }

func (e *chainError) Error() string {
	return "not written after an earlier write of the same exec failed: " + e.err.Error()
}

func (e *chainError) Unwrap() error { return e.err }
