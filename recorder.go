package alineo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
)

const (
	// maxUnpublished bounds the output events an exec has read from its stream
	// and not yet queued for the ledger.
	maxUnpublished = 128
	// maxInFlight bounds the output groups of one exec being written to the
	// ledger at once; lines arriving meanwhile are merged into the next group.
	maxInFlight = 2
	// maxGroup bounds the bytes merged into one exec.output entry.
	maxGroup = 256 << 10
)

// outputLinger is how long the recorder waits, with no other group of the
// exec in flight, for the event after a group before writing the group: if
// the stream ends meanwhile, the last group and exec.completed are written
// in one transaction; if more output of the same stream comes, it joins the
// group. Short commands end within it (the exit follows their output by a
// fraction of a millisecond), saving a ledger write on the critical path.
// It is a variable for tests only.
var outputLinger = time.Millisecond

// openFunc sends an exec's request to execd and returns its stream.
type openFunc func(context.Context, *opensandbox.Execd) (*opensandbox.Stream, error)

// pendingChunk is an output chunk queued for the ledger, not yet published.
type pendingChunk struct {
	c    chunk
	done <-chan error
}

// recorder drives one exec from its request to the end of its output, in
// stages, a method each:
//
//   - open sends the request once exec.started is written;
//   - record takes the stream's output events (read from the stream by read)
//     and queues them for the ledger in groups;
//   - deliver hands each group to the readers once its write is done (it
//     starts with the first group queued: a command whose only output is
//     written with exec.completed has none);
//   - finish records exec.completed, waits for every write and ends the output
//     with the exec's error.
//
// A failed write or delivery cancels the stream's context (cancel), which
// stops the stream and kills the command. read and deliver run in goroutines
// of their own; every other method runs in the exec's goroutine.
type recorder struct {
	e     *Exec
	lines bool // output events are lines of a shell command, not raw bytes

	stream *opensandbox.Stream
	cancel context.CancelCauseFunc // cancels the stream's context

	evc       chan opensandbox.Event // output events, from read to record; read closes it
	inFlight  chan struct{}          // a token per group queued and not yet delivered
	queue     chan pendingChunk      // groups queued for the ledger, in order, to deliver
	delivered chan error             // deliver's first error, once queue is closed

	// Owned by record, then by finish.
	linger     *time.Timer
	next       *opensandbox.Event // read ahead while grouping, not yet recorded
	more       bool               // evc is open
	stopped    bool               // record left before the end of the stream
	res        opensandbox.Result // valid once ended reported true
	streamErr  error              // how the stream ended, once ended was called
	emitErr    error              // a write that could not be queued
	delivering bool               // deliver runs: started with the first group queued
	completed  <-chan error       // the write of exec.completed; nil until queued
	lastOut    <-chan error       // the write of last, queued with exec.completed
	last       *chunk             // the last group, delivered by finish with the end
}

func newRecorder(e *Exec, lines bool) *recorder {
	return &recorder{
		e:         e,
		lines:     lines,
		evc:       make(chan opensandbox.Event, maxUnpublished),
		inFlight:  make(chan struct{}, maxInFlight),
		queue:     make(chan pendingChunk, maxInFlight),
		delivered: make(chan error, 1),
		more:      true,
	}
}

// run drives the exec on ex: exec.started was queued when it was called
// (started is the result of its write). ctx is cancelled by Close and Pause.
func (e *Exec) run(ctx context.Context, ex *opensandbox.Execd, started <-chan error, open openFunc, lines bool) {
	newRecorder(e, lines).run(ctx, ex, started, open)
}

func (r *recorder) run(ctx context.Context, ex *opensandbox.Execd, started <-chan error, open openFunc) {
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.cancel = cancel
	if err := r.open(pctx, ex, started, open); err != nil {
		r.e.fail(err)
		return
	}
	defer r.stream.Close()
	go r.read(pctx)
	r.record(pctx)
	r.finish(ctx, pctx)
}

