package bus

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// DecodeMsg decodes a ledger message into an entry carrying its stream
// sequence, as encoding/json would but faster; the entry's payload may share
// data's memory. It checks the fields a reader relies on (name, sandbox id,
// a known event) but not the payload's shape (projectors also run
// events.Validate). Errors wrap events.ErrInvalidEntry.
func DecodeMsg(data []byte, seq uint64) (events.Entry, error) { return decodeMsg(data, seq, nil) }

// DecodeValidMsg is DecodeMsg followed by events.Validate (whose fast path
// checks the common payloads without encoding/json). It is the projector's
// decoder: what it accepts may be stored without validating it again. Errors
// wrap events.ErrInvalidEntry.
func DecodeValidMsg(data []byte, seq uint64) (events.Entry, error) {
	e, err := decodeMsg(data, seq, nil)
	if err != nil {
		return events.Entry{}, err
	}
	if err := events.Validate(e); err != nil {
		return events.Entry{}, err
	}
	return e, nil
}

func decodeMsg(data []byte, seq uint64, in *interner) (events.Entry, error) {
	var e events.Entry
	if err := decodeMsgInto(&e, data, seq, in); err != nil {
		return events.Entry{}, err
	}
	return e, nil
}

// decodeMsgInto is decodeMsg decoding into *e, which must be zero; on error
// *e is zero again.
func decodeMsgInto(e *events.Entry, data []byte, seq uint64, in *interner) error {
	if !decodeEntryInto(e, data, in) {
		if err := slowDecode(e, data); err != nil {
			return err
		}
	}
	var err error
	switch {
	case e.Name == "":
		err = &events.ValidationError{Field: "name", Reason: "is empty"}
	case e.SandboxID == "":
		err = &events.ValidationError{Field: "sandboxId", Reason: "is empty"}
	case !e.Event.Valid(): // a known event or an extension event
		err = events.CheckEvent(e.Event)
	}
	if err != nil {
		*e = events.Entry{}
		return err
	}
	e.Seq = seq
	return nil
}

// slowDecode decodes data into *e with encoding/json, for what the fast
// decoder does not take. A function of its own: the decoded entry escapes to
// the heap here only.
func slowDecode(e *events.Entry, data []byte) error {
	var v events.Entry
	if err := json.Unmarshal(data, &v); err != nil {
		*e = events.Entry{}
		return &events.ValidationError{Field: "entry", Reason: "does not decode", Err: err}
	}
	*e = v
	return nil
}

// readResult is what one ordered read of a subject returned.
type readResult struct {
	entries  []events.Entry // the entries kept, in stream order
	firstSeq uint64         // first stream sequence seen on the subject (any name), 0 if none
	arena    []byte         // the slab kept payloads are copied into (own)
	// emit, when set, is handed the entries as the read goes (flush),
	// which then holds one batch of them at a time (a scan).
	emit func(*events.Entry) error
}

// scanBatch is the most entries a scan holds before it hands them on.
const scanBatch = 1024

// batchCap returns the capacity to give entries for n more: n, or at most
// a batch's worth in a scan.
func (r *readResult) batchCap(n uint64, batch int) int {
	if r.emit != nil {
		return int(min(n, uint64(batch)))
	}
	return int(n)
}

// flush hands the entries read so far to r.emit, in stream order, and
// drops them; it does nothing in a read that keeps them.
func (r *readResult) flush() error {
	if r.emit == nil {
		return nil
	}
	for i := range r.entries {
		if err := r.emit(&r.entries[i]); err != nil {
			return err
		}
	}
	r.truncate(0)
	return nil
}

// slot returns a new last entry of r.entries, zero, for the next message
// to be decoded into: the next of the slice's spare capacity, which is
// zero already (truncate keeps it so), taken without writing it, or a new
// one. Appending a zero entry wrote its 200-odd bytes, with the garbage
// collector's write barriers while it marks: 40 % of a read's own CPU.
func (r *readResult) slot() *events.Entry {
	if testHookSlot != nil {
		testHookSlot()
	}
	if n := len(r.entries); n < cap(r.entries) {
		r.entries = r.entries[:n+1]
	} else {
		r.entries = append(r.entries, events.Entry{})
	}
	return &r.entries[len(r.entries)-1]
}

