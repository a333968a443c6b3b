package projections

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
)

// RebuildStats says what a rebuild did.
type RebuildStats struct {
	Applied  uint64 // entries written
	Skipped  uint64 // messages that did not decode or were poison (parked by the live projection)
	Filtered uint64 // messages passed over: filtered out or of partitions not rebuilt
	LastSeq  uint64 // stream sequence the rebuild stopped at
	Elapsed  time.Duration
}

// Rebuild projects the ledger stream from sequence 1 up to its last sequence at
// the time of the call into into, a fresh store, storing the offset under
// DefaultConsumer (so a live Projector can continue from it). It prints a
// progress bar to progress (nil for none). Rebuilding into a store that
// already holds the rows is harmless: they are skipped by sequence.
func Rebuild(ctx context.Context, b *bus.Bus, into adapters.ProjectionStore, progress io.Writer) (RebuildStats, error) {
	return RebuildAs(ctx, b, into, DefaultConsumer, progress)
}

// RebuildAs is Rebuild storing the offset under consumer.
func RebuildAs(ctx context.Context, b *bus.Bus, into adapters.ProjectionStore, consumer string, progress io.Writer) (RebuildStats, error) {
	return RebuildHandler(ctx, b, TablesHandler(into), RebuildOptions{Key: consumer, Progress: progress})
}

// RebuildOptions says what RebuildHandler reads and where it leaves offsets.
type RebuildOptions struct {
	// Key is the offset key (the consumer name a live Runtime continues as). Required.
	Key string
	// Filter is the projection's filter.
	Filter Filter
	// From is the first stream sequence read; 0 or 1 for the whole history.
	From uint64
	// Partition rebuilds partition Index of N only, under its key. With
	// AllPartitions it rebuilds every partition in one pass, each under its
	// own key, so N partitioned runtimes continue from the rebuilt target.
	Partition     Partitioning
	AllPartitions bool
	// BatchSize bounds the entries per Apply. Default DefaultBatchSize.
	BatchSize int
	// Progress receives a progress bar with an ETA; nil for none.
	Progress io.Writer
}

// RebuildHandler projects the stream from o.From up to its last sequence at
// the time of the call into h (a fresh target, usually, beside the live one),
// in batches each applied with its offset. When it returns, a Runtime on the
// same target and key continues from there: run it until it catches up with
// the live projection, verify, and switch readers over. Entries at or below
// the target's stored offset are skipped by an exactly-once handler, so a
// rebuild that was interrupted can be run again.
func RebuildHandler(ctx context.Context, b *bus.Bus, h Handler, o RebuildOptions) (RebuildStats, error) {
	start := time.Now()
	rb, err := newRebuilder(b, h, o)
	if err != nil {
		return RebuildStats{}, err
	}
	defer func() { rb.st.Elapsed = time.Since(start); rb.bar.done(rb.st) }()
	if err := rb.run(ctx); err != nil {
		return rb.st, fmt.Errorf("rebuild: %w", err)
	}
	return rb.st, nil
}

type rebuilder struct {
	b        *bus.Bus
	h        Handler
	o        RebuildOptions
	subjects []string
	checkSB  bool
	keys     []string // offset key of each partition rebuilt
	parts    []int    // partition index of each key
	batches  [][]events.Entry
	pending  int
	dec      bus.Decoder
	st       RebuildStats
	bar      *bar
}

func newRebuilder(b *bus.Bus, h Handler, o RebuildOptions) (*rebuilder, error) {
	if b == nil || h == nil || o.Key == "" {
		return nil, fmt.Errorf("%w: rebuild needs a bus, a handler and a key", ErrInvalidConfig)
	}
	if err := o.Partition.validate(); err != nil {
		return nil, err
	}
	if err := o.Filter.Validate(); err != nil {
		return nil, err
	}
	o.BatchSize = cmpOr(o.BatchSize, DefaultBatchSize)
	o.From = max(o.From, 1)
	rb := &rebuilder{b: b, h: h, o: o, bar: newBar(o.Progress)}
	rb.subjects, rb.checkSB = o.Filter.subjects(b.Config().SubjectPrefix)
	n := max(o.Partition.N, 1)
	for i := range n {
		if o.AllPartitions || n == 1 || i == o.Partition.Index {
			rb.keys = append(rb.keys, PartitionKey(o.Key, i, n))
			rb.parts = append(rb.parts, i)
		}
	}
	rb.batches = make([][]events.Entry, len(rb.keys))
	return rb, nil
}

