package alineo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/workers"
	"github.com/alineo-labs/alineo/opensandbox"
)

const (
	// maxInFlight bounds the output groups of one exec being written to the
	// ledger at once; lines arriving meanwhile are merged into the next group.
	maxInFlight = 2
	// maxGroup bounds the bytes merged into one exec.output entry.
	maxGroup = 256 << 10
)

// outputLinger is how long an output group stays open, from its first event,
// for the events after it: if the stream ends meanwhile, the last group and
// exec.completed are written in one transaction; more output of the same
// stream joins the group. Short commands end within it, saving a ledger write
// on the critical path. On an idle machine the exit follows the output by a
// fraction of a millisecond; with a fleet's sandboxes keeping the cores busy,
// by several: a group queued by the linger timer then costs a write of its
// own and the goroutines that write and deliver it, about 45 µs of CPU per
// exec (BenchmarkExecFleet/memory/16, sdk-cpu-us 460 with 1 ms, 415 with
// 5 ms).
// A command that goes on running has its first output recorded and delivered
// up to this long after it came. It is a variable for tests only.
var outputLinger = 5 * time.Millisecond

// openFunc sends an exec's request to execd and returns its stream.
type openFunc func(context.Context, *opensandbox.Execd) (*opensandbox.Stream, error)

// pendingChunk is an output chunk queued for the ledger, not yet published.
type pendingChunk struct {
	c    chunk
	done <-chan error
}

// openGroup is the output group being formed: events of one stream, read and
// not yet queued for the ledger. The recorder's linger timer queues it once
// outputLinger has passed since its first event, if the exec's goroutine,
// blocked reading the stream, has not.
type openGroup struct {
	stream events.Stream
	data   []byte
	first  time.Time // when its first event was read
}

// recorder drives one exec from its request to the end of its output, in
// stages, a method each:
//
//   - open sends the request once exec.started is written;
//   - record reads the stream's output events and gathers them into groups,
//     each queued for the ledger (flush) when an event of the other stream
//     comes, when it is full, when its linger ends, or with exec.completed
//     at the end;
//   - deliver hands each group to the readers once its write is done (it
//     starts with the first group queued: a command whose only output is
//     written with exec.completed has none);
//   - finish records exec.completed, waits for every write and ends the output
//     with the exec's error.
//
// A failed write or delivery cancels the stream's context (cancel), which
// stops the stream and kills the command. The exec's goroutine reads the
// stream itself, so a short command's output goes from the stream to the
// ledger and to its readers without a hand-over between goroutines; deliver
// runs in a goroutine of its own, and the linger timer (lingerEnded) queues
// a group from the timer's goroutine.
type recorder struct {
	e     *Exec
	lines bool // output events are lines of a shell command, not raw bytes

	stream *opensandbox.Stream
	cancel context.CancelCauseFunc // cancels the exec's context, and with it the stream's

	// Made with the first group queued apart from exec.completed (await),
	// under qmu: a short command's only group, written with exec.completed,
	// needs none of them.
	inFlight  chan struct{}     // a token per group queued and not yet delivered
	queue     chan pendingChunk // groups queued for the ledger, in order, to deliver
	delivered chan error        // deliver's first error, once queue is closed

	// mu guards open, which record fills and flush takes, and the linger
	// timer's state.
	mu   sync.Mutex
	open *openGroup
	// timer runs lingerEnded; nil until first armed. While armed is set it
	// will run, and lingerEnded then looks at the open group, whichever it
	// is: a group opened meanwhile needs no timer of its own.
	timer  *time.Timer
	armed  bool
	linger time.Duration // outputLinger, read once

	// qmu serialises flush (the exec's goroutine's and the linger timer's), so
	// groups are queued in the order read; it guards the fields below until
	// finish, which takes it to end them.
	qmu        sync.Mutex
	stopped    bool               // a flush found pctx done: nothing more is queued
	emitErr    error              // a write that could not be queued
	delivering bool               // deliver runs: started with the first group queued
	finished   bool               // finish has run: a linger timer firing late queues nothing
	over       bool               // the stream ended (Next returned false): set by record
	res        opensandbox.Result // valid once ended reported true
	streamErr  error              // how the stream ended, once ended was called
	completed  <-chan error       // the write of exec.completed; nil until queued
	lastOut    <-chan error       // the write of last, queued with exec.completed
	last       *chunk             // the last group, delivered by finish with the end
}

