package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/streammsg"
)

// Batched direct gets (readDirect).
const (
	// directBatchFirst is the size of a read's first batch, small in case the
	// session turns out to be interleaved with others (then the batch is
	// asked again with headers); each dense batch after it asks for 4 times
	// more, up to directBatchMax.
	directBatchFirst = 1000
	directBatchMax   = 10_000
	// directMaxBytes bounds a batch's bytes (the server stops after the
	// message that crosses it): with one batch in flight at a time, what the
	// subscription buffers stays far below its pending limits.
	directMaxBytes = 8 << 20
	// directStuckRounds is how many batches in a row may find nothing
	// (stale replicas, messages deleted meanwhile) before a read reads the
	// rest with an ordered consumer.
	directStuckRounds = 4
	// Reply headers (nats-server's JSLastSequence, JSNumPending) and the
	// status nats.go puts in a reply's header.
	hdrLastSequence = "Nats-Last-Sequence"
	hdrNumPending   = "Nats-Num-Pending"
	hdrStatus       = "Status"
	hdrDescription  = "Description"
)

// readDirect reads the messages on filter up to last (the leader's last
// sequence on filter) into res with batched direct gets
// ($JS.API.DIRECT.GET.<stream>), which the server answers from its store
// without a consumer, several times faster than an ordered consumer's
// delivery.
//
// Batches are asked without the messages' headers (no_hdr), the cheapest
// for both ends: the read needs none of them (the session name is checked
// on the decoded entry, and Trace is not restored by reads). The stream
// sequence of a message is then in no header, only the batch's last one
// is (in the end-of-batch status). A batch asked from sequence from that
// ends at end with end-from+1 messages is dense: it holds every sequence
// in between, message i is at from+i. A session written by one writer at a
// time is dense but for the odd foreign message (its fence, another
// sandbox's fence): a batch that is not dense is asked again with the
// messages' headers, which give their sequences; if fewer than half of its
// sequences are on filter, the session is interleaved with others there
// and the rest is read with an ordered consumer, which costs less than
// direct gets with headers.
//
// Batches are asked on the filter (next_by_subj), except after a dense
// one, when the filter is a whole sandbox's subjects: then the next batch
// is asked without it (wide), which spares the server matching the filter
// message by message (a fifth of the read). A wide batch is kept only if
// it is dense and every message decodes to an entry of the sandbox (the
// subject it was published on, events.Subject of its sandbox and event, is
// on filter); else it is dropped and the rest of the read asks on the
// filter.
//
// The next batch is asked as soon as a dense one has arrived, so the
// server sends it while the client decodes the one before.
//
// Direct gets are answered by any replica, possibly one behind the leader
// or, after a deletion, ahead of the replica that answered before; the
// dense rule holds whoever answers. Batches are asked from the next
// sequence until last; when a replica has nothing there, the leader is
// asked for its last sequence again (after a short backoff) and the read
// ends once nothing past what was read exists. After directStuckRounds
// such rounds in a row the rest is read with an ordered consumer, which
// waits for a lagging replica in its own way.
func (b *Bus) readDirect(ctx context.Context, res *readResult, filter, name string, last uint64) error {
	d, err := b.newDirectReader(filter)
	if err != nil {
		return err
	}
	defer d.close()
	r := &directRead{b: b, d: d, res: res, filter: filter, name: name, last: last,
		from: 1, size: directBatchFirst, sandbox: sandboxOfFilter(b.cfg.SubjectPrefix, filter)}
	return r.run(ctx)
}

// directRead is the state of one readDirect.
type directRead struct {
	b            *Bus
	d            *directReader
	res          *readResult
	filter, name string
	last         uint64 // the leader's last sequence on filter
	in           interner
	seen         uint64 // every sequence up to seen is read
	from         uint64 // the first sequence of the batch in flight
	size         int    // the size of the next dense batch
	stuck        int    // batches in a row that found nothing
	// sandbox is the sandbox whose subjects filter is (prefix.<id>.>), ""
	// for another filter; wide batches are asked for such a filter only.
	sandbox string
	wide    bool // the batch in flight is asked without the filter
	narrow  bool // a wide batch failed: ask on the filter only
}

// errDone ends a direct read that is complete.
var errDone = errors.New("read complete")