// testHookSlot, set by tests only, is called before each message a read
// decodes: what it changes in the stream, the read meets from its next batch.
var testHookSlot func()

// truncate drops the entries from index i on, zeroing them, so that the
// slice's spare capacity stays zero for slot.
func (r *readResult) truncate(i int) {
	clear(r.entries[i:])
	r.entries = r.entries[:i]
}

// arenaSize is the slab the payloads of one read are copied into.
const arenaSize = 64 << 10

// own returns a copy of p in the read's arena, so that a kept entry holds its
// payload's bytes and not the whole message it was decoded from (a resumed
// session keeps every payload of its execs: the messages' headers and
// envelopes were most of its memory). A large payload gets a slice of its own.
func (r *readResult) own(p []byte) []byte {
	if len(p) > arenaSize/4 {
		return bytes.Clone(p)
	}
	if cap(r.arena)-len(r.arena) < len(p) {
		r.arena = make([]byte, 0, arenaSize)
	}
	n := len(r.arena)
	r.arena = append(r.arena, p...)
	return r.arena[n : n+len(p) : n+len(p)]
}

// read reads every message on filter, in stream order, up to the subject's
// last message as the stream leader reports it when the read starts, keeping
// the entries of the session named name ("" keeps all). Undecodable messages
// are skipped (projectors park them). A stream that allows direct gets is
// read in batches of them (readDirect), else with an ordered consumer.
func (b *Bus) read(ctx context.Context, filter, name string) (readResult, error) {
	var res readResult
	err := b.readInto(ctx, &res, filter, name)
	return res, err
}

// readInto is read into res, which may be a scan's (readResult.emit): its
// last batch is left to flush.
func (b *Bus) readInto(ctx context.Context, res *readResult, filter, name string) error {
	last, found, err := b.lastSeq(ctx, filter)
	if err != nil || !found {
		return err
	}
	if b.direct {
		return b.readDirect(ctx, res, filter, name, last)
	}
	return b.readOrdered(ctx, res, filter, name, 1, last)
}

// readOrdered reads the messages on filter from stream sequence from on
// with an ordered consumer, up to last (the leader's last sequence on filter),
// into res.
//
// The ordered consumer may sit on a replica that is behind the leader, so its
// own pending count cannot say when the read is complete; the leader's last
// sequence can. When nothing arrives for a second or two (stallWatch) the
// leader is asked again, so messages deleted or expired meanwhile do not hold
// the read up.
func (b *Bus) readOrdered(ctx context.Context, res *readResult, filter, name string, from, last uint64) error {
	open := func(from uint64) (jetstream.Consumer, jetstream.MessagesContext, error) {
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy}
		if from > 1 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
		}
		octx, cancel := opCtx(ctx)
		defer cancel()
		cons, err := b.js.OrderedConsumer(octx, b.cfg.Stream, cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: ordered consumer on %s: %w", adapters.ErrUnavailable, filter, err)
		}
		msgs, err := cons.Messages(jetstream.PullMaxMessages(1024))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: read %s: %w", adapters.ErrUnavailable, filter, err)
		}
		return cons, msgs, nil
	}
	cons, msgs, err := open(from)
	if err != nil {
		return err
	}
	defer func() { msgs.Stop() }()
	hname := url.PathEscape(name)
	lastSeen := from - 1
	var in interner
	if ci := cons.CachedInfo(); ci != nil && ci.NumPending < 1<<20 && res.entries == nil {
		res.entries = make([]events.Entry, 0, res.batchCap(ci.NumPending, scanBatch))
	}
	stalls := 0
	w := watchStalls(ctx, time.Second)
	defer func() { w.stop() }()
	for {
		m, err := msgs.Next(jetstream.NextContext(w.ctx))
		if err != nil && w.stalled() {
			w = watchStalls(ctx, time.Second)
			now, found, lerr := b.lastSeq(ctx, filter)
			if lerr != nil {
				return lerr
			}
			if !found || now <= lastSeen {
				return nil
			}
			last = now
			if stalls++; stalls >= 3 {
				// Messages exist past what we have, yet none arrive: start a
				// new consumer after the last one received.
				msgs.Stop()
				if _, msgs, err = open(lastSeen + 1); err != nil {
					return err
				}
				stalls = 0
			}
			continue
		}
		stalls = 0
		w.progress()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: read %s: %w", adapters.ErrUnavailable, filter, err)
		}
		seq, err := msgSeq(m)
		if err != nil {
			return fmt.Errorf("%w: read %s: %w", adapters.ErrUnavailable, filter, err)
		}
		lastSeen = seq
		if res.firstSeq == 0 {
			res.firstSeq = seq
		}
		if h := m.Headers().Get(HeaderName); name == "" || h == hname || h == "" {
			b.keep(res, m.Data(), m.Subject(), seq, name, &in)
		}
		if res.emit != nil && len(res.entries) >= scanBatch {
			if err := res.flush(); err != nil {
				return err
			}
		}
		if seq >= last {
			return nil
		}
	}
}

