package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/validated"
)

var (
	_ adapters.Ledger    = (*Ledger)(nil)
	_ validated.Appender = (*Ledger)(nil)
)

// LedgerConfig configures NewLedger. The zero value is valid.
type LedgerConfig struct {
	// Projection is the ledger a projector keeps from this stream (the
	// tables of an adapters.Store). It is the replay source of last resort
	// when retention removed the start of a sandbox's history from the
	// stream, and DeleteSandbox deletes the session there too. Nil: a
	// truncated history is ErrHistoryTruncated.
	Projection adapters.Ledger
	// MaxPending bounds the async-publish window (unacknowledged publishes).
	// Default 4096.
	MaxPending int
	// AckTimeout is how long a publish may wait for its acknowledgement. Default 30 s.
	AckTimeout time.Duration
	// WriterID identifies this writer in its fence messages. Default random.
	// It must be unique among live writers: a Ledger re-claims (under a new
	// epoch) a sandbox whose fence carries its own WriterID.
	WriterID string
	// AwaitProjection, when set, is called by DeleteSandbox before it deletes
	// anything, with the stream sequence of the newest entry this Ledger has
	// published: it should return once the projector keeping Projection has
	// applied that sequence (or ctx's error), so the projector never waits for
	// a deleted message and never writes the session again after its delete.
	AwaitProjection func(ctx context.Context, seq uint64) error
	// Logger, default the bus's.
	Logger *slog.Logger
}

// Ledger is an adapters.Ledger whose writes publish to the ledger stream and
// whose reads (ReadAll, LastCheckpoint, ListCheckpoints) read it back: an
// event log and nothing more (the read model is what a projector keeps from
// the stream). Safe for concurrent use. It is the writer of the sandboxes it
// appends to: the first Append to a sandbox claims it (ErrFenced if another
// writer holds it); Takeover claims it from another writer.
type Ledger struct {
	b      *Bus
	js     jetstream.JetStream
	cfg    LedgerConfig
	log    *slog.Logger
	serial bool // one publish in flight per sandbox (replicated streams)

	subjectPrefix string // "<SubjectPrefix>."

	// unchained makes appends skip the hash chain: set by this package's
	// benchmarks only (export_test.go), to measure what the chain costs.
	unchained bool

	lastSeq atomic.Uint64 // highest acknowledged ledger sequence

	// mu guards writers and serialises closing with the creation of writers.
	mu      sync.Mutex
	writers map[string]*writer
	// index holds what writers holds (written under mu with it) for the hot
	// paths, every Append and every acknowledgement, which look a writer up
	// without taking mu.
	index  sync.Map    // sandbox id → *writer
	closed atomic.Bool // set under mu

	// Claims in flight: each has a goroutine waiting for its fence's
	// acknowledgement. done ends them at Close; bg bounds their publishes.
	claims sync.WaitGroup
	done   chan struct{}
	bg     context.Context
	stopBg context.CancelFunc
}

type writer struct {
	id string

	// mu serialises this sandbox's publishes, so message ids and stream order
	// follow append order. It is never taken by the ack handlers.
	mu       sync.Mutex
	epoch    atomic.Uint64 // sequence of this writer's fence message; 0 until claimed; written under mu
	counter  uint64
	released bool   // dropped from Ledger.writers by Release; guarded by mu
	epochStr string // "<epoch>." (message id prefix), guarded by mu

	// Header values of the current epoch and name, shared by every message
	// (the client never modifies a published message's header). Guarded by mu.
	hdrFenceSeq, hdrFenceSubj []string
	name                      string
	hdrName                   []string

	// chain holds the heads of the sandbox's sessions as this writer
	// publishes them: entries are linked (events.Chain) when sent, in
	// stream order. It starts empty on a fresh claim (no fence before: no
	// entry) and is read from the stream after a reclaim or a Takeover
	// (loadHeads). Guarded by mu.
	chain events.Chain

	// claim is the fence publish in flight, nil when none; queue holds, in
	// order, the appends made while it is (they count in inflight). Guarded by mu.
	claim *claim
	queue []pendingMsg

	inflight atomic.Int64 // appended, not yet acknowledged or failed

	// smu guards err and changed; ack handlers take it briefly.
	smu     sync.Mutex
	err     error         // sticky: once set every later call returns it
	changed chan struct{} // closed (and replaced) when inflight hits 0 or err is set
}