// open sends the request once exec.started is written: the intent is in the
// ledger before the command can run, so a crash never leaves a command that
// ran with no trace of it. If that write fails, nothing is sent. It returns
// the exec's error if it cannot go on, and sets stream otherwise.
func (r *recorder) open(pctx context.Context, ex *opensandbox.Execd, started <-chan error, open openFunc) error {
	e := r.e
	if serr := <-started; serr != nil {
		return &SandboxError{SandboxID: e.sb.id, Op: fmt.Sprintf("record exec %d started", e.step), Err: serr}
	}
	stream, err := open(pctx, ex)
	if err != nil {
		var apiErr *opensandbox.APIError
		if errors.As(err, &apiErr) || errors.Is(err, opensandbox.ErrInvalidRequest) {
			return &SandboxError{SandboxID: e.sb.id, Op: fmt.Sprintf("exec %d", e.step), Err: err}
		}
		if cause := context.Cause(pctx); cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %w", cause, err) // Close or Pause stopped the request
		}
		return &ExecConnectionError{SandboxID: e.sb.id, Step: e.step, Err: err}
	}
	r.stream = stream
	if stream.Exact() {
		r.lines = false // chunks of exact bytes, not lines to terminate
	}
	return nil
}

// read hands the stream's output events to record until the stream ends or
// pctx is done, then closes evc. It runs in a goroutine of its own.
func (r *recorder) read(pctx context.Context) {
	defer close(r.evc)
	for r.stream.Next() {
		ev := r.stream.Event()
		if ev.Kind != opensandbox.EventStdout && ev.Kind != opensandbox.EventStderr {
			continue
		}
		select {
		case r.evc <- ev:
		case <-pctx.Done():
			return
		}
	}
}

// deliver waits for the write of each queued group, in order, and hands the
// group to the readers; a group is one chunk for the readers, so ledger rows
// and chunks correspond one to one. Its first failure (a write, or a hand-off
// cut short by pctx) cancels the stream; deliver sends it on delivered once
// queue is closed. It runs in a goroutine of its own.
func (r *recorder) deliver(pctx context.Context) {
	e := r.e
	var first error
	for p := range r.queue {
		err := <-p.done
		<-r.inFlight
		if first != nil {
			continue
		}
		if err != nil {
			first = &SandboxError{SandboxID: e.sb.id, Op: fmt.Sprintf("record exec %d output", e.step), Err: err}
		} else if err := e.out.publish(pctx, p.c); err != nil {
			first = &ExecConnectionError{SandboxID: e.sb.id, Step: e.step, Err: context.Cause(pctx)}
		}
		if first != nil {
			r.cancel(first)
		}
	}
	r.delivered <- first
}

// record queues the output events for the ledger in groups: while maxInFlight
// groups of this exec are being written, the lines that arrive meanwhile are
// merged into the next group (same stream, up to maxGroup bytes). An idle
// ledger thus records every line on its own and at once, a busy one fewer,
// larger rows. It returns at the end of the stream, when a write cannot be
// queued (emitErr), or when pctx is done (stopped).
func (r *recorder) record(pctx context.Context) {
	defer r.stopLinger()
	for r.more || r.next != nil {
		ev, ok := r.take()
		if !ok {
			return
		}
		select {
		case r.inFlight <- struct{}{}:
		case <-pctx.Done():
			r.stopped = true
			return
		}
		s, data := r.group(pctx, ev)
		if !r.queueGroup(pctx, s, data) {
			return
		}
	}
}

// take returns the next event to record: the one read ahead, else the next one
// from read. It returns false at the end of the stream.
func (r *recorder) take() (opensandbox.Event, bool) {
	if r.next != nil {
		ev := *r.next
		r.next = nil
		return ev, true
	}
	ev, ok := <-r.evc
	if !ok {
		r.more = false
	}
	return ev, ok
}

// group returns ev's stream and bytes with those of the events after it on
// the same stream merged in, up to maxGroup bytes: the events already read,
// and, when no other group is in flight, those arriving within outputLinger.
// An event of the other stream ends the group and is kept in next.
func (r *recorder) group(pctx context.Context, ev opensandbox.Event) (events.Stream, []byte) {
	s := streamOf(ev)
	data := r.bytesOf(nil, ev)
	lingered := false
	for r.more && len(data) < maxGroup {
		nx, ok, got := r.poll()
		if !got {
			if lingered || len(r.inFlight) > 1 {
				break
			}
			lingered = true
			if nx, ok, got = r.await(pctx); !got {
				break
			}
		}
		if !ok {
			r.more = false
			break
		}
		if streamOf(nx) != s {
			r.next = &nx
			break
		}
		data = r.bytesOf(data, nx)
	}
	return s, data
}

