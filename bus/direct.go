package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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
// ($JS.API.DIRECT.GET.<stream>, next_by_subj), which the server answers
// from its store without a consumer, several times faster than an ordered
// consumer's delivery.
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
	var in interner
	var seen uint64   // every sequence up to seen is read
	from := uint64(1) // the first sequence of the batch in flight
	size := directBatchFirst
	stuck := 0
	if err := d.askBatch(from, size, true); err != nil {
		return err
	}
	for {
		end, pending, err := d.receive(ctx)
		if errors.Is(err, errNoDirect) {
			// No replica serves direct gets (yet: a stream just updated to
			// allow them).
			return b.readOrdered(ctx, res, filter, name, seen+1, last)
		}
		if err != nil {
			return err
		}
		n := uint64(len(d.msgs))
		if n == 0 {
			// Nothing at or after from on the replica that answered: a
			// replica behind, or the messages up to last deleted or expired
			// meanwhile. Ask the leader what is left.
			if stuck++; stuck > directStuckRounds {
				return b.readOrdered(ctx, res, filter, name, seen+1, last)
			}
			if err := sleepCtx(ctx, time.Duration(stuck)*50*time.Millisecond); err != nil {
				return err
			}
			now, found, err := b.lastSeq(ctx, filter)
			if err != nil {
				return err
			}
			if !found || now <= seen {
				return nil
			}
			last, from = now, seen+1
			if err := d.askBatch(from, size, true); err != nil {
				return err
			}
			continue
		}
		stuck = 0
		if res.entries == nil && pending < 1<<20 {
			res.entries = make([]events.Entry, 0, max(n, pending))
		}
		if end < from || end-from+1 != n {
			// Not dense: the same messages again, with their sequences.
			if err := d.askBatch(from, int(n), false); err != nil {
				return err
			}
			if end, _, err = d.receive(ctx); errors.Is(err, errNoDirect) {
				return b.readOrdered(ctx, res, filter, name, seen+1, last)
			} else if err != nil {
				return err
			}
			if len(d.msgs) == 0 {
				continue // the next round asks the leader
			}
			for _, m := range d.msgs {
				seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
				if err != nil {
					return fmt.Errorf("%w: direct get on %s: sequence: %w", adapters.ErrUnavailable, filter, err)
				}
				if seq > last {
					break
				}
				if res.firstSeq == 0 {
					res.firstSeq = seq
				}
				b.keep(res, m.Data, m.Header.Get(jetstream.SubjectHeader), seq, name, &in)
			}
			if end >= last {
				return nil
			}
			interleaved := uint64(len(d.msgs)) < (end-from+1)/2
			seen, from = end, end+1
			if interleaved {
				return b.readOrdered(ctx, res, filter, name, from, last)
			}
			if err := d.askBatch(from, size, true); err != nil {
				return err
			}
			continue
		}
		// Dense: ask for the next batch, then decode this one.
		batchFrom := from
		if end < last {
			from = end + 1
			size = min(4*size, directBatchMax)
			if err := d.askBatch(from, size, true); err != nil {
				return err
			}
		}
		for i, m := range d.msgs {
			seq := batchFrom + uint64(i)
			if seq > last {
				break
			}
			if res.firstSeq == 0 {
				res.firstSeq = seq
			}
			b.keep(res, m.Data, filter, seq, name, &in)
		}
		if end >= last {
			return nil
		}
		seen = end
	}
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

// askBatch asks for up to size messages on the filter from sequence from on,
// without their headers when noHdr. (No up_to_seq: the server, 2.15,
// ignores it for a next_by_subj batch, which ends at the stream's end;
// readDirect stops at its last sequence itself.)
func (d *directReader) askBatch(from uint64, size int, noHdr bool) error {
	return d.ask(streammsg.Request{Seq: from, NextFor: d.filter, Batch: size, MaxBytes: directMaxBytes, NoHeaders: noHdr})
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
