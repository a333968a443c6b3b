package alineo

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/alineo-labs/alineo/events"
)

// outputWindow bounds the bytes of output an Exec keeps in memory for its
// readers. Past it, the producer waits for the slowest attached reader; a reader
// that attaches after chunks were dropped reads them back from the ledger.
const outputWindow = 4 << 20

// chunk is one recorded output chunk.
type chunk struct {
	stream events.Stream
	data   []byte
}

// output is the fan-out of one Exec's chunks: one producer (the stream reader,
// which publishes a chunk only once it is in the ledger) and any number of
// readers, each starting from the first chunk. Memory is bounded by
// outputWindow: chunks that every attached reader has passed are dropped, and
// with no reader attached the oldest ones are dropped; a reader that needs a
// dropped chunk gets it from refetch (the ledger).
type output struct {
	window  int
	refetch func(ctx context.Context, from, to int) ([]chunk, error)

	mu      sync.Mutex
	changed chan struct{} // closed on every change; made by the first to wait for it (waitLocked)
	chunks  []chunk       // chunks[i] is chunk number base+i
	base    int
	size    int             // bytes in chunks
	readers []*outputReader // attached: few, often one (Wait's)
	done    bool
	err     error // the exec's terminal error, valid once done
	// onDone, when set, runs once as the output ends, before any reader
	// sees the end (the exec's span ends there); ending is set meanwhile.
	onDone func(err error, stdout, stderr int64)
	ending bool
	// stdout and stderr count the bytes published on each stream.
	stdout, stderr int64
}

type outputReader struct{ pos int }

func newOutput(window int, refetch func(ctx context.Context, from, to int) ([]chunk, error)) *output {
	return &output{window: window, refetch: refetch}
}

// broadcastLocked wakes every waiter (waitLocked).
func (o *output) broadcastLocked() {
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
}

// waitLocked returns the channel the next change closes: a waiter takes it
// with o.mu held, then waits on it without. A change with no waiter costs
// no channel.
func (o *output) waitLocked() <-chan struct{} {
	if o.changed == nil {
		o.changed = make(chan struct{})
	}
	return o.changed
}

// dropLocked drops the oldest chunks while the window is full, but none that an
// attached reader has not passed yet.
func (o *output) dropLocked() {
	limit := o.base + len(o.chunks)
	for _, r := range o.readers {
		limit = min(limit, r.pos)
	}
	n := 0
	for n < len(o.chunks) && o.base+n < limit && o.size >= o.window {
		o.size -= len(o.chunks[n].data)
		o.chunks[n] = chunk{}
		n++
	}
	if n > 0 {
		o.chunks = o.chunks[n:]
		o.base += n
	}
}

// publish appends c for the readers. With the window full it waits for the
// slowest attached reader, or until ctx ends (then it returns ctx.Err()).
func (o *output) publish(ctx context.Context, c chunk) error {
	return o.publishThen(ctx, c, false, nil)
}

// publishLast is publish of the last chunk followed by finish(err), waking the
// readers once. If ctx ends first, nothing is published or finished and it
// returns ctx.Err().
func (o *output) publishLast(ctx context.Context, c chunk, err error) error {
	return o.publishThen(ctx, c, true, err)
}

func (o *output) publishThen(ctx context.Context, c chunk, last bool, err error) error {
	o.mu.Lock()
	for {
		o.dropLocked()
		if o.size < o.window || len(o.readers) == 0 {
			break
		}
		ch := o.waitLocked()
		o.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		o.mu.Lock()
	}
	o.chunks = append(o.chunks, c)
	o.size += len(c.data)
	if c.stream == events.Stderr {
		o.stderr += int64(len(c.data))
	} else {
		o.stdout += int64(len(c.data))
	}
	o.dropLocked()
	if last {
		o.endLocked(err)
	}
	o.broadcastLocked()
	o.mu.Unlock()
	return nil
}

// finish marks the end of the output with the exec's terminal error (nil on success).
func (o *output) finish(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.endLocked(err)
}

// endLocked ends the output with err, unless it is ended or ending: it runs
// onDone (without the lock), then marks it done and wakes the readers. It is
// called with o.mu held and returns with it held.
func (o *output) endLocked(err error) {
	if o.done || o.ending {
		return
	}
	if f := o.onDone; f != nil {
		o.ending, o.onDone = true, nil
		stdout, stderr := o.stdout, o.stderr
		o.mu.Unlock()
		f(err, stdout, stderr)
		o.mu.Lock()
	}
	o.done, o.err = true, err
	o.broadcastLocked()
}

// bytes returns the bytes published so far on stdout and on stderr.
func (o *output) bytes() (stdout, stderr int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stdout, o.stderr
}

// result waits for the end and returns the terminal error.
func (o *output) result() error {
	o.mu.Lock()
	for !o.done {
		ch := o.waitLocked()
		o.mu.Unlock()
		<-ch
		o.mu.Lock()
	}
	defer o.mu.Unlock()
	return o.err
}

// each calls f for every chunk from the first, in order, as they arrive, until
// the output ends or f returns false. It returns the terminal error (nil if f
// stopped early or the exec succeeded), or the error of a ledger read-back.
func (o *output) each(f func(chunk) bool) error {
	r := &outputReader{}
	o.mu.Lock()
	o.readers = append(o.readers, r)
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.readers = slices.DeleteFunc(o.readers, func(x *outputReader) bool { return x == r })
		o.broadcastLocked()
		o.mu.Unlock()
	}()

	for {
		o.mu.Lock()
		if r.pos < o.base {
			// Dropped before this reader came: read them back from the ledger.
			from, to := r.pos, o.base
			o.mu.Unlock()
			cs, err := o.refetch(context.Background(), from, to)
			if err != nil {
				return err
			}
			if len(cs) != to-from {
				return fmt.Errorf("read output back from the ledger: got %d chunks from %d, want %d", len(cs), from, to-from)
			}
			for _, c := range cs {
				if !f(c) {
					return nil
				}
				o.mu.Lock()
				r.pos++
				o.mu.Unlock()
			}
			continue
		}
		if i := r.pos - o.base; i < len(o.chunks) {
			c := o.chunks[i]
			r.pos++
			if o.size >= o.window {
				o.broadcastLocked() // the producer may be waiting for this reader
			}
			o.mu.Unlock()
			if !f(c) {
				return nil
			}
			continue
		}
		if o.done {
			err := o.err
			o.mu.Unlock()
			return err
		}
		ch := o.waitLocked()
		o.mu.Unlock()
		<-ch
	}
}