// poll returns the next event from read if there is one already (got); ok is
// false when evc is closed.
func (r *recorder) poll() (ev opensandbox.Event, ok, got bool) {
	select {
	case ev, ok = <-r.evc:
		return ev, ok, true
	default:
		return ev, false, false
	}
}

// await is poll waiting up to outputLinger, or until pctx is done.
func (r *recorder) await(pctx context.Context) (ev opensandbox.Event, ok, got bool) {
	if r.linger == nil {
		r.linger = time.NewTimer(outputLinger)
	} else {
		r.linger.Reset(outputLinger)
	}
	select {
	case ev, ok = <-r.evc:
		r.linger.Stop()
		return ev, ok, true
	case <-r.linger.C:
		return ev, false, false
	case <-pctx.Done():
		r.linger.Stop()
		return ev, false, false
	}
}

func (r *recorder) stopLinger() {
	if r.linger != nil {
		r.linger.Stop()
	}
}

func streamOf(ev opensandbox.Event) events.Stream {
	if ev.Kind == opensandbox.EventStderr {
		return events.Stderr
	}
	return events.Stdout
}

// bytesOf appends ev's exact bytes to dst.
func (r *recorder) bytesOf(dst []byte, ev opensandbox.Event) []byte {
	switch {
	case r.lines:
		return appendLine(dst, ev)
	case len(ev.Data) > 0:
		return append(dst, ev.Data...)
	case !hasExact(ev):
		return append(dst, ev.Text...)
	}
	return append(dst, rawBytes(ev)...)
}

// queueGroup queues one group (which holds an inFlight token) for the ledger
// and reports whether recording goes on. When the stream ended right after the
// group, the group is queued together with exec.completed, so both are written
// in one batch (not when output is redacted: the redaction may still hold some
// back).
func (r *recorder) queueGroup(pctx context.Context, s events.Stream, data []byte) bool {
	e := r.e
	if !r.more && r.next == nil && e.red == nil && r.queueLast(pctx, s, data) {
		return false
	}
	if e.red != nil {
		if data = e.red.write(s, data); len(data) == 0 { // held back: may be part of a secret
			<-r.inFlight
			return true
		}
	}
	done, err := e.sb.ledger.emitChained(pctx, e.chain, events.ExecOutput, e.step, outputPayload(e.step, s, data))
	if err != nil {
		<-r.inFlight
		r.emitErr = err
		return false
	}
	r.enqueue(pctx, pendingChunk{c: chunk{stream: s, data: data}, done: done})
	return true
}

// enqueue hands a group, which holds an inFlight token, to deliver, starting
// deliver with the first one. queue has room for every group in flight:
// this never blocks.
func (r *recorder) enqueue(pctx context.Context, p pendingChunk) {
	if !r.delivering {
		r.delivering = true
		go r.deliver(pctx)
	}
	r.queue <- p
}

// queueLast queues the exec's last group (stream s, data) and exec.completed
// together, in one batch, if the stream ended well; finish, not deliver, hands
// the group to the readers, with the end. It reports false, having queued
// nothing, when the stream did not end well: the group is then recorded alone.
func (r *recorder) queueLast(pctx context.Context, s events.Stream, data []byte) bool {
	if !r.ended() {
		return false
	}
	e := r.e
	var done [2]<-chan error
	r.emitErr = e.sb.ledger.writeMany(pctx, e.chain, done[:],
		emission{ev: events.ExecOutput, step: e.step, payload: outputPayload(e.step, s, data)},
		emission{ev: events.ExecCompleted, step: e.step, payload: events.ExecCompletedPayload{Seq: e.step, ExitCode: r.res.ExitCode}})
	<-r.inFlight // not deliver's to deliver
	if r.emitErr == nil {
		r.lastOut, r.completed = done[0], done[1]
		r.last = &chunk{stream: s, data: data}
	}
	return true
}

