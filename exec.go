package alineo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"
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
	// outputLinger is how long the recorder waits, with no other group of the
	// exec in flight, for the event after a group before writing the group: if
	// the stream ends meanwhile, the last group and exec.completed are written
	// in one transaction; if more output of the same stream comes, it joins the
	// group. Short commands end within it (the exit follows their output by a
	// fraction of a millisecond), saving a ledger write on the critical path.
	outputLinger = time.Millisecond
)

// ExecResult is the whole result of a command.
type ExecResult struct {
	Stdout   string
	Stderr   string
	ExitCode int
}

// Exec is one running command (or code run), returned by Sandbox.Exec and
// Sandbox.ExecCode. The command starts when Exec is called and runs to its end
// whether or not anyone reads it; every output chunk is in the ledger before any
// reader sees it. It can be read in three shapes, any number of times and by
// several goroutines at once, each reader from the first chunk: Wait for the whole
// result, Pipe to stream stdout into a writer, Stdout and Stderr to range over
// chunks.
//
// The error every shape ends with is the exec's error: nil on success;
// *CommandError when the exec is strict and the command exited non-zero;
// *ExecConnectionError when the stream to execd failed; *SandboxError when the
// ledger refused a write or execd refused the command; ErrClosed or ErrPaused;
// *OptionError for bad options.
type Exec struct {
	sb     *Sandbox
	chain  *chain // links the exec's ledger rows
	step   int
	kind   events.ExecKind
	text   string // the command or code as recorded: bound credential values redacted
	strict bool
	out    *output
	red    *outputRedaction // redacts bound credential values; nil for none

	// exitCode is set before out is finished; valid once it is (-1 if the exec
	// never completed).
	exitCode int

	waitOnce sync.Once
	res      ExecResult
	waitErr  error
}

func newExec(sb *Sandbox, step int, kind events.ExecKind, text string, strict bool) *Exec {
	e := &Exec{sb: sb, chain: &chain{}, step: step, kind: kind, text: text, strict: strict, exitCode: -1,
		red: sb.newOutputRedaction()}
	e.out = newOutput(outputWindow, e.refetch)
	return e
}

// Step returns the exec's step index: its call number on the sandbox handle.
func (e *Exec) Step() int { return e.step }

// Wait waits for the command to end and returns its whole result. The result is
// filled even when the error is a *CommandError (which then also carries the
// output). Wait may be called any number of times.
func (e *Exec) Wait() (ExecResult, error) {
	e.waitOnce.Do(func() {
		var stdout, stderr bytes.Buffer
		err := e.out.each(func(c chunk) bool {
			if c.stream == events.Stderr {
				stderr.Write(c.data)
			} else {
				stdout.Write(c.data)
			}
			return true
		})
		e.res = ExecResult{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: e.exitCode}
		var ce *CommandError
		if errors.As(err, &ce) {
			c := *ce
			c.Stdout, c.Stderr = e.res.Stdout, e.res.Stderr
			err = &c
		}
		e.waitErr = err
	})
	return e.res, e.waitErr
}

// ExitCode waits for the command to end and returns its exit code, or -1 if it
// did not complete (connection failure, closed sandbox).
func (e *Exec) ExitCode() int {
	_ = e.out.result()
	return e.exitCode
}

// Pipe writes the command's stdout to w, chunk by chunk as it is recorded, and
// returns when the command ends, with the exec's error, or with w's first write
// error (the command then keeps running and is still recorded).
func (e *Exec) Pipe(w io.Writer) error {
	var werr error
	err := e.out.each(func(c chunk) bool {
		if c.stream != events.Stdout {
			return true
		}
		if _, werr = w.Write(c.data); werr != nil {
			return false
		}
		return true
	})
	if werr != nil {
		return fmt.Errorf("pipe exec %d output: %w", e.step, werr)
	}
	return err
}

