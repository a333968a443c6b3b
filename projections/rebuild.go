package projections

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
)

// RebuildStats says what Rebuild did.
type RebuildStats struct {
	Applied uint64 // entries written
	Skipped uint64 // messages that did not decode (already parked by the live projector)
	LastSeq uint64 // stream sequence the rebuild stopped at
	Elapsed time.Duration
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
	start := time.Now()
	var st RebuildStats
	si, err := b.Stream().Info(ctx, jetstream.WithSubjectFilter(b.LedgerFilter()))
	if err != nil {
		return st, fmt.Errorf("rebuild: stream info: %w", err)
	}
	last := si.State.LastSeq
	total := si.State.Msgs
	bar := newBar(progress, total)
	defer func() { st.Elapsed = time.Since(start); bar.done(st) }()
	if total == 0 {
		return st, nil
	}
	cons, err := b.JetStream().OrderedConsumer(ctx, b.Config().Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.LedgerFilter()},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return st, fmt.Errorf("rebuild: ordered consumer: %w", err)
	}
	msgs, err := cons.Messages(jetstream.PullMaxMessages(4 * DefaultBatchSize))
	if err != nil {
		return st, fmt.Errorf("rebuild: %w", err)
	}
	defer msgs.Stop()
	prefix := b.Config().SubjectPrefix
	batch := make([]events.Entry, 0, DefaultBatchSize)
	var seen, seq uint64
	apply := applyFunc(into) // Decode validates
	flush := func() error {
		if err := apply(ctx, consumer, batch, seq); err != nil {
			return fmt.Errorf("rebuild: apply up to %d: %w", seq, err)
		}
		st.Applied += uint64(len(batch))
		st.LastSeq = seq
		batch = batch[:0]
		bar.set(seen)
		return nil
	}
	for seq < last {
		m, err := msgs.Next(jetstream.NextContext(ctx))
		if err != nil {
			return st, fmt.Errorf("rebuild: read at %d: %w", seq, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return st, fmt.Errorf("rebuild: %w", err)
		}
		seq = md.Sequence.Stream
		seen++
		e, err := Decode(prefix, m.Subject(), m.Data(), seq)
		if err != nil {
			st.Skipped++
		} else {
			batch = append(batch, e)
		}
		if len(batch) >= DefaultBatchSize || md.NumPending == 0 || seq >= last {
			if err := flush(); err != nil {
				return st, err
			}
		}
		if md.NumPending == 0 {
			break
		}
	}
	return st, nil
}

// bar draws a progress bar on one terminal line.
type bar struct {
	w     io.Writer
	total uint64
	drawn time.Time
}

func newBar(w io.Writer, total uint64) *bar { return &bar{w: w, total: total} }

func (b *bar) set(n uint64) {
	if b.w == nil || time.Since(b.drawn) < 200*time.Millisecond && n < b.total {
		return
	}
	b.drawn = time.Now()
	const width = 30
	frac := 1.0
	if b.total > 0 {
		frac = min(float64(n)/float64(b.total), 1)
	}
	full := int(frac * width)
	fmt.Fprintf(b.w, "\rrebuild [%s%s] %3.0f%% %d/%d events", strings.Repeat("#", full), strings.Repeat(".", width-full), frac*100, n, b.total)
}

func (b *bar) done(st RebuildStats) {
	if b.w == nil {
		return
	}
	b.set(b.total)
	fmt.Fprintf(b.w, "\nrebuilt %d entries (%d undecodable skipped) up to seq %d in %v\n", st.Applied, st.Skipped, st.LastSeq, st.Elapsed.Round(time.Millisecond))
}
