package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/spans"
	"go.opentelemetry.io/otel/trace"
)

// HeaderDLQProjection names the projection that parked a poison entry.
const HeaderDLQProjection = "Alineo-Dlq-Projection"

// DefaultLagInterval is how often a Runtime reads its consumer's pending count.
const DefaultLagInterval = 500 * time.Millisecond

// Runtime runs one projection (a Handler) over the ledger stream: a durable
// JetStream pull consumer (recreated at the handler's offset on every
// session), batches bounded by BatchSize and BatchWait, each applied by the
// handler with its offset; retries with backoff while the handler fails,
// parks undecodable and poison entries on the dead-letter subject, keeps
// Prometheus metrics and Progress, and stops when Run's ctx is done (the batch
// being applied is finished or abandoned uncommitted, never half-applied).
//
// Fill in the fields, then call Run. Bus and Handler are required; every other
// zero value means its default. A Runtime runs once at a time; Progress and
// Await are safe for concurrent use.
type Runtime struct {
	Bus     *bus.Bus
	Handler Handler
	// Name is the projection's name (a metrics label). Default Consumer.
	Name string
	// Consumer is the durable consumer's name and the offset key; with
	// partitions each partition uses PartitionKey(Consumer, i, n). Required
	// unless Name is set (then Name).
	Consumer string
	// Filter selects the entries the handler sees (see Filter).
	Filter Filter
	// Partition splits the stream by sandbox: this worker applies only the
	// sandboxes of partition Index, in stream order, with its own consumer and offset.
	Partition Partitioning
	// BatchSize is the messages at which a batch is ready to be applied.
	// Default 1000.
	BatchSize int
	// MaxBatchSize bounds the messages per batch: a ready batch keeps
	// growing up to it while the previous one is still being applied, so a
	// store that falls behind commits more per transaction and catches up
	// (a group commit) instead of a queue of batches building up lag.
	// Default 4 × BatchSize; at most 8 × BatchSize; BatchSize for fixed batches.
	MaxBatchSize int
	// BatchWait bounds how long a batch waits to fill once it has a message; a
	// batch that reaches the end of the stream is ready without waiting. Default 50 ms.
	BatchWait time.Duration
	// MaxBackoff caps the wait between retries. Default 5 s.
	MaxBackoff time.Duration
	// AckWait is how long the server waits for a batch's acknowledgement
	// before it redelivers the batch's messages (they are recognised and
	// skipped). Default 30 s.
	AckWait time.Duration
	// LagInterval is how often the consumer's pending count is read for the
	// lag metric, also while the handler is failing. Default 500 ms.
	LagInterval time.Duration
	// Registerer receives the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Logger, default the bus's.
	Logger *slog.Logger
	// OwnerTTL is how long a projector that died keeps its partition from
	// another (see owner.go); it renews its claim every OwnerTTL/3. Default
	// DefaultOwnerTTL. The bucket keeps the TTL it was created with.
	OwnerTTL time.Duration
	// TracerProvider receives a projection.apply span per applied batch,
	// linked to the spans that wrote its entries (their messages'
	// traceparent headers). Default: the global provider.
	TracerProvider trace.TracerProvider

	initOnce sync.Once
	initErr  error
	key      string
	subjects []string
	checkSB  bool
	m        *metrics
	applied  atomic.Uint64
	parked   atomic.Uint64
	skipped  atomic.Uint64
	errs     atomic.Uint64
	offset   atomic.Uint64
	lag      atomic.Uint64
	ownerID  string
	waiting  atomic.Bool // waited for another projector's claim
}

// Progress is a snapshot of a projection's work since it started.
type Progress struct {
	Offset  uint64 // stream sequence of the last committed batch
	Applied uint64 // entries applied by this process
	Parked  uint64 // messages parked on the dead-letter subject
	Skipped uint64 // messages passed over: filtered out, of other partitions, or writer fences
	Errors  uint64 // failed attempts that were retried
	// Lag is the messages on the consumer's subjects not yet committed: the
	// consumer's pending plus unacknowledged count, read every LagInterval and
	// after every commit, so it is true while the store is down too.
	Lag uint64
	// Waiting is true while another projector holds the partition (see
	// owner.go): this one applies nothing until it stops.
	Waiting bool
}