// Stdout returns the command's stdout chunks, each once recorded in the ledger,
// from the first. The loop ends when the command ends; if the exec failed, the
// last pair carries its error and a nil chunk. Chunks are shared between readers
// and must not be modified. Breaking out of the loop leaves the command running.
func (e *Exec) Stdout() iter.Seq2[[]byte, error] { return e.stream(events.Stdout) }

// Stderr is Stdout for the command's stderr.
func (e *Exec) Stderr() iter.Seq2[[]byte, error] { return e.stream(events.Stderr) }

func (e *Exec) stream(s events.Stream) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		stopped := false
		err := e.out.each(func(c chunk) bool {
			if c.stream != s {
				return true
			}
			if !yield(c.data, nil) {
				stopped = true
				return false
			}
			return true
		})
		if err != nil && !stopped {
			yield(nil, err)
		}
	}
}

// refetch reads output chunks [from, to) of this exec back from the ledger.
func (e *Exec) refetch(ctx context.Context, from, to int) ([]chunk, error) {
	es, err := e.sb.c.store.ReadAll(ctx, e.sb.name, e.sb.id)
	if err != nil {
		return nil, fmt.Errorf("read exec %d output back from the ledger: %w", e.step, err)
	}
	var out []chunk
	i := 0
	for _, en := range es {
		if en.Event != events.ExecOutput || en.StepIndex != e.step {
			continue
		}
		if i >= from && i < to {
			var p events.ExecOutputPayload
			if err := en.Decode(&p); err != nil {
				return nil, fmt.Errorf("read exec %d output back from the ledger: %w", e.step, err)
			}
			out = append(out, chunk{stream: p.Type, data: p.Bytes()})
		}
		i++
	}
	return out, nil
}

// fail ends an exec that could not run.
func (e *Exec) fail(err error) { e.out.finish(err) }

// pendingChunk is an output chunk queued for the ledger, not yet published.
type pendingChunk struct {
	c    chunk
	done <-chan error
}