// claim is an asynchronous claim of a sandbox: its fence message is
// published into the async window like any append, so claiming a new sandbox
// does not drain the pipeline. epoch and err are set before done is closed.
type claim struct {
	done  chan struct{}
	epoch uint64
	err   error
}

// pendingMsg is one entry to publish: its subject and the entry, linked
// into its session's chain and encoded when sent (msgLocked).
type pendingMsg struct {
	subj string
	e    events.Entry
}

func (w *writer) failure() error {
	w.smu.Lock()
	defer w.smu.Unlock()
	return w.err
}

func (w *writer) notifyLocked() {
	if w.changed != nil {
		close(w.changed)
		w.changed = nil
	}
}

// quiesce returns once no call holds w.mu: an append that held it when the
// ledger was closed has published, and every later one sees closed.
func (w *writer) quiesce() {
	w.mu.Lock()
	defer w.mu.Unlock()
}

// wait blocks until nothing of w is in flight, or w failed.
func (w *writer) wait(ctx context.Context) error {
	for {
		w.smu.Lock()
		if w.err != nil || w.inflight.Load() == 0 {
			err := w.err
			w.smu.Unlock()
			return err
		}
		if w.changed == nil {
			w.changed = make(chan struct{})
		}
		ch := w.changed
		w.smu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// NewLedger returns a Ledger publishing through b. It makes its own JetStream
// context so its async-publish window is its own.
func NewLedger(b *Bus, cfg LedgerConfig) (*Ledger, error) {
	if cfg.MaxPending == 0 {
		cfg.MaxPending = 4096
	}
	if cfg.AckTimeout == 0 {
		cfg.AckTimeout = 30 * time.Second
	}
	if cfg.MaxPending < 0 || cfg.AckTimeout < 0 {
		return nil, fmt.Errorf("%w: negative MaxPending or AckTimeout", ErrInvalidConfig)
	}
	if cfg.WriterID == "" {
		var r [8]byte
		_, _ = rand.Read(r[:])
		cfg.WriterID = hex.EncodeToString(r[:])
	}
	if cfg.Logger == nil {
		cfg.Logger = b.cfg.Logger
	}
	l := &Ledger{
		b: b, cfg: cfg, log: cfg.Logger,
		serial:  b.cfg.Replicas > 1 || b.stream.CachedInfo().Config.Replicas > 1,
		writers: make(map[string]*writer),
		done:    make(chan struct{}),

		subjectPrefix: b.cfg.SubjectPrefix + ".",
	}
	l.bg, l.stopBg = context.WithCancel(context.Background())
	js, err := jetstream.New(b.nc,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout),
		jetstream.WithPublishAsyncAckHandler(l.onAck),
		jetstream.WithPublishAsyncErrHandler(l.onErr))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	l.js = js
	return l, nil
}

// msgWriter finds the writer of a published message from its subject, and
// its epoch from its message id (<epoch>.<n>). nil for a fence.
func (l *Ledger) msgWriter(m *nats.Msg) (*writer, uint64) {
	return l.idWriter(m.Header.Get(jetstream.MsgIDHeader), m.Subject)
}

// idWriter is msgWriter for a message's id and subject.
func (l *Ledger) idWriter(id, subject string) (*writer, uint64) {
	epochStr, _, ok := strings.Cut(id, ".")
	if !ok {
		return nil, 0
	}
	rest, ok := strings.CutPrefix(subject, l.subjectPrefix)
	if !ok {
		return nil, 0
	}
	sandboxID, _, _ := strings.Cut(rest, ".")
	epoch, _ := strconv.ParseUint(epochStr, 10, 64)
	return l.lookup(sandboxID), epoch
}

// lookup returns sandboxID's writer, nil when there is none.
func (l *Ledger) lookup(sandboxID string) *writer {
	if v, ok := l.index.Load(sandboxID); ok {
		return v.(*writer)
	}
	return nil
}

// onAck runs on the client's reply goroutine: it must not block.
func (l *Ledger) onAck(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
	id := m.Header.Get(jetstream.MsgIDHeader)
	if id == "" {
		return // a fence: not an entry (its claim goroutine takes the ack)
	}
	l.noteSeq(ack.Sequence)
	w, _ := l.idWriter(id, m.Subject)
	if w == nil {
		return
	}
	if w.inflight.Add(-1) == 0 {
		w.smu.Lock()
		w.notifyLocked()
		w.smu.Unlock()
	}
}

// onErr runs on the client's reply goroutine (or its timer): it must not block.
func (l *Ledger) onErr(_ jetstream.JetStream, m *nats.Msg, err error) {
	w, epoch := l.msgWriter(m)
	if w == nil {
		return
	}
	w.smu.Lock()
	if w.err == nil && epoch == w.epoch.Load() {
		w.err = publishError(w.id, epoch, err)
	}
	w.inflight.Add(-1)
	w.notifyLocked()
	w.smu.Unlock()
}

// Bus returns the bus the ledger publishes through.
func (l *Ledger) Bus() *Bus { return l.b }

func (l *Ledger) fenceSubject(sandboxID string) string {
	return l.b.cfg.FencePrefix + "." + sandboxID
}

func (l *Ledger) writer(sandboxID string) (*writer, error) {
	if w := l.lookup(sandboxID); w != nil && !l.closed.Load() {
		return w, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return nil, ErrClosed
	}
	w := l.writers[sandboxID]
	if w == nil {
		w = &writer{id: sandboxID}
		l.writers[sandboxID] = w
		l.index.Store(sandboxID, w)
	}
	return w, nil
}

type fenceBody struct {
	Writer string `json:"writer"`
	At     int64  `json:"at"`
	Prev   uint64 `json:"prev,omitempty"`
}

func (l *Ledger) fenceMsg(sandboxID string, prev uint64) *nats.Msg {
	body, _ := json.Marshal(fenceBody{Writer: l.cfg.WriterID, At: time.Now().UnixMilli(), Prev: prev})
	m := nats.NewMsg(l.fenceSubject(sandboxID))
	m.Data = body
	m.Header.Set(headerWriter, l.cfg.WriterID)
	m.Header.Set(natsTTLHeader, natsTTLNever)
	return m
}

// publishFence publishes a fence for sandboxID expecting the fence subject's
// last sequence to be prev, and returns the new epoch.
func (l *Ledger) publishFence(ctx context.Context, sandboxID string, prev uint64) (uint64, error) {
	m := l.fenceMsg(sandboxID, prev)
	var ack *jetstream.PubAck
	var err error
	for attempt := 0; ; attempt++ {
		pctx, cancel := opCtx(ctx)
		ack, err = l.js.PublishMsg(pctx, m, jetstream.WithExpectLastSequencePerSubject(prev))
		cancel()
		var ae *jetstream.APIError
		// Try again shortly on 10164 (on a replicated stream another publish
		// checking this subject is in flight) and while a new stream has no
		// leader yet. A retried fence that was in fact stored makes the next
		// attempt fail with 10071; claim and Takeover then find their own fence.
		retry := errors.As(err, &ae) && ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant ||
			errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
		if err == nil || !retry || attempt >= 50 || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt+1) * 2 * time.Millisecond):
		}
	}
	if err != nil {
		if isWrongLastSeq(err) {
			return 0, &FencedError{SandboxID: sandboxID, Err: err}
		}
		return 0, fmt.Errorf("%w: publish fence for %s: %w", adapters.ErrUnavailable, sandboxID, err)
	}
	return ack.Sequence, nil
}