// Progress returns the projection's progress. Safe for concurrent use.
func (r *Runtime) Progress() Progress {
	return Progress{Offset: r.offset.Load(), Applied: r.applied.Load(), Parked: r.parked.Load(),
		Skipped: r.skipped.Load(), Errors: r.errs.Load(), Lag: r.lag.Load(), Waiting: r.waiting.Load()}
}

// Key returns the offset key the runtime commits under (valid after Run started or Init).
func (r *Runtime) Key() string { return r.key }

// Await returns once the runtime has committed everything up to stream
// sequence seq (its Offset is at least seq), or ctx's error. It polls. The
// offset advances over the messages the consumer receives (with no Filter on
// events or literal sandboxes, every message of the stream, fences included):
// with a Filter that is pushed down, seq must be a sequence the filter
// selects (the last one written, say), or Await waits for the next matching message.
func (r *Runtime) Await(ctx context.Context, seq uint64) error {
	for r.offset.Load() < seq {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// Init checks the configuration, fills in defaults and registers the
// metrics. Run calls it; calling it first reports a bad configuration early.
func (r *Runtime) Init() error {
	r.initOnce.Do(func() { r.initErr = r.init() })
	return r.initErr
}

func (r *Runtime) init() error {
	switch {
	case r.Bus == nil:
		return fmt.Errorf("%w: Bus is required", ErrInvalidConfig)
	case r.Handler == nil:
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errNoHandler)
	case r.BatchSize < 0 || r.MaxBatchSize < 0 || r.BatchWait < 0 || r.MaxBackoff < 0 || r.LagInterval < 0 || r.AckWait < 0:
		return fmt.Errorf("%w: negative batch size or duration", ErrInvalidConfig)
	}
	if err := r.Partition.validate(); err != nil {
		return err
	}
	if err := r.Filter.Validate(); err != nil {
		return err
	}
	if r.Consumer == "" {
		r.Consumer = r.Name
	}
	if r.Consumer == "" {
		return fmt.Errorf("%w: Consumer or Name is required", ErrInvalidConfig)
	}
	if r.Name == "" {
		r.Name = r.Consumer
	}
	r.BatchSize = cmpOr(r.BatchSize, DefaultBatchSize)
	r.MaxBatchSize = cmpOr(r.MaxBatchSize, 4*r.BatchSize)
	if r.MaxBatchSize < r.BatchSize || r.MaxBatchSize > 8*r.BatchSize {
		return fmt.Errorf("%w: MaxBatchSize %d is not in BatchSize..8×BatchSize (%d..%d)", ErrInvalidConfig, r.MaxBatchSize, r.BatchSize, 8*r.BatchSize)
	}
	r.BatchWait = cmpOr(r.BatchWait, DefaultBatchWait)
	r.MaxBackoff = cmpOr(r.MaxBackoff, DefaultMaxBackoff)
	r.LagInterval = cmpOr(r.LagInterval, DefaultLagInterval)
	r.AckWait = cmpOr(r.AckWait, 30*time.Second)
	r.OwnerTTL = cmpOr(r.OwnerTTL, DefaultOwnerTTL)
	if r.OwnerTTL < time.Second {
		return fmt.Errorf("%w: OwnerTTL %v, want at least 1s", ErrInvalidConfig, r.OwnerTTL)
	}
	r.ownerID = ownerID()
	if r.Logger == nil {
		r.Logger = r.Bus.Config().Logger
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	r.key = PartitionKey(r.Consumer, r.Partition.Index, r.Partition.N)
	r.subjects, r.checkSB = r.Filter.subjects(r.Bus.Config().SubjectPrefix)
	r.m = newMetrics(r.Name, r.key)
	if r.Registerer != nil {
		for _, c := range r.m.collectors() {
			if err := r.Registerer.Register(c); err != nil {
				return fmt.Errorf("register metrics: %w", err)
			}
		}
	}
	return nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (r *Runtime) backoff(ctx context.Context) backoff.BackOff {
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval = 50 * time.Millisecond
	eb.MaxInterval = r.MaxBackoff
	eb.MaxElapsedTime = 0 // until ctx is done
	return backoff.WithContext(eb, ctx)
}

// retry runs op until it succeeds, returns a backoff.Permanent error or one
// wrapping ErrInvalidConfig (a handler that cannot work: no retry mends it),
// or ctx is done, counting every failure.
func (r *Runtime) retry(ctx context.Context, what string, op func() error) error {
	return backoff.RetryNotify(func() error {
		err := op()
		if errors.Is(err, ErrInvalidConfig) {
			return backoff.Permanent(err)
		}
		return err
	}, r.backoff(ctx), func(err error, wait time.Duration) {
		r.errs.Add(1)
		r.m.errors.Inc()
		r.Logger.Warn("projection: retrying", "projection", r.Name, "consumer", r.key, "op", what, "in", wait, "err", err)
	})
}

// consumer (re)creates the durable consumer so that it delivers from
// offset+1, the handler's offset, in stream order.
//
// It is recreated on every session rather than reused: a reused consumer
// would first deliver the messages after the ones a crashed predecessor had in
// flight and redeliver those only after AckWait; committing and acking (AckAll)
// the later ones would then skip the earlier ones for good. A fresh consumer's
// first deliveries are in stream order, so any later redelivery is of a
// message this session has already seen, and the offset check skips it.
func (r *Runtime) consumer(ctx context.Context, offset uint64) (jetstream.Consumer, error) {
	js, stream := r.Bus.JetStream(), r.Bus.Config().Stream
	if err := js.DeleteConsumer(ctx, stream, r.key); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, err
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       r.key,
		Description:   "alineo projection " + r.Name,
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       r.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 2*r.MaxBatchSize + 5*r.BatchSize, // two batches, the reader's queue and the pull buffer
		DeliverPolicy: jetstream.DeliverAllPolicy,
		// The consumer's state need not outlive the session (the offset
		// is the handler's): kept in memory, the server does not write its
		// delivered and pending state to disk for every message.
		MemoryStorage: true,
	}
	switch {
	case unfiltered(r.subjects, r.Bus.Config().SubjectPrefix):
		// No filter subject: the server then reads its blocks in order
		// without matching every message against a wildcard (a quarter of
		// the CPU of a read); the few fence messages are passed over here.
	case len(r.subjects) == 1:
		cfg.FilterSubject = r.subjects[0]
	default:
		cfg.FilterSubjects = r.subjects
	}
	if offset > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, offset+1
	}
	return js.CreateOrUpdateConsumer(ctx, stream, cfg)
}

// Run consumes until ctx is done, then returns nil. It returns an error only
// for a configuration it cannot run with (wrapping ErrInvalidConfig, also
// when the handler reports one: an SQLHandler's offset table of another
// shape); stream and handler failures are retried with backoff (and counted
// in Errors).
func (r *Runtime) Run(ctx context.Context) error {
	if err := r.Init(); err != nil {
		return err
	}
	for ctx.Err() == nil {
		o, err := r.own(ctx)
		if err != nil {
			return nil // ctx ended while waiting
		}
		octx, lost := context.WithCancelCause(ctx)
		done := make(chan struct{})
		go func() { defer close(done); r.keep(octx, o, lost) }()
		var fatal error
		for octx.Err() == nil {
			err := r.session(octx)
			if octx.Err() != nil {
				break
			}
			if errors.Is(err, ErrInvalidConfig) {
				fatal = err
				break
			}
			r.errs.Add(1)
			r.m.errors.Inc()
			r.Logger.Warn("projection: consumer session ended; restarting", "projection", r.Name, "consumer", r.key, "err", err)
			select {
			case <-octx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
		if ctx.Err() == nil && fatal == nil {
			r.errs.Add(1)
			r.m.errors.Inc()
			r.Logger.Warn("projection: lost the partition; claiming it again", "projection", r.Name, "consumer", r.key, "err", context.Cause(octx))
		}
		lost(nil)
		<-done
		o.release()
		if fatal != nil {
			return fmt.Errorf("projection %s: %w", r.Name, fatal)
		}
	}
	return nil
}

// session runs one consumer subscription until it fails or ctx is done.
func (r *Runtime) session(ctx context.Context) error {
	var offset uint64
	if err := r.retry(ctx, "offset", func() (err error) {
		offset, err = r.Handler.Offset(ctx, r.key)
		return err
	}); err != nil {
		return err
	}
	r.offset.Store(offset)
	r.m.offset.Set(float64(offset))
	var cons jetstream.Consumer
	if err := r.retry(ctx, "consumer", func() (err error) {
		cons, err = r.consumer(ctx, offset)
		return err
	}); err != nil {
		return err
	}
	msgs, err := cons.Messages(jetstream.PullMaxMessages(4*r.BatchSize), jetstream.PullHeartbeat(2*time.Second))
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, msgs.Stop)
	defer stop()
	lctx, lcancel := context.WithCancel(ctx)
	var lwg sync.WaitGroup
	lwg.Add(1)
	go func() { defer lwg.Done(); r.pollLag(lctx, cons) }()
	defer lwg.Wait()
	defer lcancel()

	// Collecting the next batch overlaps with committing the previous one: one
	// batch in flight, committed and acknowledged in order by one goroutine,
	// which takes the next batch (unbuffered) only once it is free.
	commits := make(chan *batch)
	done := make(chan error, 1)
	go func() { done <- r.committer(ctx, offset, commits) }()
	err = r.collect(ctx, msgs, offset, commits)
	close(commits)
	if cerr := <-done; err == nil {
		err = cerr
	}
	return err
}

// pollLag reads the consumer's pending count until ctx is done: the lag is
// what the server has not delivered plus what is delivered but not yet
// committed (acknowledged), true whatever the handler is doing.
func (r *Runtime) pollLag(ctx context.Context, cons jetstream.Consumer) {
	t := time.NewTicker(r.LagInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ictx, cancel := context.WithTimeout(ctx, r.LagInterval+time.Second)
		ci, err := cons.Info(ictx)
		cancel()
		if err != nil {
			continue // the stream is down too; the next tick tries again
		}
		lag := ci.NumPending + uint64(max(ci.NumAckPending, 0))
		r.lag.Store(lag)
		r.m.lag.Set(float64(lag))
	}
}

// batch is a run of consecutive deliveries, applied as one transaction.
type batch struct {
	es      []events.Entry
	raws    []raw // the message of each entry, for parking a poison one
	msgs    int
	last    jetstream.Msg
	lastSeq uint64 // stream sequence of last
	pending uint64 // messages left in the stream after last
}

type raw struct {
	subject string
	data    []byte
}

// errDeliveryGap ends a consumer session when a delivery was skipped or
// repeated (a consumer leader change can lose deliveries in flight; the server
// would redeliver them only after AckWait, after later ones were committed).
// The next session recreates the consumer at the committed offset.
var errDeliveryGap = errors.New("consumer delivery out of order")

// delivery is one message as read by the reader goroutine: its metadata and
// subject parsed, skipped or not. The collector decodes the others (only
// those new to it, not redeliveries), so reading the stream and decoding
// entries run side by side.
type delivery struct {
	m    jetstream.Msg
	md   meta
	id   string       // the subject's sandbox id
	ev   events.Event // the subject's event
	perr error        // the subject is not a ledger subject: parked once decoded
	skip bool         // filtered out or of another partition
	err  error        // subscription error: the session ends
}

// classify decides from its subject whether d is for this runtime: skipped
// (another partition, filtered out) or to decode. Partition membership and
// the subject filters need only the subject.
func (r *Runtime) classify(d *delivery, prefix string) {
	subj := d.m.Subject()
	if !ledgerSubject(prefix, subj) {
		d.skip = true // a fence message, read because the consumer is unfiltered
		return
	}
	d.id, d.ev, d.perr = events.ParseSubject(prefix, subj)
	if d.perr != nil {
		// No sandbox to partition by: partition 0 parks it.
		d.skip = r.Partition.Index != 0
	} else if !r.Partition.owns(d.id) || r.checkSB && !r.Filter.keepSandbox(d.id) || !r.Filter.keepEvent(d.ev) {
		d.skip = true
	}
}

// decode decodes d (not skipped by classify) into an entry, or returns the
// error it is parked with; skip reports that the entry's name is filtered out.
func (r *Runtime) decode(d *delivery, dec *bus.Decoder) (e events.Entry, skip bool, err error) {
	e, err = decodeParsed(dec, d.m.Subject(), d.id, d.ev, d.perr, d.m.Data(), d.md.stream)
	if err != nil {
		return events.Entry{}, false, err
	}
	if !r.Filter.keepName(e.Name) {
		return events.Entry{}, true, nil
	}
	if h := d.m.Headers(); h != nil {
		if tp := h[bus.HeaderTraceParent]; len(tp) > 0 {
			e.Trace = tp[0]
		}
	}
	return e, false, nil
}

// unfiltered reports whether subjects select every ledger subject, so the
// consumer can go without a filter (and the runtime skips what is not a
// ledger subject itself, see ledgerSubject).
func unfiltered(subjects []string, prefix string) bool {
	return len(subjects) == 1 && (subjects[0] == prefix+".*.>" || subjects[0] == prefix+".>")
}

// ledgerSubject reports whether subject matches prefix.*.>, the subjects an
// unfiltered projection's consumer would have had as its filter.
func ledgerSubject(prefix, subject string) bool {
	if len(subject) <= len(prefix)+1 || subject[len(prefix)] != '.' || subject[:len(prefix)] != prefix {
		return false
	}
	return strings.IndexByte(subject[len(prefix)+1:], '.') > 0
}

// read pulls messages and classifies them, ahead of collect, until the
// subscription fails or quit is closed.
func (r *Runtime) read(msgs jetstream.MessagesContext, out chan<- delivery, quit <-chan struct{}) {
	prefix := r.Bus.Config().SubjectPrefix
	for {
		var d delivery
		d.m, d.err = msgs.Next()
		if d.err == nil {
			if d.md, d.err = metadata(d.m); d.err == nil {
				r.classify(&d, prefix)
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
// (or ended by catching up with the stream) and hands them to the committer,
// until ctx is done or the subscription fails or has a gap (the batch before a
// gap is handed off first).
func (r *Runtime) collect(ctx context.Context, msgs jetstream.MessagesContext, offset uint64, commits chan<- *batch) error {
	in := make(chan delivery, r.BatchSize)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.read(msgs, in, quit) }()
	defer wg.Wait()
	defer msgs.Stop()
	defer close(quit)

	c := collector{r: r, commits: commits, seen: offset, b: &batch{}}
	c.timer = time.NewTimer(time.Hour)
	c.timer.Stop()
	defer c.timer.Stop()
	for {
		var send chan<- *batch
		if c.ready {
			// A ready batch goes as soon as the committer is free; until then it grows.
			n := len(c.b.es) // the committer owns the batch once sent
			select {
			case commits <- c.b:
				c.next(n)
				continue
			default:
			}
			send = commits
		}
		n := len(c.b.es)
		var d delivery
		select {
		case d = <-in:
		case send <- c.b:
			c.next(n)
			continue
		case <-c.timer.C:
			c.ready = true
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
		if err := c.add(ctx, d, len(in)); err != nil {
			return err
		}
	}
}

// collector is collect's state between deliveries.
type collector struct {
	r        *Runtime
	commits  chan<- *batch
	timer    *time.Timer
	lastCons uint64
	seen     uint64 // highest stream sequence handed off or committed
	dec      bus.Decoder
	b        *batch
	ready    bool // b is full, caught up with the stream, or has waited BatchWait
}

// handOff waits until the committer takes the batch.
func (c *collector) handOff(ctx context.Context) error {
	n := len(c.b.es) // the committer owns the batch once sent
	select {
	case c.commits <- c.b:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.next(n)
	return nil
}

// next starts a new batch once the committer owns the last one, of n entries.
func (c *collector) next(n int) {
	c.timer.Stop()
	c.ready = false
	c.b = &batch{es: make([]events.Entry, 0, min(n, c.r.BatchSize))}
}

// add puts d into the batch (or parks it), marking the batch ready when it
// is full or the stream is caught up with, and handing it off when it reaches
// MaxBatchSize; queued is how many deliveries wait.
func (c *collector) add(ctx context.Context, d delivery, queued int) error {
	r, b := c.r, c.b
	seq := d.md.stream
	if c.lastCons != 0 && d.md.consumer != c.lastCons+1 {
		err := fmt.Errorf("%w: delivery %d after %d (stream seq %d)", errDeliveryGap, d.md.consumer, c.lastCons, seq)
		if b.msgs > 0 {
			// Everything before the gap is in order: keep it.
			if herr := c.handOff(ctx); herr != nil {
				return herr
			}
		}
		return err
	}
	c.lastCons = d.md.consumer
	if b.msgs == 0 {
		c.timer.Reset(r.BatchWait)
	}
	b.msgs++
	b.pending = d.md.pending
	r.lag.Store(d.md.pending + uint64(b.msgs)) // not yet delivered + not yet committed
	if b.last == nil {
		b.last = d.m // a batch of redeliveries only still acknowledges one (harmless)
	}
	if seq > c.seen {
		// Only a new message moves the batch's end: a redelivery (after
		// AckWait, of a message in a batch still being applied) has a lower
		// sequence, and ending the batch there would commit and acknowledge
		// the batch's new entries under an offset below them, or skip them.
		c.seen = seq
		b.last, b.lastSeq = d.m, seq
		var e events.Entry
		var derr error
		if !d.skip {
			e, d.skip, derr = r.decode(&d, &c.dec)
		}
		switch {
		case d.skip:
			r.skipped.Add(1)
		case derr != nil:
			if err := r.park(ctx, d.m.Subject(), seq, d.m.Data(), derr, ""); err != nil {
				return err
			}
		default:
			b.es = append(b.es, e)
			b.raws = append(b.raws, raw{d.m.Subject(), d.m.Data()})
		}
	} // else a redelivery of a message already handed off
	// Full, or caught up with the stream (waiting would not fill it): ready.
	if b.msgs >= r.BatchSize || d.md.pending == 0 && queued == 0 {
		c.ready = true
	}
	if b.msgs >= r.MaxBatchSize {
		return c.handOff(ctx)
	}
	return nil
}

// committer applies batches in order, each with its offset in one
// transaction (retried with backoff until it succeeds or ctx is done), and
// acknowledges each batch after its commit.
func (r *Runtime) committer(ctx context.Context, offset uint64, in <-chan *batch) error {
	for b := range in {
		if b.lastSeq > offset {
			if err := r.apply(ctx, b); err != nil {
				for range in { // let collect finish
				}
				return err
			}
			offset = b.lastSeq
		}
		// Ack after commit (AckAll: up to this delivery). A lost ack only
		// causes a redelivery, which is skipped.
		if err := b.last.Ack(); err != nil {
			r.Logger.Debug("projection: ack failed; the batch will be redelivered and skipped", "err", err)
		}
		n := uint64(len(b.es))
		r.applied.Add(n)
		r.offset.Store(offset)
		r.lag.Store(b.pending)
		r.m.events.Add(float64(n))
		r.m.batches.Observe(float64(b.msgs))
		r.m.lag.Set(float64(b.pending))
		r.m.offset.Set(float64(offset))
	}
	return nil
}

// apply has the handler apply b, retrying failures with backoff; a poison
// entry the handler names is parked and the rest applied again at once.
func (r *Runtime) apply(ctx context.Context, b *batch) (err error) {
	ctx, span := r.applySpan(ctx, b)
	defer func() { spans.End(span, err) }()
	for {
		var poison *PoisonError
		err := r.retry(ctx, "apply", func() error {
			err := r.Handler.Apply(ctx, Batch{Key: r.key, Entries: b.es, Offset: b.lastSeq})
			if errors.As(err, &poison) && b.index(poison.Seq) >= 0 {
				return backoff.Permanent(err)
			}
			poison = nil
			return err
		})
		if poison == nil || ctx.Err() != nil {
			return err
		}
		i := b.index(poison.Seq)
		if perr := r.park(ctx, b.raws[i].subject, poison.Seq, b.raws[i].data, poison, r.Name); perr != nil {
			return perr
		}
		b.es = append(b.es[:i:i], b.es[i+1:]...)
		b.raws = append(b.raws[:i:i], b.raws[i+1:]...)
	}
}

func (b *batch) index(seq uint64) int {
	for i := range b.es {
		if b.es[i].Seq == seq {
			return i
		}
	}
	return -1
}

// park publishes a message to the dead-letter subject (stored by the DLQ
// stream) before its offset can be committed, and counts it. projection names
// the projection that refused a poison entry ("" for an undecodable message).
func (r *Runtime) park(ctx context.Context, subject string, seq uint64, data []byte, cause error, projection string) error {
	m := nats.NewMsg(r.Bus.Config().DLQSubject)
	m.Data = data
	m.Header.Set(bus.HeaderDLQReason, cause.Error())
	m.Header.Set(bus.HeaderDLQSubject, subject)
	m.Header.Set(bus.HeaderDLQSeq, strconv.FormatUint(seq, 10))
	id := "dlq." + r.Bus.Config().Stream + "." + strconv.FormatUint(seq, 10)
	if projection != "" {
		m.Header.Set(HeaderDLQProjection, projection)
		id += "." + projection
	}
	if err := r.retry(ctx, "park", func() error {
		_, err := r.Bus.JetStream().PublishMsg(ctx, m, jetstream.WithMsgID(id))
		return err
	}); err != nil {
		return err
	}
	r.parked.Add(1)
	r.m.parked.Inc()
	r.Logger.Warn("projection: parked message", "projection", r.Name, "subject", subject, "seq", seq, "err", cause)
	return nil
}