func (rb *rebuilder) run(ctx context.Context) error {
	last, err := rb.b.LastSeq(ctx)
	if err != nil {
		return fmt.Errorf("stream info: %w", err)
	}
	rb.bar.start(rb.o.From, last)
	if last < rb.o.From {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: rb.subjects, DeliverPolicy: jetstream.DeliverAllPolicy}
	if unfiltered(rb.subjects, rb.b.Config().SubjectPrefix) {
		cfg.FilterSubjects = nil // see Runtime.consumer; add skips fence messages
	}
	if rb.o.From > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, rb.o.From
	}
	cons, err := rb.b.JetStream().OrderedConsumer(ctx, rb.b.Config().Stream, cfg)
	if err != nil {
		return fmt.Errorf("ordered consumer: %w", err)
	}
	if ci, err := cons.Info(ctx); err == nil && ci.NumPending == 0 {
		return rb.flush(ctx, last) // nothing matches: the offsets still advance
	}
	msgs, err := cons.Messages(jetstream.PullMaxMessages(4 * rb.o.BatchSize))
	if err != nil {
		return err
	}
	defer msgs.Stop()
	prefix := rb.b.Config().SubjectPrefix
	for {
		m, err := msgs.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("read after %d: %w", rb.st.LastSeq, err)
		}
		md, err := metadata(m)
		if err != nil {
			return err
		}
		seq := md.stream
		if seq > last {
			return rb.flush(ctx, last)
		}
		rb.add(prefix, m, seq)
		end := md.pending == 0 || seq >= last
		if rb.pending >= rb.o.BatchSize || end {
			if err := rb.flush(ctx, seq); err != nil {
				return err
			}
		}
		if end {
			return nil
		}
	}
}

// add sorts one message into its partition's batch, or counts it passed over.
func (rb *rebuilder) add(prefix string, m jetstream.Msg, seq uint64) {
	if !ledgerSubject(prefix, m.Subject()) {
		return // a fence message (the consumer is unfiltered)
	}
	id, ev, perr := events.ParseSubject(prefix, m.Subject())
	if perr != nil {
		rb.st.Skipped++
		return
	}
	k, part := -1, PartitionOf(id, max(rb.o.Partition.N, 1))
	for i, p := range rb.parts {
		if p == part {
			k = i
		}
	}
	if k < 0 || rb.checkSB && !rb.o.Filter.keepSandbox(id) || !rb.o.Filter.keepEvent(ev) {
		rb.st.Filtered++
		return
	}
	e, err := decodeParsed(&rb.dec, m.Subject(), id, ev, nil, m.Data(), seq)
	switch {
	case err != nil:
		rb.st.Skipped++
	case !rb.o.Filter.keepName(e.Name):
		rb.st.Filtered++
	default:
		rb.batches[k] = append(rb.batches[k], e)
		rb.pending++
	}
}

// flush applies every partition's batch with offset seq (an empty one too:
// its offset advances), skipping poison entries.
func (rb *rebuilder) flush(ctx context.Context, seq uint64) error {
	for i, key := range rb.keys {
		for {
			err := rb.h.Apply(ctx, Batch{Key: key, Entries: rb.batches[i], Offset: seq})
			var pe *PoisonError
			if err == nil {
				break
			}
			j := -1
			if errors.As(err, &pe) {
				j = indexSeq(rb.batches[i], pe.Seq)
			}
			if j < 0 {
				return fmt.Errorf("apply %s up to %d: %w", key, seq, err)
			}
			rb.batches[i] = append(rb.batches[i][:j:j], rb.batches[i][j+1:]...)
			rb.st.Skipped++
		}
		rb.st.Applied += uint64(len(rb.batches[i]))
		rb.batches[i] = rb.batches[i][:0]
	}
	rb.pending = 0
	rb.st.LastSeq = seq
	rb.bar.set(seq)
	return nil
}

func indexSeq(es []events.Entry, seq uint64) int {
	for i := range es {
		if es[i].Seq == seq {
			return i
		}
	}
	return -1
}

// bar draws a progress bar with an ETA on one terminal line.
type bar struct {
	w           io.Writer
	first, last uint64
	began       time.Time
	drawn       time.Time
	at          uint64
}

func newBar(w io.Writer) *bar { return &bar{w: w} }

func (b *bar) start(first, last uint64) { b.first, b.last, b.began = first, last, time.Now() }

// fraction is how far seq is through [first, last].
func (b *bar) fraction(seq uint64) float64 {
	if b.last < b.first || seq >= b.last {
		return 1
	}
	if seq < b.first {
		return 0
	}
	return float64(seq-b.first+1) / float64(b.last-b.first+1)
}

func (b *bar) set(seq uint64) {
	b.at = seq
	if b.w == nil || time.Since(b.drawn) < 200*time.Millisecond && seq < b.last {
		return
	}
	b.drawn = time.Now()
	const width = 30
	frac := b.fraction(seq)
	full := int(frac * width)
	eta := "--"
	if el := time.Since(b.began); frac > 0 && frac < 1 {
		eta = (time.Duration(float64(el) * (1 - frac) / frac)).Round(time.Second).String()
	} else if frac >= 1 {
		eta = "0s"
	}
	fmt.Fprintf(b.w, "\rrebuild [%s%s] %3.0f%% seq %d/%d  ETA %s ", strings.Repeat("#", full), strings.Repeat(".", width-full), frac*100, seq, b.last, eta)
}

func (b *bar) done(st RebuildStats) {
	if b.w == nil {
		return
	}
	if b.at < b.last || b.drawn.IsZero() {
		b.drawn = time.Time{}
		b.set(max(b.last, b.at))
	}
	fmt.Fprintf(b.w, "\nrebuilt %d entries (%d skipped, %d filtered out) up to seq %d in %v\n", st.Applied, st.Skipped, st.Filtered, st.LastSeq, st.Elapsed.Round(time.Millisecond))
}
