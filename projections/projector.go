package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/validated"
)

// Defaults of Projector.
const (
	DefaultConsumer   = "alineo-projector"
	DefaultBatchSize  = 1000
	DefaultBatchWait  = 50 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// Projector applies the ledger stream to Store. Fill in the fields, then call
// Run. Bus and Store are required; every other zero value means its default.
// A Projector runs once at a time; Progress is safe for concurrent use.
type Projector struct {
	Bus   *bus.Bus
	Store adapters.ProjectionStore
	// Consumer is the durable consumer's name and the store's offset key.
	// Default alineo-projector.
	Consumer string
	// BatchSize bounds the messages per transaction. Default 1000.
	BatchSize int
	// BatchWait bounds how long a batch waits to fill once it has a message;
	// a batch that reaches the end of the stream (nothing more pending) is
	// committed without waiting. Default 50 ms.
	BatchWait time.Duration
	// MaxBackoff caps the wait between retries while the store or the stream
	// is failing. Default 5 s.
	MaxBackoff time.Duration
	// Registerer receives the metrics; nil registers nowhere (Progress still works).
	Registerer prometheus.Registerer
	// Logger, default the bus's.
	Logger *slog.Logger

	initOnce sync.Once
	m        *metrics
	applied  atomic.Uint64
	parked   atomic.Uint64
	errs     atomic.Uint64
	offset   atomic.Uint64
	lag      atomic.Uint64
}

// Progress is a snapshot of a projector's work since it started.
type Progress struct {
	Offset  uint64 // stream sequence of the last committed batch
	Applied uint64 // entries applied by this process
	Parked  uint64 // messages parked on the dead-letter subject
	Errors  uint64 // failed attempts that were retried
	Lag     uint64 // messages on the ledger subjects not yet applied
}

// Progress returns the projector's progress. Safe for concurrent use.
func (p *Projector) Progress() Progress {
	return Progress{Offset: p.offset.Load(), Applied: p.applied.Load(), Parked: p.parked.Load(),
		Errors: p.errs.Load(), Lag: p.lag.Load()}
}

// Await returns once the projector has committed everything up to stream
// sequence seq (its Offset is at least seq), or ctx's error. It polls. With a
// bus.Ledger, l.Flush then Await(ctx, l.LastSeq()) is the barrier a reader of
// the projected tables needs to read that ledger's writes (the SDK's
// Options.AwaitReadModel). Safe for concurrent use.
func (p *Projector) Await(ctx context.Context, seq uint64) error {
	for p.offset.Load() < seq {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

func (p *Projector) init() error {
	if p.Bus == nil || p.Store == nil {
		return fmt.Errorf("%w: Bus and Store are required", ErrInvalidConfig)
	}
	if p.BatchSize < 0 || p.BatchWait < 0 || p.MaxBackoff < 0 {
		return fmt.Errorf("%w: negative batch size or duration", ErrInvalidConfig)
	}
	var err error
	p.initOnce.Do(func() {
		if p.Consumer == "" {
			p.Consumer = DefaultConsumer
		}
		if p.BatchSize == 0 {
			p.BatchSize = DefaultBatchSize
		}
		if p.BatchWait == 0 {
			p.BatchWait = DefaultBatchWait
		}
		if p.MaxBackoff == 0 {
			p.MaxBackoff = DefaultMaxBackoff
		}
		if p.Logger == nil {
			p.Logger = p.Bus.Config().Logger
		}
		p.m = newMetrics(p.Consumer)
		if p.Registerer != nil {
			for _, c := range p.m.collectors() {
				if rerr := p.Registerer.Register(c); rerr != nil {
					err = fmt.Errorf("register metrics: %w", rerr)
					return
				}
			}
		}
	})
	return err
}

func (p *Projector) backoff(ctx context.Context) backoff.BackOff {
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval = 50 * time.Millisecond
	eb.MaxInterval = p.MaxBackoff
	eb.MaxElapsedTime = 0 // until ctx is done
	return backoff.WithContext(eb, ctx)
}

// retry runs op until it succeeds or ctx is done, counting every failure.
func (p *Projector) retry(ctx context.Context, what string, op func() error) error {
	return backoff.RetryNotify(op, p.backoff(ctx), func(err error, wait time.Duration) {
		p.errs.Add(1)
		p.m.errors.Inc()
		p.Logger.Warn("projector: retrying", "consumer", p.Consumer, "op", what, "in", wait, "err", err)
	})
}

// consumer (re)creates the durable consumer so that it delivers from
// offset+1, the store's offset, in stream order.
//
// It is recreated on every session rather than reused: a reused consumer
// would first deliver the messages after the ones a crashed predecessor had in
// flight and redeliver those only after AckWait; committing and acking (AckAll)
// the later ones would then skip the earlier ones for good. A fresh consumer's
// first deliveries are in stream order, so any later redelivery is of a
// message this session has already seen, and the offset check skips it.
func (p *Projector) consumer(ctx context.Context, offset uint64) (jetstream.Consumer, error) {
	js, stream := p.Bus.JetStream(), p.Bus.Config().Stream
	if err := js.DeleteConsumer(ctx, stream, p.Consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, err
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       p.Consumer,
		Description:   "alineo projector",
		FilterSubject: p.Bus.LedgerFilter(),
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 16 * p.BatchSize,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if offset > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, offset+1
	}
	return js.CreateOrUpdateConsumer(ctx, stream, cfg)
}

// Run consumes until ctx is done, then returns nil. It returns an error only
// for a configuration it cannot run with; stream and database failures are
// retried with backoff (and counted in Errors).
func (p *Projector) Run(ctx context.Context) error {
	if err := p.init(); err != nil {
		return err
	}
	for ctx.Err() == nil {
		err := p.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		p.errs.Add(1)
		p.m.errors.Inc()
		p.Logger.Warn("projector: consumer session ended; restarting", "consumer", p.Consumer, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// session runs one consumer subscription until it fails or ctx is done.
func (p *Projector) session(ctx context.Context) error {
	var offset uint64
	if err := p.retry(ctx, "offset", func() (err error) {
		offset, err = p.Store.Offset(ctx, p.Consumer)
		return err
	}); err != nil {
		return err
	}
	p.offset.Store(offset)
	var cons jetstream.Consumer
	if err := p.retry(ctx, "consumer", func() (err error) {
		cons, err = p.consumer(ctx, offset)
		return err
	}); err != nil {
		return err
	}
	msgs, err := cons.Messages(jetstream.PullMaxMessages(4*p.BatchSize), jetstream.PullHeartbeat(2*time.Second))
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, msgs.Stop)
	defer stop()

	// Collecting the next batch overlaps with committing the previous one: one
	// batch in flight, committed and acknowledged in order by one goroutine.
	commits := make(chan *batch, 1)
	done := make(chan error, 1)
	go func() { done <- p.committer(ctx, offset, commits) }()
	err = p.collect(ctx, msgs, offset, commits)
	close(commits)
	if cerr := <-done; err == nil {
		err = cerr
	}
	return err
}

// batch is a run of consecutive deliveries, committed as one transaction.
type batch struct {
	es      []events.Entry
	msgs    int
	last    jetstream.Msg
	lastSeq uint64 // stream sequence of last
	pending uint64 // messages left in the stream after last
}

// errDeliveryGap ends a consumer session when a delivery was skipped or
// repeated (a consumer leader change can lose deliveries in flight; the server
// would redeliver them only after AckWait, after later ones were committed).
// The next session recreates the consumer at the committed offset.
var errDeliveryGap = errors.New("consumer delivery out of order")

// delivery is one message as read and decoded by the reader goroutine.
type delivery struct {
	m    jetstream.Msg
	md   *jetstream.MsgMetadata
	e    events.Entry
	derr error // decode error: the message is parked
	err  error // subscription error: the session ends
}

// read pulls messages and decodes them, ahead of collect, until the
// subscription fails or quit is closed.
func (p *Projector) read(msgs jetstream.MessagesContext, out chan<- delivery, quit <-chan struct{}) {
	prefix := p.Bus.Config().SubjectPrefix
	for {
		var d delivery
		d.m, d.err = msgs.Next()
		if d.err == nil {
			if d.md, d.err = d.m.Metadata(); d.err == nil {
				d.e, d.derr = Decode(prefix, d.m.Subject(), d.m.Data(), d.md.Sequence.Stream)
			}
		}
		select {
		case out <- d:
		case <-quit:
			return
		}
		if d.err != nil {
			return
		}
	}
}

// collect reads deliveries into batches bounded by BatchSize and BatchWait
// (or ended by catching up with the stream) and hands them to the committer, until ctx is done or the subscription
// fails or has a gap (the batch before a gap is handed off first).
func (p *Projector) collect(ctx context.Context, msgs jetstream.MessagesContext, offset uint64, commits chan<- *batch) error {
	in := make(chan delivery, p.BatchSize)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.read(msgs, in, quit) }()
	defer wg.Wait()
	defer msgs.Stop()
	defer close(quit)

	var lastCons uint64
	seen := offset // highest stream sequence handed off or committed
	b := &batch{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	handOff := func() error {
		timer.Stop()
		select {
		case commits <- b:
		case <-ctx.Done():
			return ctx.Err()
		}
		b = &batch{es: make([]events.Entry, 0, len(b.es))}
		return nil
	}
	for {
		var d delivery
		select {
		case d = <-in:
		case <-timer.C:
			if err := handOff(); err != nil {
				return err
			}
			continue
		case <-ctx.Done():
			return ctx.Err()
		}
		if d.err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return d.err
		}
		seq := d.md.Sequence.Stream
		if lastCons != 0 && d.md.Sequence.Consumer != lastCons+1 {
			err := fmt.Errorf("%w: delivery %d after %d (stream seq %d)", errDeliveryGap, d.md.Sequence.Consumer, lastCons, seq)
			if b.msgs > 0 {
				// Everything before the gap is in order: keep it.
				if herr := handOff(); herr != nil {
					return herr
				}
			}
			return err
		}
		lastCons = d.md.Sequence.Consumer
		if b.msgs == 0 {
			timer.Reset(p.BatchWait)
		}
		b.msgs++
		b.last, b.lastSeq, b.pending = d.m, seq, d.md.NumPending
		p.lag.Store(d.md.NumPending + uint64(b.msgs)) // not yet delivered + not yet committed
		if seq > seen {
			seen = seq
			if d.derr != nil {
				if err := p.park(ctx, d.m.Subject(), seq, d.m.Data(), d.derr); err != nil {
					return err
				}
			} else {
				b.es = append(b.es, d.e)
			}
		} // else a redelivery of a message already handed off
		// Full, or caught up with the stream: waiting would not fill it.
		if b.msgs >= p.BatchSize || d.md.NumPending == 0 && len(in) == 0 {
			if err := handOff(); err != nil {
				return err
			}
		}
	}
}

// committer applies batches in order, each with its offset in one
// transaction (retried with backoff until it succeeds or ctx is done), and
// acknowledges each batch after its commit.
func (p *Projector) committer(ctx context.Context, offset uint64, in <-chan *batch) error {
	apply := applyFunc(p.Store)
	for b := range in {
		if b.lastSeq > offset {
			if err := p.retry(ctx, "apply", func() error {
				return apply(ctx, p.Consumer, b.es, b.lastSeq)
			}); err != nil {
				for range in { // let collect finish
				}
				return err
			}
			offset = b.lastSeq
		}
		// Ack after commit (AckAll: up to this delivery). A lost ack only
		// causes a redelivery, which is skipped.
		if err := b.last.Ack(); err != nil {
			p.Logger.Debug("projector: ack failed; the batch will be redelivered and skipped", "err", err)
		}
		n := uint64(len(b.es))
		p.applied.Add(n)
		p.offset.Store(offset)
		p.lag.Store(b.pending)
		p.m.events.Add(float64(n))
		p.m.batches.Observe(float64(b.msgs))
		p.m.lag.Set(float64(b.pending))
		p.m.offset.Set(float64(offset))
	}
	return nil
}

// applyFunc returns how decoded batches go into store. Decode validated every
// entry (an invalid message is parked instead), so a store of this module
// takes them through ApplyValidated and does not parse the payloads again;
// any other store, a wrapper of one of ours included, gets ApplyBatch.
func applyFunc(store adapters.ProjectionStore) func(ctx context.Context, consumer string, es []events.Entry, offset uint64) error {
	if va := validated.ApplierOf(store); va != nil {
		return func(ctx context.Context, consumer string, es []events.Entry, offset uint64) error {
			return va.ApplyValidated(ctx, consumer, validated.Trust(es), offset)
		}
	}
	return store.ApplyBatch
}

// park publishes an undecodable message to the dead-letter subject (stored by
// the DLQ stream) before its offset can be committed, and counts it.
func (p *Projector) park(ctx context.Context, subject string, seq uint64, data []byte, cause error) error {
	m := nats.NewMsg(p.Bus.Config().DLQSubject)
	m.Data = data
	m.Header.Set(bus.HeaderDLQReason, cause.Error())
	m.Header.Set(bus.HeaderDLQSubject, subject)
	m.Header.Set(bus.HeaderDLQSeq, strconv.FormatUint(seq, 10))
	id := "dlq." + p.Bus.Config().Stream + "." + strconv.FormatUint(seq, 10)
	if err := p.retry(ctx, "park", func() error {
		_, err := p.Bus.JetStream().PublishMsg(ctx, m, jetstream.WithMsgID(id))
		return err
	}); err != nil {
		return err
	}
	p.parked.Add(1)
	p.m.parked.Inc()
	p.Logger.Warn("projector: parked undecodable message", "subject", subject, "seq", seq, "err", cause)
	return nil
}

// Decode turns a ledger message into an entry with Seq = seq. It validates the
// entry fully (as events.Unmarshal does) and checks that the subject names the same
// sandbox and event. Errors wrap events.ErrInvalidEntry.
func Decode(prefix, subject string, data []byte, seq uint64) (events.Entry, error) {
	// events.Unmarshal's decoding and events.Validate, faster: common
	// payloads are checked as they are decoded, not parsed twice.
	e, err := bus.DecodeValidMsg(data, seq)
	if err != nil {
		return events.Entry{}, err
	}
	id, ev, err := events.ParseSubject(prefix, subject)
	if err != nil {
		return events.Entry{}, &events.ValidationError{Field: "subject", Reason: "is not a ledger subject", Err: err}
	}
	if id != e.SandboxID || ev != e.Event {
		return events.Entry{}, &events.ValidationError{Field: "subject",
			Reason: fmt.Sprintf("%q does not match entry %s/%s", subject, e.SandboxID, e.Event)}
	}
	e.Seq = seq
	return e, nil
}
