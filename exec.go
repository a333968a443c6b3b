package alineo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"sync"

	"github.com/alineo-labs/alineo/events"
)

// ExecResult is the whole result of a command.
type ExecResult struct {
	Stdout   string
	Stderr   string
	ExitCode int
	// Value is the value of code's last expression, as its interpreter
	// renders it (execd's result event: Python's repr, Node's
	// util.inspect); "" when there is none (a command, a last statement
	// that is not an expression, None or undefined).
	Value string
	// Exception is the exception code raised, nil for none; its traceback
	// is also at the end of Stderr.
	Exception *Exception
}

// Exec is one running command (or code run), returned by Sandbox.Exec and
// Sandbox.ExecCode. The command starts when Exec is called and runs to its end
// whether or not anyone reads it; every output chunk is in the ledger before any
// reader sees it. It can be read in three shapes, any number of times and by
// several goroutines at once, each reader from the first chunk: Wait for the whole
// result, Pipe to stream stdout (and stderr) to writers, Stdout and Stderr to range over
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

	// exitCode and code are set before out is finished; valid once it is
	// (exitCode is -1 if the exec never completed).
	exitCode int
	code     codeResult

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
		var stdout, stderr strings.Builder
		err := e.out.each(func(c chunk) bool {
			if c.stream == events.Stderr {
				stderr.Write(c.data)
			} else {
				stdout.Write(c.data)
			}
			return true
		})
		e.res = ExecResult{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: e.exitCode,
			Value: e.code.value, Exception: e.code.exception}
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
// returns when the command ends, with the exec's error, or with the first
// write error (the command then keeps running and is still recorded). Its
// stderr is dropped unless stderr writers are given: Pipe(os.Stdout,
// os.Stderr) streams both, and Pipe(w, w) interleaves them in w in the order
// they were recorded. Several stderr writers all receive it.
func (e *Exec) Pipe(w io.Writer, stderr ...io.Writer) error {
	var errw io.Writer
	switch len(stderr) {
	case 0:
	case 1:
		errw = stderr[0]
	default:
		errw = io.MultiWriter(stderr...)
	}
	var werr error
	err := e.out.each(func(c chunk) bool {
		dst := w
		if c.stream != events.Stdout {
			if dst = errw; dst == nil {
				return true
			}
		}
		if _, werr = dst.Write(c.data); werr != nil {
			return false
		}
		return true
	})
	if werr != nil {
		return fmt.Errorf("alineo: pipe exec %d output: %w", e.step, werr)
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
	return e.readBack(ctx, from, to, false)
}

// readBack reads output chunks [from, to) of this exec back from the ledger.
// With skipStdin the stdin chunks an interactive exec records are not
// counted (they are not output), so every chunk is decoded; otherwise only
// those in range are.
func (e *Exec) readBack(ctx context.Context, from, to int, skipStdin bool) ([]chunk, error) {
	es, err := e.sb.c.store.ReadAll(ctx, e.sb.name, e.sb.id)
	if err != nil {
		return nil, fmt.Errorf("read exec %d output back from the ledger: %w", e.step, err)
	}
	var out []chunk
	i := 0
	for _, en := range es {
		if !en.Event.Is(events.ExecOutput) || en.StepIndex != e.step {
			continue
		}
		in := i >= from && i < to
		if !in && !skipStdin {
			i++
			continue
		}
		var p events.ExecOutputPayload
		if err := en.Decode(&p); err != nil {
			return nil, fmt.Errorf("read exec %d output back from the ledger: %w", e.step, err)
		}
		if skipStdin && p.Type == events.Stdin {
			continue
		}
		if in {
			out = append(out, chunk{stream: p.Type, data: p.Bytes()})
		}
		i++
	}
	return out, nil
}

// fail ends an exec that could not run.
func (e *Exec) fail(err error) { e.out.finish(err) }