// claim makes w's ledger this writer's synchronously (replicated streams),
// if nobody holds it, or if the current fence is this writer's own (a sandbox
// it released earlier): then it fences again, so message ids restart under a
// new epoch. Called with w.mu held.
func (l *Ledger) claim(ctx context.Context, w *writer) error {
	if w.epoch.Load() != 0 {
		return nil
	}
	epoch, err := l.publishFence(ctx, w.id, 0)
	reclaimed := errors.Is(err, ErrFenced)
	if reclaimed {
		epoch, err = l.reclaim(ctx, w.id, err)
	}
	if err != nil {
		// Not sticky: a Takeover may follow.
		return err
	}
	w.setEpoch(l, epoch)
	if reclaimed {
		if err := l.loadHeads(ctx, w); err != nil {
			w.epoch.Store(0) // claim again (our own fence) next time
			return err
		}
	}
	return nil
}

// reclaim runs after a claim found sandboxID's fence subject taken (fenced,
// the claim's error): if the fence is this writer's own, it fences again on
// top of it; otherwise another writer holds the sandbox.
func (l *Ledger) reclaim(ctx context.Context, sandboxID string, fenced error) (uint64, error) {
	gctx, cancel := opCtx(ctx)
	last, err := l.b.LastMsg(gctx, l.fenceSubject(sandboxID))
	cancel()
	if err != nil || last.Header.Get(headerWriter) != l.cfg.WriterID {
		return 0, fenced
	}
	return l.publishFence(ctx, sandboxID, last.Sequence)
}