// run drives the exec: it opens the stream while exec.started is written,
// records every output group before publishing it, records exec.completed and
// ends the output with the exec's error. ctx is cancelled by Close and Pause.
func (e *Exec) run(ctx context.Context, started <-chan error, open func(context.Context, *opensandbox.Execd) (*opensandbox.Stream, error), lines bool) {
	sb := e.sb
	ex, err := sb.execd()
	if err != nil {
		e.fail(err)
		return
	}
	// A failed write or publish cancels pctx, which stops the stream.
	pctx, pcancel := context.WithCancelCause(ctx)
	defer pcancel(nil)
	// exec.started was queued when Exec was called and is written while the
	// request goes out; nothing of the stream is recorded or delivered before
	// it is written, and if it fails the stream is cancelled (which kills the
	// command) and the exec fails.
	stream, err := open(pctx, ex)
	if serr := <-started; serr != nil {
		if err == nil {
			stream.Close()
		}
		e.fail(&SandboxError{SandboxID: sb.id, Op: fmt.Sprintf("record exec %d started", e.step), Err: serr})
		return
	}
	if err != nil {
		var apiErr *opensandbox.APIError
		if errors.As(err, &apiErr) || errors.Is(err, opensandbox.ErrInvalidRequest) {
			e.fail(&SandboxError{SandboxID: sb.id, Op: fmt.Sprintf("exec %d", e.step), Err: err})
		} else {
			e.fail(&ExecConnectionError{SandboxID: sb.id, Step: e.step, Err: err})
		}
		return
	}
	defer stream.Close()

	// The stream reader goroutine hands output events to this goroutine, the
	// recorder, which queues them for the ledger in groups: while maxInFlight
	// groups of this exec are being written, the lines that arrive meanwhile
	// are merged into the next group (same stream, up to maxGroup bytes). An
	// idle ledger thus records every line on its own and at once, a busy one
	// fewer, larger rows. The publisher hands each group to the readers once
	// its write is done; a group is one chunk for the readers, so ledger rows
	// and chunks correspond one to one.
	evc := make(chan opensandbox.Event, maxUnpublished)
	go func() {
		defer close(evc)
		for stream.Next() {
			ev := stream.Event()
			if ev.Kind != opensandbox.EventStdout && ev.Kind != opensandbox.EventStderr {
				continue
			}
			select {
			case evc <- ev:
			case <-pctx.Done():
				return
			}
		}
	}()

	inFlight := make(chan struct{}, maxInFlight)
	queue := make(chan pendingChunk, maxInFlight)
	published := make(chan error, 1)
	go func() {
		var first error
		for p := range queue {
			err := <-p.done
			<-inFlight
			if first != nil {
				continue
			}
			if err != nil {
				first = &SandboxError{SandboxID: sb.id, Op: fmt.Sprintf("record exec %d output", e.step), Err: err}
			} else if err := e.out.publish(pctx, p.c); err != nil {
				first = &ExecConnectionError{SandboxID: sb.id, Step: e.step, Err: context.Cause(pctx)}
			}
			if first != nil {
				pcancel(first)
			}
		}
		published <- first
	}()

	streamOf := func(ev opensandbox.Event) events.Stream {
		if ev.Kind == opensandbox.EventStderr {
			return events.Stderr
		}
		return events.Stdout
	}
	bytesOf := func(dst []byte, ev opensandbox.Event) []byte {
		if lines {
			return appendLine(dst, ev)
		}
		return append(dst, rawBytes(ev)...)
	}
	var emitErr error
	var completed <-chan error
	var res opensandbox.Result
	var streamErr error
	var linger *time.Timer
	var lastOut <-chan error    // the write of last, queued with exec.completed
	var last *chunk             // the last group, published by this goroutine with the end
	var next *opensandbox.Event // read ahead while grouping, not yet recorded
	more := true                // evc is open
	stopped := false            // left before the end of the stream
record:
	for more || next != nil {
		var ev opensandbox.Event
		if next != nil {
			ev, next = *next, nil
		} else {
			var ok bool
			if ev, ok = <-evc; !ok {
				more = false
				break
			}
		}
		select {
		case inFlight <- struct{}{}:
		case <-pctx.Done():
			stopped = true
			break record
		}
		s := streamOf(ev)
		data := bytesOf(nil, ev)
		lingered := false
	group:
		for more && len(data) < maxGroup {
			var nx opensandbox.Event
			var ok bool
			select {
			case nx, ok = <-evc:
			default:
				if lingered || len(inFlight) > 1 {
					break group
				}
				lingered = true
				if linger == nil {
					linger = time.NewTimer(outputLinger)
					defer linger.Stop()
				} else {
					linger.Reset(outputLinger)
				}
				select {
				case nx, ok = <-evc:
					linger.Stop()
				case <-linger.C:
					break group
				case <-pctx.Done():
					linger.Stop()
					break group
				}
			}
			if !ok {
				more = false
				break group
			}
			if streamOf(nx) != s {
				next = &nx
				break group
			}
			data = bytesOf(data, nx)
		}
		if !more && next == nil && e.red == nil {
			// The stream ended right after this group: write it together
			// with exec.completed, if the stream ended well.
			if lastOut, completed, emitErr = e.emitLast(pctx, stream, &res, &streamErr, s, data); completed != nil || emitErr != nil {
				<-inFlight // published by this goroutine, at the end
				if emitErr == nil {
					last = &chunk{stream: s, data: data}
				}
				break
			}
		}
		if e.red != nil {
			if data = e.red.write(s, data); len(data) == 0 { // held back: may be part of a secret
				<-inFlight
				continue
			}
		}
		done, err := sb.ledger.emitChained(pctx, e.chain, events.ExecOutput, e.step, outputPayload(e.step, s, data))
		if err != nil {
			<-inFlight
			emitErr = err
			break
		}
		// queue has room for every group in flight: this never blocks.
		queue <- pendingChunk{c: chunk{stream: s, data: data}, done: done}
	}
	// When the stream ended (evc is closed), exec.completed is queued right
	// behind the last output group, so both are written together; being in
	// the exec's chain, it is not written if an output row failed.
	if !more && !stopped && emitErr == nil && completed == nil {
		emitErr = e.flushRedacted(pctx, inFlight, queue)
	}
	if !more && !stopped && emitErr == nil && completed == nil {
		streamErr = stream.Err()
		var ok bool
		if res, ok = stream.Result(); streamErr == nil && !ok {
			streamErr = opensandbox.ErrStreamTruncated
		}
		if streamErr == nil {
			completed, emitErr = sb.ledger.emitChained(ctx, e.chain, events.ExecCompleted, e.step,
				events.ExecCompletedPayload{Seq: e.step, ExitCode: res.ExitCode})
		}
	}
	close(queue)
	perr := <-published
	if perr == nil && lastOut != nil {
		if err := <-lastOut; err != nil {
			perr = &SandboxError{SandboxID: sb.id, Op: fmt.Sprintf("record exec %d output", e.step), Err: err}
		}
	}
	// Stop the stream reader, if it still runs, and wait for it.
	if perr != nil || emitErr != nil {
		pcancel(errors.Join(perr, emitErr))
	}
	for range evc {
	}
	if perr != nil {
		e.fail(perr)
		return
	}
	if emitErr != nil {
		e.fail(&ExecConnectionError{SandboxID: sb.id, Step: e.step, Err: context.Cause(pctx)})
		return
	}
	if completed == nil && streamErr == nil { // stopped before the end of the stream
		streamErr = stream.Err()
		if streamErr == nil {
			streamErr = opensandbox.ErrStreamTruncated
		}
	}
	if streamErr != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(streamErr, cause) {
			streamErr = fmt.Errorf("%w: %w", cause, streamErr) // closed, paused or cancelled by the caller
		}
		e.fail(&ExecConnectionError{SandboxID: sb.id, Step: e.step, Err: streamErr})
		return
	}
	// end publishes the last group, if it is still held here (it is
	// recorded), and ends the output with err, waking the readers once.
	end := func(err error) {
		if last == nil {
			e.out.finish(err)
			return
		}
		if e.out.publishLast(pctx, *last, err) != nil {
			e.fail(&ExecConnectionError{SandboxID: sb.id, Step: e.step, Err: context.Cause(pctx)})
		}
	}
	if err := <-completed; err != nil {
		end(&SandboxError{SandboxID: sb.id, Op: fmt.Sprintf("record exec %d completed", e.step), Err: err})
		return
	}
	e.exitCode = res.ExitCode
	if e.strict && res.ExitCode != 0 {
		end(&CommandError{ExitCode: res.ExitCode, Command: e.text, SandboxID: sb.id})
		return
	}
	end(nil)
}

// emitLast queues the exec's last output group (stream s, data) and
// exec.completed together, once the stream has ended after it, so they are
// written in one batch. It returns the results of both writes; nil channels and
// a nil error when the stream did not end well (the stream's error is then in
// *streamErr, and the caller records the group alone). Its error is the
// ledger's (ctx ended while queueing).
func (e *Exec) emitLast(ctx context.Context, stream *opensandbox.Stream, res *opensandbox.Result, streamErr *error,
	s events.Stream, data []byte) (out, completed <-chan error, err error) {
	*streamErr = stream.Err()
	var ok bool
	if *res, ok = stream.Result(); *streamErr == nil && !ok {
		*streamErr = opensandbox.ErrStreamTruncated
	}
	if *streamErr != nil {
		return nil, nil, nil
	}
	var done [2]<-chan error
	err = e.sb.ledger.emitMany(ctx, e.chain, done[:],
		emission{ev: events.ExecOutput, step: e.step, payload: outputPayload(e.step, s, data)},
		emission{ev: events.ExecCompleted, step: e.step, payload: events.ExecCompletedPayload{Seq: e.step, ExitCode: res.ExitCode}})
	if err != nil {
		return nil, nil, err
	}
	return done[0], done[1], nil
}