func (r *directRead) run(ctx context.Context) error {
	if err := r.ask(r.from, r.size, false); err != nil {
		return err
	}
	for {
		end, pending, err := r.d.receive(ctx)
		if err == nil {
			n := uint64(len(r.d.msgs))
			switch {
			case n == 0:
				err = r.nothing(ctx)
			case r.res.entries == nil && pending < 1<<20:
				r.res.entries = make([]events.Entry, 0, r.res.batchCap(max(n, pending), directBatchMax))
				fallthrough
			default:
				r.stuck = 0
				if end >= r.from && end-r.from+1 == n {
					err = r.dense(end)
				} else {
					err = r.sparse(ctx)
				}
			}
		}
		if err == nil || errors.Is(err, errDone) {
			// A batch is whole once handled (a wide one may be dropped).
			if ferr := r.res.flush(); ferr != nil {
				return ferr
			}
		}
		switch {
		case errors.Is(err, errDone):
			return nil
		case errors.Is(err, errNoDirect), errors.Is(err, errOrdered):
			// No replica serves direct gets (yet: a stream just updated
			// to allow them), or a session interleaved with others.
			return r.b.readOrdered(ctx, r.res, r.filter, r.name, r.seen+1, r.last)
		case err != nil:
			return err
		}
	}
}

// errOrdered ends a direct read whose rest is read with an ordered
// consumer.
var errOrdered = errors.New("read on with an ordered consumer")

// ask asks for the batch from sequence from: without the filter when the
// last batch was dense (wide) and the filter allows it.
func (r *directRead) ask(from uint64, size int, wide bool) error {
	r.wide = wide && r.sandbox != "" && !r.narrow
	return r.d.askBatch(from, size, true, r.wide)
}

// nothing handles a batch that found nothing at or after from on the
// replica that answered: a replica behind, or the messages up to last
// deleted or expired meanwhile. It asks the leader what is left.
func (r *directRead) nothing(ctx context.Context) error {
	if r.stuck++; r.stuck > directStuckRounds {
		return errOrdered // let the ordered consumer wait for the replica
	}
	if err := sleepCtx(ctx, time.Duration(r.stuck)*50*time.Millisecond); err != nil {
		return err
	}
	now, found, err := r.b.lastSeq(ctx, r.filter)
	if err != nil {
		return err
	}
	if !found || now <= r.seen {
		return errDone
	}
	r.last, r.from = now, r.seen+1
	return r.ask(r.from, r.size, false)
}

// dense decodes the batch received, message i at sequence from+i, after
// asking for the next one.
func (r *directRead) dense(end uint64) error {
	batchFrom, wide := r.from, r.wide
	if end < r.last {
		r.from = end + 1
		r.size = min(4*r.size, directBatchMax)
		if err := r.ask(r.from, r.size, true); err != nil {
			return err
		}
	}
	mark, firstSeq := len(r.res.entries), r.res.firstSeq
	for i, m := range r.d.msgs {
		seq := batchFrom + uint64(i)
		if seq > r.last {
			break
		}
		if r.res.firstSeq == 0 {
			r.res.firstSeq = seq
		}
		if !wide {
			r.b.keep(r.res, m.Data, r.filter, seq, r.name, &r.in)
		} else if !r.b.keepOf(r.res, m.Data, r.sandbox, seq, r.name, &r.in) {
			// Not the sandbox's: drop the batch (and the one in flight)
			// and ask on the filter from its start.
			r.res.truncate(mark)
			r.res.firstSeq = firstSeq
			r.narrow = true
			r.from = batchFrom
			return r.ask(r.from, r.size, false)
		}
	}
	if end >= r.last {
		return errDone
	}
	r.seen = end
	return nil
}

// sparse handles a batch that holds fewer messages than the sequences it
// spans: a wide one is dropped and asked again on the filter; one on the
// filter is asked again with headers, for the messages' sequences.
func (r *directRead) sparse(ctx context.Context) error {
	if r.wide {
		r.narrow = true
		return r.ask(r.from, r.size, false)
	}
	if err := r.d.askBatch(r.from, len(r.d.msgs), false, false); err != nil {
		return err
	}
	end, _, err := r.d.receive(ctx)
	if err != nil {
		return err
	}
	if len(r.d.msgs) == 0 { // a replica that has not got them (yet)
		return r.nothing(ctx)
	}
	for _, m := range r.d.msgs {
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return fmt.Errorf("%w: direct get on %s: sequence: %w", adapters.ErrUnavailable, r.filter, err)
		}
		if seq > r.last {
			break
		}
		if r.res.firstSeq == 0 {
			r.res.firstSeq = seq
		}
		r.b.keep(r.res, m.Data, m.Header.Get(jetstream.SubjectHeader), seq, r.name, &r.in)
	}
	if end >= r.last {
		return errDone
	}
	interleaved := uint64(len(r.d.msgs)) < (end-r.from+1)/2
	r.seen, r.from = end, end+1
	if interleaved {
		return errOrdered
	}
	return r.ask(r.from, r.size, false)
}