func newRecorder(e *Exec, lines bool) *recorder {
	return &recorder{e: e, lines: lines, linger: outputLinger}
}

// run drives the exec on ex: exec.started was queued when it was called
// (started is the result of its write). ctx is the exec's own: cancel,
// which Close and Pause call too, cancels it, and the recorder calls it
// when a write or a delivery fails.
func (e *Exec) run(ctx context.Context, cancel context.CancelCauseFunc, ex *opensandbox.Execd, started <-chan error, open openFunc, lines bool) {
	newRecorder(e, lines).run(ctx, cancel, ex, started, open)
}

func (r *recorder) run(pctx context.Context, cancel context.CancelCauseFunc, ex *opensandbox.Execd, started <-chan error, open openFunc) {
	r.cancel = cancel
	// The request's context follows pctx while the stream runs, and no
	// longer once record is done: the rest of a finished response is then
	// drained by the stream, which hands its connection back to the pool
	// for the next exec; cancelling it with pctx as the exec ends cut the
	// connection (a new one per exec, under load). Close still cancels an
	// unfinished stream.
	sctx, scancel := context.WithCancelCause(context.WithoutCancel(pctx))
	unlink := context.AfterFunc(pctx, func() { scancel(context.Cause(pctx)) })
	if err := r.openStream(pctx, sctx, ex, started, open); err != nil {
		unlink()
		scancel(nil)
		r.e.fail(err)
		return
	}
	defer r.stream.Close()
	r.record(pctx)
	unlink()
	r.finish(pctx)
}

