package projections

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/validated"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Projector and Runtime.
const (
	DefaultConsumer   = "alineo-projector"
	DefaultBatchSize  = 1000
	DefaultBatchWait  = 50 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// Projector applies the ledger stream to Store: the product's tables, run as
// one projection (TablesHandler) on a Runtime. Fill in the fields, then call
// Run. Bus and Store are required; every other zero value means its default.
// A Projector runs once at a time; Progress is safe for concurrent use.
type Projector struct {
	Bus   *bus.Bus
	Store adapters.ProjectionStore
	// Consumer is the durable consumer's name and the store's offset key.
	// Default alineo-projector.
	Consumer string
	// Partition splits the stream by sandbox among several projectors (see Runtime).
	Partition Partitioning
	// BatchSize is the messages at which a batch is ready; while the store
	// is still applying the previous one a batch grows up to 4 × BatchSize
	// (see Runtime.MaxBatchSize). Default 1000.
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
	// TracerProvider receives the projection.apply spans (see Runtime).
	TracerProvider trace.TracerProvider

	initOnce sync.Once
	rt       Runtime
}

// Progress returns the projector's progress. Safe for concurrent use.
func (p *Projector) Progress() Progress { return p.rt.Progress() }

// Await returns once the projector has committed everything up to stream
// sequence seq (its Offset is at least seq), or ctx's error. It polls. With a
// bus.Ledger, l.Flush then Await(ctx, l.LastSeq()) is the barrier a reader of
// the projected tables needs to read that ledger's writes (the SDK's
// Options.AwaitReadModel). Safe for concurrent use.
func (p *Projector) Await(ctx context.Context, seq uint64) error { return p.rt.Await(ctx, seq) }

func (p *Projector) init() error {
	if p.Bus == nil || p.Store == nil {
		return fmt.Errorf("%w: Bus and Store are required", ErrInvalidConfig)
	}
	p.initOnce.Do(func() {
		if p.Consumer == "" {
			p.Consumer = DefaultConsumer
		}
		p.rt.Bus, p.rt.Handler, p.rt.Name, p.rt.Consumer = p.Bus, TablesHandler(p.Store), TablesProjection, p.Consumer
		p.rt.Partition, p.rt.BatchSize, p.rt.BatchWait, p.rt.MaxBackoff = p.Partition, p.BatchSize, p.BatchWait, p.MaxBackoff
		p.rt.Registerer, p.rt.Logger, p.rt.TracerProvider = p.Registerer, p.Logger, p.TracerProvider
	})
	return p.rt.Init()
}

// Run consumes until ctx is done, then returns nil. It returns an error only
// for a configuration it cannot run with; stream and database failures are
// retried with backoff (and counted in Errors).
func (p *Projector) Run(ctx context.Context) error {
	if err := p.init(); err != nil {
		return err
	}
	return p.rt.Run(ctx)
}

// TablesProjection is the registered name of the product's tables projection.
const TablesProjection = "tables"

// TablesHandler returns the product's tables as a Handler: each batch goes to
// store.ApplyBatch (entries, sandbox details and the offset in one
// transaction), the offset key being the consumer name.
func TablesHandler(store adapters.ProjectionStore) Handler {
	return tablesHandler{store, applyFunc(store)}
}

type tablesHandler struct {
	store adapters.ProjectionStore
	apply func(ctx context.Context, consumer string, es []events.Entry, offset uint64) error
}

func (h tablesHandler) Apply(ctx context.Context, b Batch) error {
	return h.apply(ctx, b.Key, b.Entries, b.Offset)
}

func (h tablesHandler) Offset(ctx context.Context, key string) (uint64, error) {
	return h.store.Offset(ctx, key)
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

// Decode turns a ledger message into an entry with Seq = seq. It validates the
// entry fully (as events.Unmarshal does) and checks that the subject names the same
// sandbox and event. Errors wrap events.ErrInvalidEntry.
func Decode(prefix, subject string, data []byte, seq uint64) (events.Entry, error) {
	id, ev, err := events.ParseSubject(prefix, subject)
	var dec bus.Decoder
	return decodeParsed(&dec, subject, id, ev, err, data, seq)
}

// decodeParsed is Decode for a subject already parsed (id, ev and perr are
// what events.ParseSubject returned), decoding with dec.
func decodeParsed(dec *bus.Decoder, subject, id string, ev events.Event, perr error, data []byte, seq uint64) (events.Entry, error) {
	// events.Unmarshal's decoding and events.Validate, faster: common
	// payloads are checked as they are decoded, not parsed twice.
	e, err := dec.DecodeValid(data, seq, id)
	if err != nil {
		return events.Entry{}, err
	}
	if perr != nil {
		return events.Entry{}, &events.ValidationError{Field: "subject", Reason: "is not a ledger subject", Err: perr}
	}
	if id != e.SandboxID || ev != e.Event {
		return events.Entry{}, &events.ValidationError{Field: "subject",
			Reason: fmt.Sprintf("%q does not match entry %s/%s", subject, e.SandboxID, e.Event)}
	}
	e.Seq = seq
	return e, nil
}