// sandboxOfFilter returns the sandbox id of a filter on all of one
// sandbox's subjects (prefix.<id>.>), "" for any other filter.
func sandboxOfFilter(prefix, filter string) string {
	rest, ok := strings.CutPrefix(filter, prefix+".")
	if !ok {
		return ""
	}
	id, ok := strings.CutSuffix(rest, ".>")
	if !ok || id == "" || strings.ContainsAny(id, ".*> ") {
		return ""
	}
	return id
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// directReader sends one read's direct get requests, one at a time, and
// receives their replies on a subscription of its own. Not safe for
// concurrent use.
type directReader struct {
	b       *Bus
	filter  string
	subject string // $JS.API.DIRECT.GET.<stream>
	sub     *nats.Subscription
	inbox   string
	n       int         // requests sent; request n is answered on inbox.n
	reply   string      // the reply subject of the request in flight
	msgs    []*nats.Msg // the messages of the last batch received
}

func (b *Bus) newDirectReader(filter string) (*directReader, error) {
	inbox := b.nc.NewInbox()
	sub, err := b.nc.SubscribeSync(inbox + ".*")
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", adapters.ErrUnavailable, filter, err)
	}
	return &directReader{b: b, filter: filter, subject: jetstream.DefaultAPIPrefix + "DIRECT.GET." + b.cfg.Stream,
		sub: sub, inbox: inbox}, nil
}

func (d *directReader) close() { _ = d.sub.Unsubscribe() }

// askBatch asks for up to size messages on the filter (on any subject when
// wide) from sequence from on, without their headers when noHdr. (No
// up_to_seq: the server, 2.15, ignores it for such a batch, which ends at
// the stream's end; readDirect stops at its last sequence itself.)
func (d *directReader) askBatch(from uint64, size int, noHdr, wide bool) error {
	req := streammsg.Request{Seq: from, NextFor: d.filter, Batch: size, MaxBytes: directMaxBytes, NoHeaders: noHdr}
	if wide {
		req.NextFor = ""
	}
	return d.ask(req)
}

func (d *directReader) ask(req streammsg.Request) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	d.n++
	d.reply = d.inbox + "." + strconv.Itoa(d.n)
	if err := d.b.nc.PublishRequest(d.subject, d.reply, body); err != nil {
		return fmt.Errorf("%w: direct get on %s: %w", adapters.ErrUnavailable, d.filter, err)
	}
	return nil
}

// next returns the next reply to the request in flight; replies to earlier
// requests (one that timed out) are dropped.
func (d *directReader) next(ctx, rctx context.Context) (*nats.Msg, error) {
	for {
		m, err := d.sub.NextMsgWithContext(rctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, nats.ErrNoResponders) { // nats.go's reading of a 503 status
				return nil, errNoDirect
			}
			return nil, fmt.Errorf("%w: direct get on %s: %w", adapters.ErrUnavailable, d.filter, err)
		}
		if m.Subject == d.reply {
			return m, nil
		}
	}
}

// status returns the status of a reply that carries one (an end of batch,
// 404 when nothing matched, an error), "" for a message.
func status(m *nats.Msg) string {
	if len(m.Data) > 0 || m.Header == nil {
		return ""
	}
	return m.Header.Get(hdrStatus)
}

// statusErr is the error of an unexpected status reply.
func (d *directReader) statusErr(m *nats.Msg) error {
	return fmt.Errorf("%w: direct get on %s: status %s %s", adapters.ErrUnavailable, d.filter,
		m.Header.Get(hdrStatus), m.Header.Get(hdrDescription))
}

// errNoDirect is the no-responders status of a direct get: no server
// answers them for the stream.
var errNoDirect = errors.New("no server answers direct gets")

// receive collects the batch in flight into d.msgs until its end, and
// returns the sequence of its last message and the number of messages on
// the filter the server counted when it began; a batch that found nothing
// (404) leaves d.msgs empty. It returns errNoDirect when nobody answers
// direct gets.
func (d *directReader) receive(ctx context.Context) (end, pending uint64, err error) {
	clear(d.msgs)
	d.msgs = d.msgs[:0]
	rctx, cancel := opCtx(ctx)
	defer cancel()
	for {
		m, err := d.next(ctx, rctx)
		if err != nil {
			return 0, 0, err
		}
		switch status(m) {
		case "":
			d.msgs = append(d.msgs, m)
			continue
		case "404":
			if len(d.msgs) == 0 {
				return 0, 0, nil
			}
		case "204":
			end, err := strconv.ParseUint(m.Header.Get(hdrLastSequence), 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("%w: direct get on %s: end of batch: %w", adapters.ErrUnavailable, d.filter, err)
			}
			pending, _ := strconv.ParseUint(m.Header.Get(hdrNumPending), 10, 64)
			return end, pending, nil
		}
		return 0, 0, d.statusErr(m)
	}
}