// stallWatch is the deadline of an ordered read's waits for its next
// message: its ctx ends once a whole period passes in which the read made no
// progress. One goroutine per read checks it, where a deadline per message
// (NextMaxWait) made and stopped a timer for each of them, a good part of a
// replay's cost.
type stallWatch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	n      atomic.Uint64 // messages received
}

// errStalled is the cause of a stallWatch's ctx ended for want of progress.
var errStalled = errors.New("no message for a whole period")

// watchStalls returns a watch on a read under parent, which looks for
// progress every period: the read stalls when nothing arrived for one to two
// periods, never less than one.
func watchStalls(parent context.Context, period time.Duration) *stallWatch {
	ctx, cancel := context.WithCancelCause(parent)
	w := &stallWatch{ctx: ctx, cancel: cancel}
	go func() {
		last := w.n.Load()
		t := time.NewTimer(period) // reset after each look: looks are a period apart at least
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if n := w.n.Load(); n != last {
				last = n
				t.Reset(period)
				continue
			}
			cancel(errStalled)
			return
		}
	}()
	return w
}

// progress records a message received.
func (w *stallWatch) progress() { w.n.Add(1) }

// stalled reports whether the watch ended the read's wait for want of
// progress (not because its parent context ended); it stops the watch.
func (w *stallWatch) stalled() bool {
	w.stop()
	return errors.Is(context.Cause(w.ctx), errStalled)
}

func (w *stallWatch) stop() { w.cancel(nil) }

// msgSeq returns m's stream sequence.
func msgSeq(m jetstream.Msg) (uint64, error) {
	if seq, ok := streamSeq(m.Reply()); ok {
		return seq, nil
	}
	md, err := m.Metadata()
	if err != nil {
		return 0, err
	}
	return md.Sequence.Stream, nil
}

// streamSeq returns the stream sequence in a JetStream message's reply
// subject, the one field of its metadata a read needs, without the rest that
// Metadata parses and allocates. The subject is
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending> (9
// tokens), or with <domain>.<account hash> after $JS.ACK and possibly a
// random token at the end (11 or more); ok is false on anything else, and the
// caller asks Metadata.
func streamSeq(reply string) (uint64, bool) {
	const prefix = "$JS.ACK."
	if !strings.HasPrefix(reply, prefix) {
		return 0, false
	}
	var pos int // index of <sseq> among the tokens after $JS.ACK
	switch n := strings.Count(reply, ".") - 1; {
	case n == 7:
		pos = 3
	case n >= 9:
		pos = 5
	default:
		return 0, false
	}
	rest := reply[len(prefix):]
	for range pos {
		_, rest, _ = strings.Cut(rest, ".")
	}
	tok, _, _ := strings.Cut(rest, ".")
	seq, err := strconv.ParseUint(tok, 10, 64)
	return seq, err == nil && seq > 0
}

// keep decodes the message data (at stream sequence seq, on subject, or
// the filter it was read with when its subject is not known) straight into
// the next slot of res.entries and keeps it there if it belongs to the
// session named name ("" keeps all).
func (b *Bus) keep(res *readResult, data []byte, subject string, seq uint64, name string, in *interner) {
	e := res.slot()
	err := decodeMsgInto(e, data, seq, in)
	if err != nil {
		b.cfg.Logger.Warn("bus: skipping undecodable ledger message", "subject", subject, "seq", seq, "err", err)
	}
	if err != nil || name != "" && e.Name != name {
		res.truncate(len(res.entries) - 1)
		return
	}
	if e.Payload != nil {
		e.Payload = res.own(e.Payload)
	}
}

// keepOf is keep for a message read without a subject filter: it keeps
// the entry (if of the session named name) only if it decodes and belongs
// to sandbox, that is was published on one of its subjects
// (events.Subject of its sandbox and event), and reports whether it did;
// what does not is not the caller's to warn about.
func (b *Bus) keepOf(res *readResult, data []byte, sandbox string, seq uint64, name string, in *interner) bool {
	e := res.slot()
	if err := decodeMsgInto(e, data, seq, in); err != nil || e.SandboxID != sandbox {
		res.truncate(len(res.entries) - 1)
		return false
	}
	if name != "" && e.Name != name {
		res.truncate(len(res.entries) - 1)
		return true
	}
	if e.Payload != nil {
		e.Payload = res.own(e.Payload)
	}
	return true
}

// lastSeq asks the stream leader for the sequence of the last message on filter.
func (b *Bus) lastSeq(ctx context.Context, filter string) (uint64, bool, error) {
	gctx, cancel := opCtx(ctx)
	defer cancel()
	m, err := b.LastMsg(gctx, filter)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("%w: last message on %s: %w", adapters.ErrUnavailable, filter, err)
	}
	return m.Sequence, true, nil
}