// startClaimLocked publishes w's fence into the async window and returns at
// once; appends queue behind it until a goroutine sees its acknowledgement.
// When the window is full it claims synchronously instead. Called with w.mu held.
func (l *Ledger) startClaimLocked(ctx context.Context, w *writer) error {
	l.mu.Lock()
	if l.closed.Load() {
		l.mu.Unlock()
		return ErrClosed
	}
	l.claims.Add(1)
	l.mu.Unlock()
	paf, err := l.js.PublishMsgAsync(l.fenceMsg(w.id, 0), jetstream.WithExpectLastSequencePerSubject(0))
	if err != nil {
		l.claims.Done()
		return l.claim(ctx, w)
	}
	c := &claim{done: make(chan struct{})}
	w.claim = c
	go func() {
		defer l.claims.Done()
		select {
		case ack := <-paf.Ok():
			c.epoch = ack.Sequence
		case err := <-paf.Err():
			if isWrongLastSeq(err) {
				c.err = &FencedError{SandboxID: w.id, Err: err}
			} else {
				c.err = fmt.Errorf("%w: publish fence for %s: %w", adapters.ErrUnavailable, w.id, err)
			}
		case <-l.done:
			c.err = ErrClosed
		}
		close(c.done)
		w.mu.Lock()
		l.finishClaimLocked(w)
		w.mu.Unlock()
	}()
	return nil
}

// finishClaimLocked completes w's resolved claim, if it has one: on success
// it sets the epoch and publishes the queued appends in order; on failure
// (after a re-claim of its own fence) the queue is dropped and the error is
// w's sticky error until a Takeover. Called with w.mu held.
func (l *Ledger) finishClaimLocked(w *writer) {
	c := w.claim
	if c == nil {
		return
	}
	select {
	case <-c.done:
	default:
		return // still in flight
	}
	w.claim = nil
	queue := w.queue
	w.queue = nil
	epoch, err := c.epoch, c.err
	reclaimed := errors.Is(err, ErrFenced)
	if reclaimed {
		epoch, err = l.reclaim(l.bg, w.id, err)
	}
	if err == nil {
		w.setEpoch(l, epoch)
		if reclaimed {
			err = l.loadHeads(l.bg, w)
		}
	}
	if err == nil {
		for i, p := range queue {
			if err = l.sendLocked(l.bg, w, p); err != nil {
				queue = queue[i+1:]
				break
			}
		}
		if err == nil {
			return
		}
	}
	w.smu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.inflight.Add(-int64(len(queue)))
	w.notifyLocked()
	w.smu.Unlock()
}