// ended reads how the stream ended into streamErr and res, and reports whether
// it ended well: with a result and no error.
func (r *recorder) ended() bool {
	r.streamErr = r.stream.Err()
	var ok bool
	if r.res, ok = r.stream.Result(); r.streamErr == nil && !ok {
		r.streamErr = opensandbox.ErrStreamTruncated
	}
	return r.streamErr == nil
}

// finish queues exec.completed unless record did, waits for every write and
// delivery, stops read, and ends the output with the exec's error.
func (r *recorder) finish(ctx, pctx context.Context) {
	if !r.more && !r.stopped && r.emitErr == nil && r.completed == nil {
		r.complete(ctx, pctx)
	}
	close(r.queue)
	var perr error
	if r.delivering {
		perr = <-r.delivered
	}
	if perr == nil && r.lastOut != nil {
		if err := <-r.lastOut; err != nil {
			perr = &SandboxError{SandboxID: r.e.sb.id, Op: fmt.Sprintf("record exec %d output", r.e.step), Err: err}
		}
	}
	// Stop read, if it still runs, and wait for it.
	if perr != nil || r.emitErr != nil {
		r.cancel(errors.Join(perr, r.emitErr))
	}
	for range r.evc {
	}
	if err := r.failure(ctx, pctx, perr); err != nil {
		r.e.fail(err)
		return
	}
	r.end(pctx)
}

// complete queues exec.completed, at the end of the stream, right behind the
// last output group (and the output the redaction held back), so both are
// written together; being in the exec's chain, it is not written if an output
// row failed. It queues nothing if the stream did not end well.
func (r *recorder) complete(ctx, pctx context.Context) {
	if r.emitErr = r.flushRedacted(pctx); r.emitErr != nil || !r.ended() {
		return
	}
	e := r.e
	var done [1]<-chan error
	r.emitErr = e.sb.ledger.writeMany(ctx, e.chain, done[:], emission{ev: events.ExecCompleted, step: e.step,
		payload: events.ExecCompletedPayload{Seq: e.step, ExitCode: r.res.ExitCode}})
	if r.emitErr == nil {
		r.completed = done[0]
	}
}

// failure returns the exec's error when it did not complete: the first
// failed write or delivery (perr), a write that could not be queued, or how
// the stream ended early (wrapping ctx's cause: closed, paused or cancelled by
// the caller). It returns nil when exec.completed was queued.
func (r *recorder) failure(ctx, pctx context.Context, perr error) error {
	e := r.e
	switch {
	case perr != nil:
		return perr
	case r.emitErr != nil:
		return &ExecConnectionError{SandboxID: e.sb.id, Step: e.step, Err: context.Cause(pctx)}
	case r.completed != nil:
		return nil
	}
	streamErr := r.streamErr
	if streamErr == nil { // stopped before the end of the stream
		if streamErr = r.stream.Err(); streamErr == nil {
			streamErr = opensandbox.ErrStreamTruncated
		}
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(streamErr, cause) {
		streamErr = fmt.Errorf("%w: %w", cause, streamErr)
	}
	return &ExecConnectionError{SandboxID: e.sb.id, Step: e.step, Err: streamErr}
}

// end waits for the write of exec.completed, sets the exit code and ends the
// output: with a *SandboxError if the write failed, a *CommandError for a
// strict exec's non-zero exit, nil otherwise. The last group, if finish holds
// it, is handed to the readers with the end, waking them once.
func (r *recorder) end(pctx context.Context) {
	e := r.e
	var err error
	if cerr := <-r.completed; cerr != nil {
		err = &SandboxError{SandboxID: e.sb.id, Op: fmt.Sprintf("record exec %d completed", e.step), Err: cerr}
	} else {
		e.exitCode = r.res.ExitCode
		if e.strict && r.res.ExitCode != 0 {
			err = &CommandError{ExitCode: r.res.ExitCode, Command: e.text, SandboxID: e.sb.id}
		}
	}
	if r.last == nil {
		e.out.finish(err)
	} else if e.out.publishLast(pctx, *r.last, err) != nil {
		e.fail(&ExecConnectionError{SandboxID: e.sb.id, Step: e.step, Err: context.Cause(pctx)})
	}
}