// readSession reads one session's entries on filter from the stream and, when
// the stream lost messages and the session's start may be among them,
// completes them from the projection: the projection's entries older than
// anything the stream still holds come first. fromProj returns the
// projection's entries for the same filter.
func (l *Ledger) readSession(ctx context.Context, filter, name, sandboxID string,
	fromProj func(adapters.Ledger) ([]events.Entry, error)) ([]events.Entry, error) {
	if err := l.readyToRead(ctx, sandboxID); err != nil {
		return nil, err
	}
	res, err := l.b.read(ctx, filter, name)
	if err != nil {
		return nil, err
	}
	first, lost, err := l.b.lostMessages(ctx)
	if err != nil {
		return nil, err
	}
	es := res.entries
	// On a stream that lost messages the session read is whole when its
	// first entry is its sandbox.created (retention removes the oldest
	// first, so it took nothing of the session) and retention did not reach
	// past that while the stream was read (the read may then have missed
	// messages it had not reached yet). Else the head of its history may be
	// among the messages lost: the projection completes it.
	whole := len(es) > 0 && es[0].Event.Is(events.SandboxCreated) && first <= res.firstSeq
	if lost && !whole {
		if l.cfg.Projection == nil {
			if len(es) > 0 {
				return nil, fmt.Errorf("read %s/%s: %w (stream starts at %d, no projection)", name, sandboxID, ErrHistoryTruncated, first)
			}
		} else {
			old, err := fromProj(l.cfg.Projection)
			if err != nil {
				return nil, fmt.Errorf("read %s/%s from the projection: %w", name, sandboxID, err)
			}
			es = mergeProjected(old, es, res.firstSeq, first)
		}
	}
	byTsSeq := func(a, b events.Entry) int {
		return cmp.Or(cmp.Compare(a.Ts, b.Ts), cmp.Compare(a.Seq, b.Seq))
	}
	// Usually in order already (a handle's clock only moves on): one pass
	// checks it, where the stable sort takes n log n comparisons.
	if !slices.IsSortedFunc(es, byTsSeq) {
		slices.SortStableFunc(es, byTsSeq)
	}
	return es, nil
}

// mergeProjected completes es, a session read from a stream that lost
// messages, with old, the projection's entries of it: those older than
// firstRead, the first message the read found on the session's subjects,
// come first. When retention reached past firstRead while the stream was
// read (first, the stream's first sequence after the read, is later), the
// read may have missed messages below first that it had not reached yet:
// the projection's entries below first that the read did not find are
// added too. Messages from first on were in the stream throughout the read,
// so the read found them all.
func mergeProjected(old, es []events.Entry, firstRead, first uint64) []events.Entry {
	cut := uint64(math.MaxUint64)
	if firstRead != 0 {
		cut = firstRead
	}
	var read map[uint64]bool // the stream's entries the projection may duplicate
	if first > cut {
		read = make(map[uint64]bool)
		for _, e := range es {
			if e.Seq < first {
				read[e.Seq] = true
			}
		}
	}
	var merged []events.Entry
	for _, e := range old {
		if e.Seq < cut || e.Seq < first && !read[e.Seq] {
			merged = append(merged, e)
		}
	}
	return append(merged, es...)
}