// awaitClaimLocked waits for w's claim, if any, and completes it. Called with
// w.mu held: the claim's resolution does not need it.
func (l *Ledger) awaitClaimLocked(ctx context.Context, w *writer) error {
	if w.claim == nil {
		return nil
	}
	select {
	case <-w.claim.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	l.finishClaimLocked(w)
	return nil
}

// setEpoch records a new epoch and restarts message numbering. Called with w.mu held.
func (w *writer) setEpoch(l *Ledger, epoch uint64) {
	w.epoch.Store(epoch)
	w.counter = 0
	e := strconv.FormatUint(epoch, 10)
	w.epochStr = e + "."
	w.hdrFenceSeq, w.hdrFenceSubj = []string{e}, []string{l.fenceSubject(w.id)}
}

// Release waits for sandboxID's publishes (like Sync) and then forgets the
// sandbox's writer state, so a long-running ledger does not keep one entry
// per sandbox it ever wrote. The fence stays: a later Append by this Ledger
// claims the sandbox again under a new epoch; another writer needs Takeover.
func (l *Ledger) Release(ctx context.Context, sandboxID string) error {
	l.mu.Lock()
	w := l.writers[sandboxID]
	l.mu.Unlock()
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := l.awaitClaimLocked(ctx, w); err != nil {
		return err
	}
	err := w.wait(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	w.released = true
	l.mu.Lock()
	if l.writers[sandboxID] == w {
		delete(l.writers, sandboxID)
		l.index.Delete(sandboxID)
	}
	l.mu.Unlock()
	return err
}

// lockWriter returns sandboxID's writer locked, never a released one, or
// ErrClosed once Close has begun (Close then waits for whoever holds a
// writer locked: nothing is published after its flush).
func (l *Ledger) lockWriter(sandboxID string) (*writer, error) {
	for {
		w, err := l.writer(sandboxID)
		if err != nil {
			return nil, err
		}
		w.mu.Lock()
		if l.closed.Load() {
			w.mu.Unlock()
			return nil, ErrClosed
		}
		if !w.released {
			return w, nil
		}
		w.mu.Unlock()
	}
}

// Takeover makes this Ledger the writer of sandboxID, fencing whoever held it:
// the old writer's next publish fails with ErrFenced. It returns the new epoch.
// It first waits for this Ledger's own in-flight publishes of the sandbox, and
// clears a sticky error.
func (l *Ledger) Takeover(ctx context.Context, sandboxID string) (uint64, error) {
	if _, err := events.SandboxSubject(l.b.cfg.SubjectPrefix, sandboxID); err != nil {
		return 0, err
	}
	w, err := l.lockWriter(sandboxID)
	if err != nil {
		return 0, err
	}
	defer w.mu.Unlock()
	if err := l.awaitClaimLocked(ctx, w); err != nil {
		return 0, err
	}
	_ = w.wait(ctx) // settle our own publishes; their outcome no longer matters
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	for attempt := 0; ; attempt++ {
		var prev uint64
		gctx, cancel := opCtx(ctx)
		last, err := l.b.LastMsg(gctx, l.fenceSubject(sandboxID))
		cancel()
		switch {
		case err == nil:
			prev = last.Sequence
		case errors.Is(err, jetstream.ErrMsgNotFound):
		default:
			return 0, fmt.Errorf("%w: read fence of %s: %w", adapters.ErrUnavailable, sandboxID, err)
		}
		epoch, err := l.publishFence(ctx, sandboxID, prev)
		if err == nil {
			// The new writer continues the chains from the fenced heads.
			lerr := l.loadHeads(ctx, w)
			w.smu.Lock()
			w.setEpoch(l, epoch)
			w.err = lerr
			w.smu.Unlock()
			if lerr != nil {
				return 0, lerr
			}
			return epoch, nil
		}
		if !errors.Is(err, ErrFenced) || attempt >= 5 {
			return 0, err
		}
		// A concurrent takeover won the race; read its fence and go again.
	}
}

// Epoch returns this Ledger's epoch for sandboxID, 0 when it has not claimed it.
func (l *Ledger) Epoch(sandboxID string) uint64 {
	l.mu.Lock()
	w := l.writers[sandboxID]
	l.mu.Unlock()
	if w == nil {
		return 0
	}
	return w.epoch.Load()
}

// Append publishes e on its sandbox's subject. It returns once the message is
// in the async-publish window, or queued behind the sandbox's claim (blocking
// while either is full); Sync returns once it is acknowledged. Errors:
// ErrInvalidEntry (nothing published), ErrFenced (another writer owns the
// sandbox; a refused claim may show only at Sync), ErrUnavailable (a publish
// failed; sticky for the sandbox), ErrClosed. Safe for concurrent
// use; appends from one goroutine are stored in the order made.
func (l *Ledger) Append(ctx context.Context, e events.Entry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := events.Validate(e); err != nil {
		return err
	}
	return l.append(ctx, e)
}

// ValidatedSelf returns the receiver: a type embedding this one does not
// inherit the validated hand-over of AppendValidated.
func (l *Ledger) ValidatedSelf() any { return l }

// AppendValidated appends entries the SDK's ledger writer validated, without
// validating them again (see the adapters package doc), and returns once
// they are acknowledged by the stream, as AppendBatch does: the SDK's
// writes are durable when they return (an exec's request waits for its
// exec.started). The entries are published into the async window one after
// the other and their acknowledgements awaited once, for the whole batch.
// Only this module can call it with entries.
func (l *Ledger) AppendValidated(ctx context.Context, v validated.Entries) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if es := v.Slice(); len(es) == 1 {
		if err := l.append(ctx, es[0]); err != nil {
			return err
		}
		return l.Sync(ctx, es[0].SandboxID)
	}
	return l.appendBatch(ctx, v.Slice())
}

// append publishes e, which passed events.Validate.
func (l *Ledger) append(ctx context.Context, e events.Entry) error {
	p, err := l.pending(e)
	if err != nil {
		return err
	}
	w, err := l.lockWriter(e.SandboxID)
	if err != nil {
		return err
	}
	defer w.mu.Unlock()
	return l.publishLocked(ctx, w, p)
}

// pending checks what msgLocked cannot fail on later: the subject, and the
// PrevHash a fork's first entry names.
func (l *Ledger) pending(e events.Entry) (pendingMsg, error) {
	e.Seq, e.Hash = 0, ""
	subj, err := events.Subject(l.b.cfg.SubjectPrefix, e.SandboxID, e.Event)
	if err != nil {
		return pendingMsg{}, fmt.Errorf("%w: %w", adapters.ErrInvalidEntry, err)
	}
	if !events.ValidHash(e.PrevHash) {
		return pendingMsg{}, &events.ValidationError{Field: "prevHash", Reason: "is not a chain hash", Err: events.ErrInvalidHash}
	}
	return pendingMsg{subj: subj, e: e}, nil
}

// AppendBatch validates every entry, publishes them in order and waits until
// all are acknowledged. Invalid input publishes nothing. A failure part-way
// (fenced, server down) can leave a prefix of es stored; the writer then fails
// every later call, so nothing is ever stored after the gap.
func (l *Ledger) AppendBatch(ctx context.Context, es []events.Entry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := validated.Check(es); err != nil {
		return err
	}
	return l.appendBatch(ctx, es)
}

// appendBatch publishes es, each of which passed events.Validate.
func (l *Ledger) appendBatch(ctx context.Context, es []events.Entry) error {
	msgs := make([]pendingMsg, 0, len(es))
	for _, e := range es {
		p, err := l.pending(e)
		if err != nil {
			return err
		}
		msgs = append(msgs, p)
	}
	var touched []string
	for i, m := range msgs {
		w, err := l.lockWriter(es[i].SandboxID)
		if err != nil {
			return err
		}
		err = l.publishLocked(ctx, w, m)
		w.mu.Unlock()
		if err != nil {
			return err
		}
		if !slices.Contains(touched, w.id) {
			touched = append(touched, w.id)
		}
	}
	for _, id := range touched {
		if err := l.Sync(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// publishLocked publishes one entry of w: at once when w holds its sandbox,
// behind the fence when a claim is in flight (starting one if w holds
// nothing). Called with w.mu held.
func (l *Ledger) publishLocked(ctx context.Context, w *writer, p pendingMsg) error {
	if err := w.failure(); err != nil {
		return err
	}
	if l.serial {
		if err := l.claim(ctx, w); err != nil {
			return err
		}
		m, undo, err := l.msgLocked(w, p)
		if err != nil {
			return err
		}
		if err := l.publishSync(ctx, w, m); err != nil {
			undo()
			return err
		}
		return nil
	}
	if w.claim != nil {
		l.finishClaimLocked(w) // if resolved meanwhile
		if err := w.failure(); err != nil {
			return err
		}
	}
	if w.claim == nil && w.epoch.Load() == 0 {
		if err := l.startClaimLocked(ctx, w); err != nil {
			return err
		}
	}
	if w.claim != nil && len(w.queue) >= l.cfg.MaxPending {
		// The queue is as long as the window: wait for the fence.
		if err := l.awaitClaimLocked(ctx, w); err != nil {
			return err
		}
		if err := w.failure(); err != nil {
			return err
		}
	}
	w.inflight.Add(1)
	if w.claim != nil {
		w.queue = append(w.queue, p)
		return nil
	}
	return l.sendLocked(ctx, w, p)
}

// msgLocked links p's entry into its session's chain and builds its
// message under w's epoch; undo puts the chain back, for a message that is
// not published. Called with w.mu held.
func (l *Ledger) msgLocked(w *writer, p pendingMsg) (m *nats.Msg, undo func(), err error) {
	k := p.e.Session()
	head, had := w.chain.Head(k)
	e := p.e
	if !l.unchained {
		if e, err = w.chain.Link(p.e); err != nil {
			return nil, nil, err
		}
	}
	undo = func() {
		if had {
			w.chain.Seed(k, head)
		} else {
			w.chain.Forget(k)
		}
	}
	data := appendEntry(make([]byte, 0, 256+len(e.Payload)+len(e.Name)+len(e.Error)), e)
	if e.Name != w.name || w.hdrName == nil {
		w.name, w.hdrName = e.Name, []string{url.PathEscape(e.Name)}
	}
	w.counter++
	// Headers set directly: publish options would allocate per message.
	m = &nats.Msg{Subject: p.subj, Data: data, Header: nats.Header{
		HeaderName:                 w.hdrName,
		jetstream.MsgIDHeader:      {w.epochStr + strconv.FormatUint(w.counter, 10)},
		natsExpectedSubjSeq:        w.hdrFenceSeq,
		natsExpectedSubjSeqSubject: w.hdrFenceSubj,
	}}
	if e.Trace != "" {
		m.Header[HeaderTraceParent] = []string{e.Trace}
	}
	return m, undo, nil
}

// sendLocked publishes one entry of w into the async window, already counted
// in w.inflight; on failure it uncounts it. Called with w.mu held, w claimed.
func (l *Ledger) sendLocked(ctx context.Context, w *writer, p pendingMsg) error {
	m, undo, err := l.msgLocked(w, p)
	if err != nil {
		w.smu.Lock()
		w.inflight.Add(-1)
		w.notifyLocked()
		w.smu.Unlock()
		return err
	}
	for {
		_, err := l.js.PublishMsgAsync(m)
		if err == nil {
			return nil
		}
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil {
			continue // the window is full: wait for acks, bounded by ctx
		}
		w.counter--
		undo()
		w.smu.Lock()
		w.inflight.Add(-1)
		w.notifyLocked()
		w.smu.Unlock()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: publish %s: %w", adapters.ErrUnavailable, p.subj, err)
	}
}

// loadHeads reads the heads of sandboxID's sessions from the stream into
// w.chain: after a reclaim or a Takeover, the entries before this epoch
// are someone else's (or this Ledger's before Release). Called with w.mu held.
func (l *Ledger) loadHeads(ctx context.Context, w *writer) error {
	filter, err := events.SandboxSubject(l.b.cfg.SubjectPrefix, w.id)
	if err != nil {
		return err
	}
	// A scan: each session's head is the last hash seen, nothing else is kept.
	var chain events.Chain
	res := readResult{emit: func(e *events.Entry) error {
		if e.Hash != "" {
			chain.Seed(e.Session(), e.Hash)
		}
		return nil
	}}
	err = l.b.readInto(ctx, &res, filter, "")
	if err == nil {
		err = res.flush()
	}
	if err != nil {
		return fmt.Errorf("read chain heads of %s: %w", w.id, err)
	}
	w.chain = chain
	return nil
}

// publishSync publishes m and waits for its acknowledgement; used on
// replicated streams, where the server refuses a second in-flight publish that
// checks the same fence subject (error 10164, even from the same writer). It
// retries what retryablePublish allows, with the same message id (so a retry
// never stores twice), for up to AckTimeout. Called with w.mu held.
func (l *Ledger) publishSync(ctx context.Context, w *writer, m *nats.Msg) error {
	deadline := time.Now().Add(l.cfg.AckTimeout)
	wait := time.Millisecond
	for {
		pctx, cancel := opCtx(ctx)
		ack, err := l.js.PublishMsg(pctx, m)
		cancel()
		if err == nil {
			l.noteSeq(ack.Sequence)
			return nil
		}
		if ctx.Err() != nil {
			// Stored or not, nothing after it is: order holds without a sticky error.
			return ctx.Err()
		}
		if !retryablePublish(err) || time.Now().After(deadline) {
			perr := publishError(w.id, w.epoch.Load(), err)
			w.smu.Lock()
			if w.err == nil {
				w.err = perr
			}
			w.smu.Unlock()
			return perr
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// retryablePublish reports whether publishSync tries a publish again, with
// the same message id (so a retry never stores twice): another publish
// checking the fence subject in flight (10164), the same message's first
// attempt still in process (10158: a replicated stream holds a proposal of
// the message's id whose outcome is not known yet, as when a publish is
// retried after a timeout during a leader change), timeouts, and moments
// without a leader or a responder (a 5xx answer, no responders).
func retryablePublish(err error) bool {
	var ae *jetstream.APIError
	if errors.As(err, &ae) && (ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant ||
		ae.ErrorCode == errCodeDuplicateInProcess || ae.Code >= 500) {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

func (l *Ledger) noteSeq(seq uint64) {
	for {
		cur := l.lastSeq.Load()
		if seq <= cur || l.lastSeq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

func publishError(sandboxID string, epoch uint64, err error) error {
	if isWrongLastSeq(err) {
		return &FencedError{SandboxID: sandboxID, Epoch: epoch, Err: err}
	}
	return fmt.Errorf("%w: sandbox %s: publish not acknowledged: %w", adapters.ErrUnavailable, sandboxID, err)
}

func isWrongLastSeq(err error) bool {
	var ae *jetstream.APIError
	return errors.As(err, &ae) && ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// Sync is the barrier: it returns once every event of sandboxID appended so
// far is acknowledged by the stream, or the first error among them (sticky:
// ErrFenced or ErrUnavailable), or ctx's error. Safe for concurrent use; it
// also waits for appends made concurrently with it.
func (l *Ledger) Sync(ctx context.Context, sandboxID string) error {
	w := l.lookup(sandboxID)
	if w == nil {
		if l.closed.Load() {
			return ErrClosed
		}
		return nil
	}
	return w.wait(ctx)
}

// Flush is Sync for every sandbox this ledger writes; it returns every
// sandbox's error joined.
func (l *Ledger) Flush(ctx context.Context) error {
	l.mu.Lock()
	ws := make([]*writer, 0, len(l.writers))
	for _, w := range l.writers {
		ws = append(ws, w)
	}
	l.mu.Unlock()
	var errs []error
	for _, w := range ws {
		if err := w.wait(ctx); err != nil {
			if ctx.Err() != nil {
				return err
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close refuses every later call with ErrClosed, then flushes the publishes
// already made (for at most 10 s): appends made while it runs are refused
// rather than flushed, so it ends however busy the ledger is. It does not
// close the Bus. Idempotent.
func (l *Ledger) Close() error {
	l.mu.Lock()
	first := l.closed.CompareAndSwap(false, true)
	ws := make([]*writer, 0, len(l.writers))
	for _, w := range l.writers {
		ws = append(ws, w)
	}
	l.mu.Unlock()
	if !first {
		return nil
	}
	for _, w := range ws {
		w.quiesce()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := l.Flush(ctx)
	close(l.done)
	l.stopBg()
	l.claims.Wait()
	l.js.CleanupPublisher()
	if err != nil && !errors.Is(err, ErrFenced) {
		return fmt.Errorf("close ledger: %w", err)
	}
	return nil
}

func (l *Ledger) isClosed() bool { return l.closed.Load() }

// LastSeq returns the stream sequence of the newest entry this Ledger has had
// acknowledged.
func (l *Ledger) LastSeq() uint64 { return l.lastSeq.Load() }
