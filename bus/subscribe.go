package bus

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// Filter selects the entries of a subscription. The zero value is every new
// entry of every sandbox.
type Filter struct {
	// SandboxID limits the subscription to one sandbox; "" for all.
	SandboxID string
	// Events limits it to these events, known or extension events (see
	// events.Event.Extension); empty for all.
	Events []events.Event
	// FromSeq is the first stream sequence delivered; 0 delivers only entries
	// published after Subscribe returns.
	FromSeq uint64
}

func (b *Bus) subjects(f Filter) ([]string, error) {
	id := "*"
	if f.SandboxID != "" {
		if _, err := events.SandboxSubject(b.cfg.SubjectPrefix, f.SandboxID); err != nil {
			return nil, err
		}
		id = f.SandboxID
	}
	if len(f.Events) == 0 {
		return []string{b.cfg.SubjectPrefix + "." + id + ".>"}, nil
	}
	subs := make([]string, 0, len(f.Events))
	seen := map[events.Event]bool{}
	for _, ev := range f.Events {
		if !ev.Valid() { // a known event or an extension event
			return nil, fmt.Errorf("%w: %w", events.ErrInvalidSubject, events.CheckEvent(ev))
		}
		if !seen[ev] {
			seen[ev] = true
			subs = append(subs, b.cfg.SubjectPrefix+"."+id+"."+string(ev))
		}
	}
	return subs, nil
}

// Subscribe is Bus.Subscribe on the ledger's bus.
func (l *Ledger) Subscribe(ctx context.Context, f Filter) (iter.Seq2[events.Entry, error], error) {
	return l.b.Subscribe(ctx, f)
}

// Subscribe delivers the entries matching f, each with its stream sequence in
// Seq: from f.FromSeq (or from now) and then live, in stream order. The
// position is fixed when Subscribe returns. Ranging over the result blocks
// until the next entry; the range ends cleanly (no error) when ctx is done, and
// with one error if the subscription fails. Messages that do not decode are
// skipped. The returned sequence may be ranged once; cancel ctx to release it.
func (b *Bus) Subscribe(ctx context.Context, f Filter) (iter.Seq2[events.Entry, error], error) {
	subs, err := b.subjects(f)
	if err != nil {
		return nil, err
	}
	octx, cancel := opCtx(ctx)
	defer cancel()
	from := f.FromSeq
	if from == 0 {
		// "From now" is pinned to a sequence, not DeliverNew: nats.go recreates
		// an ordered consumer that has delivered nothing yet (its stream
		// leader lost, say) with its first configuration, and DeliverNew would
		// then skip what was appended in between.
		info, err := b.stream.Info(octx)
		if err != nil {
			return nil, fmt.Errorf("%w: subscribe: %w", adapters.ErrUnavailable, err)
		}
		from = info.State.LastSeq + 1
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: subs, InactiveThreshold: 30 * time.Second,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from}
	cons, err := b.js.OrderedConsumer(octx, b.cfg.Stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: subscribe: %w", adapters.ErrUnavailable, err)
	}
	// Start pulling now so the position is fixed when Subscribe returns.
	msgs, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return nil, fmt.Errorf("%w: subscribe: %w", adapters.ErrUnavailable, err)
	}
	// Stop pulling when ctx is done, whether or not the result is ever ranged.
	context.AfterFunc(ctx, msgs.Stop)
	return func(yield func(events.Entry, error) bool) {
		defer msgs.Stop()
		for {
			m, err := msgs.Next()
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					return
				}
				yield(events.Entry{}, fmt.Errorf("%w: subscription: %w", adapters.ErrUnavailable, err))
				return
			}
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			e, err := DecodeMsg(m.Data(), md.Sequence.Stream)
			if err != nil {
				b.cfg.Logger.Warn("bus: subscription skips undecodable message", "subject", m.Subject(), "seq", md.Sequence.Stream, "err", err)
				continue
			}
			if !yield(e, nil) {
				return
			}
		}
	}, nil
}