// openStream sends the request, under sctx, once exec.started is written:
// the intent is in the ledger before the command can run, so a crash never
// leaves a command that ran with no trace of it. If that write fails,
// nothing is sent. It returns the exec's error if it cannot go on, and sets
// stream otherwise.
func (r *recorder) openStream(pctx, sctx context.Context, ex *opensandbox.Execd, started <-chan error, open openFunc) error {
	e := r.e
	if serr := <-started; serr != nil {
		return &SandboxError{SandboxID: e.sb.id, Op: fmt.Sprintf("record exec %d started", e.step), Err: serr}
	}
	stream, err := open(sctx, ex)
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
	// The linger timer is armed now, as the response's headers came, rather
	// than with the first output group. Arming a timer that is the earliest
	// its P holds wakes a thread to watch it; armed with the first output,
	// a short command's timer cost such a wake of its own, for nothing: the
	// group is taken with exec.completed long before the timer fires. Here
	// the thread that brought the headers has just been woken (and a timer
	// already held may spare the stream's drain timer at its end a wake:
	// this does better than no linger timer at all, not measured apart). One
	// `echo hi` at a time on sandboxd: 15.1-15.6 voluntary context
	// switches per exec instead of 16.0-16.5 (`true`, without output:
	// 12.8-13.1 against 13.0-13.4); BenchmarkExecRoundTrip/memory 1.032
	// instead of 1.047 (means of six runs each, alternated). The timer fires
	// no earlier than a group's linger ends (lingerEnded).
	r.mu.Lock()
	r.armLocked(pctx)
	r.mu.Unlock()
	return nil
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

// record reads the stream's output events until the stream ends (over) or a
// group cannot be queued, gathering them into groups of one stream, up to
// maxGroup bytes: an event of the other stream, or a full group, queues the
// open group (flush) and opens the next. An open group lingers for
// outputLinger, then the linger timer queues it; while maxInFlight groups
// are being written, a flush waits, and what the stream brings meanwhile is
// merged into the next group. An idle ledger thus records every line at
// once, a busy one fewer, larger rows.
func (r *recorder) record(pctx context.Context) {
	for r.stream.Next() {
		ev, ok := r.output(r.stream.Event())
		if !ok {
			continue
		}
		s := streamOf(ev)
		r.mu.Lock()
		if g := r.open; g != nil && g.stream == s {
			g.data = r.bytesOf(g.data, ev)
			full := len(g.data) >= maxGroup
			r.mu.Unlock()
			if full && !r.flush(pctx, g) {
				return
			}
			continue
		}
		g := r.open
		r.mu.Unlock()
		if g != nil && !r.flush(pctx, g) {
			return
		}
		g = &openGroup{stream: s, data: r.bytesOf(nil, ev), first: time.Now()}
		r.mu.Lock()
		r.open = g
		if !r.armed {
			r.armLocked(pctx)
		}
		r.mu.Unlock()
	}
	r.qmu.Lock()
	r.over = true
	r.qmu.Unlock()
}

// take closes g, the open group, and returns it, or nil when it is no longer
// open (queued already).
func (r *recorder) take(g *openGroup) *openGroup {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open != g || g == nil {
		return nil
	}
	r.open = nil
	return g
}

// armLocked arms the linger timer to run lingerEnded in a linger. Called
// with mu held.
func (r *recorder) armLocked(pctx context.Context) {
	r.armed = true
	if r.timer == nil {
		r.timer = time.AfterFunc(r.linger, func() { r.lingerEnded(pctx) })
		return
	}
	r.timer.Reset(r.linger)
}

// lingerEnded runs on the linger timer: it queues the open group if its
// linger has ended, and re-arms the timer for the rest of it otherwise (the
// timer was armed before the group opened). With no group open it leaves
// the timer unarmed: the next group arms it.
func (r *recorder) lingerEnded(pctx context.Context) {
	for {
		r.mu.Lock()
		g := r.open
		if g == nil {
			r.armed = false
			r.mu.Unlock()
			return
		}
		if wait := time.Until(g.first.Add(r.linger)); wait > 0 {
			r.timer.Reset(wait)
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		if !r.flush(pctx, g) {
			r.mu.Lock()
			r.armed = false
			r.mu.Unlock()
			return
		}
		// The group opened meanwhile, if any, is looked at now.
	}
}

// stopLinger stops the linger timer: nothing is recorded any more.
func (r *recorder) stopLinger() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.armed = false
}

// flush queues group g for the ledger, if it is still open, and reports
// whether recording goes on. It runs in the exec's goroutine (the next event
// is of the other stream, g is full) or on the linger timer; qmu makes the
// groups queued in the order read.
func (r *recorder) flush(pctx context.Context, g *openGroup) bool {
	r.qmu.Lock()
	defer r.qmu.Unlock()
	if r.stopped || r.emitErr != nil {
		return false
	}
	if r.finished {
		return true
	}
	if g = r.take(g); g == nil {
		return true
	}
	return r.queueGroup(pctx, g.stream, g.data)
}

// await waits for an inFlight token: for fewer than maxInFlight groups in
// flight. It reports false, setting stopped, if pctx ends first. The first
// call makes the channels deliver uses. Called with qmu held.
func (r *recorder) await(pctx context.Context) bool {
	if r.inFlight == nil { // the first group queued apart from exec.completed
		r.inFlight = make(chan struct{}, maxInFlight)
		r.queue = make(chan pendingChunk, maxInFlight)
		r.delivered = make(chan error, 1)
	}
	select {
	case r.inFlight <- struct{}{}:
		return true
	case <-pctx.Done():
		r.stopped = true
		return false
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

// queueGroup queues one group for the ledger, once an inFlight token is
// free, and reports whether recording goes on. Called with qmu held.
func (r *recorder) queueGroup(pctx context.Context, s events.Stream, data []byte) bool {
	e := r.e
	if !r.await(pctx) {
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
		workers.Go(pctx, func() { r.deliver(pctx) })
	}
	r.queue <- p
}

// queueLast queues the exec's last group (stream s, data) and exec.completed
// together, in one batch, the stream having ended well; finish, not deliver,
// hands the group to the readers, with the end. Called with qmu held.
func (r *recorder) queueLast(pctx context.Context, s events.Stream, data []byte) {
	e := r.e
	var buf [4]emission
	var done [4]<-chan error
	ems := e.appendCompletion(append(buf[:0], emission{ev: events.ExecOutput, step: e.step, payload: outputPayload(e.step, s, data)}), r.res)
	r.emitErr = e.sb.ledger.writeMany(pctx, e.chain, done[:len(ems)], ems...)
	if r.emitErr == nil {
		r.lastOut, r.completed = done[0], done[len(ems)-1]
		r.last = &chunk{stream: s, data: data}
	}
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

// finish queues the open group and exec.completed, when the stream ended,
// waits for every write and delivery, and ends the output with the exec's
// error. The last group and exec.completed are queued in one batch, so both
// are written together, when the stream ended well (not when output is
// redacted: the redaction may still hold some back).
func (r *recorder) finish(pctx context.Context) {
	r.stopLinger()
	r.qmu.Lock()
	r.finished = true
	g := r.take(r.openGroup())
	if r.over && !r.stopped && r.emitErr == nil {
		if g != nil && r.e.red == nil && r.ended() {
			r.queueLast(pctx, g.stream, g.data)
		} else if g == nil || r.queueGroup(pctx, g.stream, g.data) {
			r.complete(pctx)
		}
	}
	r.qmu.Unlock()
	if r.queue != nil { // made before finish took qmu, if at all
		close(r.queue)
	}
	var perr error
	if r.delivering {
		perr = <-r.delivered
	}
	if perr == nil && r.lastOut != nil {
		if err := <-r.lastOut; err != nil {
			perr = &SandboxError{SandboxID: r.e.sb.id, Op: fmt.Sprintf("record exec %d output", r.e.step), Err: err}
		}
	}
	if perr != nil || r.emitErr != nil {
		r.cancel(errors.Join(perr, r.emitErr))
	}
	if err := r.failure(pctx, perr); err != nil {
		r.e.fail(err)
		return
	}
	r.end(pctx)
}

// openGroup returns the open group, nil when there is none.
func (r *recorder) openGroup() *openGroup {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open
}

// complete queues exec.completed, at the end of the stream, right behind the
// last output group (and the output the redaction held back), so both are
// written together; being in the exec's chain, it is not written if an output
// row failed. It queues nothing if the stream did not end well. Called with
// qmu held.
func (r *recorder) complete(pctx context.Context) {
	if r.emitErr = r.flushRedacted(pctx); r.emitErr != nil || !r.ended() {
		return
	}
	e := r.e
	var buf [3]emission
	var done [3]<-chan error
	ems := e.appendCompletion(buf[:0], r.res)
	r.emitErr = e.sb.ledger.writeMany(pctx, e.chain, done[:len(ems)], ems...)
	if r.emitErr == nil {
		r.completed = done[len(ems)-1]
	}
}

// failure returns the exec's error when it did not complete: the first
// failed write or delivery (perr), a write that could not be queued, or how
// the stream ended early (wrapping pctx's cause: closed, paused or cancelled by
// the caller). It returns nil when exec.completed was queued.
func (r *recorder) failure(pctx context.Context, perr error) error {
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
	if cause := context.Cause(pctx); cause != nil && !errors.Is(streamErr, cause) {
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
		cr, _ := e.codeResultOf(r.res)
		err = e.settle(r.res.ExitCode, cr)
	}
	if r.last == nil {
		e.out.finish(err)
	} else if e.out.publishLast(pctx, *r.last, err) != nil {
		e.fail(&ExecConnectionError{SandboxID: e.sb.id, Step: e.step, Err: context.Cause(pctx)})
	}
}