// readyToRead checks that a read of the sandbox's session may start, and
// first waits for this ledger's own publishes of the sandbox: a reader
// reads its own writes.
func (l *Ledger) readyToRead(ctx context.Context, sandboxID string) error {
	if l.isClosed() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.Sync(ctx, sandboxID); err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// lostMessages reports whether the stream lost messages (retention removes
// the oldest; writer fences outlive them, so the loss can be a hole rather
// than a new first sequence), and its first sequence.
func (b *Bus) lostMessages(ctx context.Context) (first uint64, lost bool, err error) {
	ictx, cancel := opCtx(ctx)
	si, err := b.stream.Info(ictx)
	cancel()
	if err != nil {
		return 0, false, fmt.Errorf("%w: stream info: %w", adapters.ErrUnavailable, err)
	}
	return si.State.FirstSeq, si.State.FirstSeq > 1 || si.State.NumDeleted > 0, nil
}

// ScanAll is ReadAll handing the entries to fn as it reads them
// (adapters.Scanner): it holds one batch of them at a time, where ReadAll
// holds them all. Entries out of (Ts, Seq) order, which ReadAll sorts, end
// it with adapters.ErrRescan.
//
// On a stream that lost messages (retention removes the oldest; a delete
// leaves a hole) the session's first entry still read must be its
// sandbox.created: then retention took nothing of it, and the scan goes
// on. Otherwise, before anything is handed, it is ReadAll, which completes
// the session from the projection, handing its result to fn. Retention
// reaching into the session while it is scanned ends the scan with
// adapters.ErrRescan.
func (l *Ledger) ScanAll(ctx context.Context, name, sandboxID string, fn func(*events.Entry) error) error {
	filter, err := events.SandboxSubject(l.b.cfg.SubjectPrefix, sandboxID)
	if err != nil {
		return nil // no such subject can hold entries
	}
	if err := l.readyToRead(ctx, sandboxID); err != nil {
		return err
	}
	_, lost, err := l.b.lostMessages(ctx)
	if err != nil {
		return err
	}
	var first uint64 // the Seq of the first entry handed
	var lastTs int64
	res := readResult{emit: func(e *events.Entry) error {
		switch {
		case first == 0 && lost && !e.Event.Is(events.SandboxCreated):
			return errHeadLost
		case first != 0 && e.Ts < lastTs:
			// Stream order is ReadAll's unless a writer's clock went back.
			return fmt.Errorf("%w: entry %d is older than the one before it", adapters.ErrRescan, e.Seq)
		case first == 0:
			first = e.Seq
		}
		lastTs = e.Ts
		return fn(e)
	}}
	err = l.b.readInto(ctx, &res, filter, name)
	if err == nil {
		err = res.flush()
	}
	switch {
	case errors.Is(err, errHeadLost), err == nil && first == 0 && lost:
		// Nothing handed yet: the projection may hold what the stream lost.
		return l.handAll(ctx, name, sandboxID, fn)
	case err != nil || first == 0:
		return err
	}
	if now, _, err := l.b.lostMessages(ctx); err != nil {
		return err
	} else if now > first {
		return fmt.Errorf("%w: retention removed the start of %s/%s while it was read", adapters.ErrRescan, name, sandboxID)
	}
	return nil
}

// errHeadLost ends a scan whose session's start the stream lost.
var errHeadLost = errors.New("the start of the session is not in the stream")

// handAll reads the session with ReadAll and hands its entries to fn.
func (l *Ledger) handAll(ctx context.Context, name, sandboxID string, fn func(*events.Entry) error) error {
	es, err := l.ReadAll(ctx, name, sandboxID)
	if err != nil {
		return err
	}
	for i := range es {
		if err := fn(&es[i]); err != nil {
			return err
		}
	}
	return nil
}

// ReadAll returns the session's entries ordered by (Ts, Seq), Seq being the
// stream sequence. It reads the sandbox's subject with an ordered consumer,
// after waiting for this ledger's own pending publishes of the sandbox, and
// falls back to LedgerConfig.Projection for history the stream no longer
// holds, including what retention removed while the stream was read; without
// one that is ErrHistoryTruncated.
func (l *Ledger) ReadAll(ctx context.Context, name, sandboxID string) ([]events.Entry, error) {
	filter, err := events.SandboxSubject(l.b.cfg.SubjectPrefix, sandboxID)
	if err != nil {
		return nil, nil // no such subject can hold entries
	}
	return l.readSession(ctx, filter, name, sandboxID, func(p adapters.Ledger) ([]events.Entry, error) {
		return p.ReadAll(ctx, name, sandboxID)
	})
}

func (l *Ledger) checkpoints(ctx context.Context, name, sandboxID string) ([]events.Entry, error) {
	filter, err := events.Subject(l.b.cfg.SubjectPrefix, sandboxID, events.CheckpointCreated)
	if err != nil {
		return nil, nil
	}
	return l.readSession(ctx, filter, name, sandboxID, func(p adapters.Ledger) ([]events.Entry, error) {
		all, err := p.ReadAll(ctx, name, sandboxID)
		if err != nil {
			return nil, err
		}
		return slices.DeleteFunc(all, func(e events.Entry) bool { return !e.Event.Is(events.CheckpointCreated) }), nil
	})
}

// LastCheckpoint returns the session's newest sandbox.checkpoint_created entry
// in (Ts, Seq) order, or nil. It reads only the checkpoint subject.
func (l *Ledger) LastCheckpoint(ctx context.Context, name, sandboxID string) (*events.Entry, error) {
	es, err := l.checkpoints(ctx, name, sandboxID)
	if err != nil || len(es) == 0 {
		return nil, err
	}
	e := es[len(es)-1]
	return &e, nil
}

// ListCheckpoints returns the session's checkpoints in creation order.
func (l *Ledger) ListCheckpoints(ctx context.Context, name, sandboxID string) ([]adapters.CheckpointInfo, error) {
	es, err := l.checkpoints(ctx, name, sandboxID)
	if err != nil {
		return nil, err
	}
	out := make([]adapters.CheckpointInfo, 0, len(es))
	for _, e := range es {
		var p events.CheckpointCreatedPayload
		if err := e.Decode(&p); err != nil {
			continue
		}
		out = append(out, adapters.CheckpointInfo{SnapshotID: p.SnapshotID, Tag: p.Name, CreatedAt: e.Ts})
	}
	return out, nil
}

// DeleteSandbox removes the session's messages from the stream (the whole
// subject when it holds only this session) and, when configured, from
// LedgerConfig.Projection (after AwaitProjection). Deleting an unknown session is not an error. On a replicated stream
// a replay served by a lagging replica may still see the messages for a
// moment.
func (l *Ledger) DeleteSandbox(ctx context.Context, name, sandboxID string) error {
	if l.isClosed() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	filter, err := events.SandboxSubject(l.b.cfg.SubjectPrefix, sandboxID)
	if err != nil {
		return nil
	}
	if err := l.Sync(ctx, sandboxID); err != nil && ctx.Err() != nil {
		return err
	}
	// Let the projector apply everything first, or it could never reach an
	// offset whose message is deleted below.
	if l.cfg.Projection != nil && l.cfg.AwaitProjection != nil {
		if err := l.Flush(ctx); err != nil && ctx.Err() != nil {
			return err
		}
		if err := l.cfg.AwaitProjection(ctx, l.lastSeq.Load()); err != nil {
			return err
		}
	}
	all, err := l.b.read(ctx, filter, "")
	if err != nil {
		return err
	}
	others := slices.ContainsFunc(all.entries, func(e events.Entry) bool { return e.Name != name })
	if !others {
		pctx, cancel := opCtx(ctx)
		err := l.b.stream.Purge(pctx, jetstream.WithPurgeSubject(filter))
		cancel()
		if err != nil {
			return fmt.Errorf("%w: purge %s: %w", adapters.ErrUnavailable, filter, err)
		}
	} else {
		for _, e := range all.entries {
			if e.Name != name {
				continue
			}
			dctx, cancel := opCtx(ctx)
			err := l.b.stream.DeleteMsg(dctx, e.Seq)
			cancel()
			if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return fmt.Errorf("%w: delete message %d: %w", adapters.ErrUnavailable, e.Seq, err)
			}
		}
	}
	if l.cfg.Projection == nil {
		return nil
	}
	return l.cfg.Projection.DeleteSandbox(ctx, name, sandboxID)
}
