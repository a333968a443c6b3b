package alineo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/redact"
	"go.opentelemetry.io/otel/trace"
)

const (
	// firstOutputWait bounds how long a re-run interactive exec waits for
	// the terminal's first output before it sends the recorded stdin (input
	// sent before the shell reads it may be lost), as the TypeScript SDK does.
	firstOutputWait = 3 * time.Second
	// replayStdinGap separates the recorded stdin chunks a re-run sends, so
	// that the shell takes each as it came (the TypeScript SDK's 50 ms).
	replayStdinGap = 50 * time.Millisecond
	// ptyCleanupTimeout bounds the DELETE /pty of an ended interactive exec.
	ptyCleanupTimeout = 5 * time.Second
)

// InteractiveOptions configure one ExecInteractive.
type InteractiveOptions struct {
	// Cwd is the working directory; empty for execd's default.
	Cwd string
	// Env is exported before the command runs; it is recorded (values bound as
	// credentials redacted).
	Env map[string]string
	// Strict (default true) makes a non-zero exit an error: *CommandError.
	Strict *bool
}

func (o InteractiveOptions) strict() bool { return o.Strict == nil || *o.Strict }

// Interactive is a command running on a terminal (execd's PTY), returned by
// Sandbox.ExecInteractive. It is an *Exec, read like one (Wait, Pipe, Stdout;
// a terminal merges stdout and stderr, so Stderr is empty), plus input:
// Write sends stdin, Resize and Signal act on the terminal, Close ends it.
// Every stdin chunk is recorded (exec.output of type "stdin") before it is
// sent, and every output chunk before a reader sees it.
//
// On Client.Resume, an interactive exec that completed before the checkpoint
// is replayed like any exec (Write then does nothing); one that had started
// and not completed is started again, in its recorded cwd and env, and its
// recorded stdin is sent again before any new Write: snapshots hold files,
// not processes, so this is how a shell's state (cd, export) comes back.
type Interactive struct {
	*Exec
	cmd  string // what runs on the terminal: the command with its exports
	cwd  string
	live bool // runs on a terminal now (not replayed, not failed at the call)

	// replay is the stdin recorded before the checkpoint, sent again first.
	replay [][]byte

	ready    chan struct{} // closed once the terminal is attached and replay sent, or setup failed
	pty      *opensandbox.PTY
	execd    *opensandbox.Execd
	session  string
	setupErr error // why there is no terminal; valid once ready is closed

	firstOut     chan struct{} // closed at the first output chunk
	firstOutOnce sync.Once

	// wmu orders stdin: each chunk is recorded and sent before the next.
	wmu     sync.Mutex
	stdinRd *redact.Stream // redacts recorded stdin; nil when nothing is bound

	mu      sync.Mutex
	ended   bool // the terminal's process exited or the exec failed
	closing bool // Close was called: the session is being deleted
}

// ExecInteractive runs cmd on a terminal in the sandbox (execd's PTY, through
// execd's shell: "bash" gives an interactive shell) and returns at once with
// its handle; the command starts now. Like Exec it takes the handle's next
// step index and queues exec.started (with interactive, cwd and env) before it
// returns. opts holds at most one InteractiveOptions.
//
// Cancelling ctx ends the exec (an *ExecConnectionError wrapping ctx's
// error); what was recorded stays, and no exec.completed is written, so a
// Resume from a later checkpoint starts it again.
func (s *Sandbox) ExecInteractive(ctx context.Context, cmd string, opts ...InteractiveOptions) *Interactive {
	o, bad := oneOption("InteractiveOptions", opts)
	switch {
	case bad != nil:
	case cmd == "":
		bad = &OptionError{Field: "cmd", Reason: "is empty"}
	case strings.IndexByte(cmd, 0) >= 0:
		bad = &OptionError{Field: "cmd", Reason: "holds a NUL byte"}
	}
	for k := range o.Env {
		if !validEnvName(k) {
			bad = &OptionError{Field: "Env", Reason: fmt.Sprintf("%q is not a variable name", k)}
		}
	}
	text := s.redactText(cmd)
	env := make(map[string]string, len(o.Env))
	for k, v := range o.Env {
		env[k] = s.redactText(v)
	}
	if len(env) == 0 {
		env = nil
	}
	payload := events.ExecStartedPayload{Kind: events.KindCommand, Cmd: text, Interactive: true, Cwd: o.Cwd, Env: env,
		Fingerprint: events.Fingerprint(events.KindCommand, text)}
	return s.startInteractive(ctx, o, bad, payload, exportLine(o.Env)+cmd)
}

// startInteractive is Sandbox.start for an interactive exec.
func (s *Sandbox) startInteractive(ctx context.Context, o InteractiveOptions, bad error, payload events.ExecStartedPayload, wire string) *Interactive {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.step++
	e := newExec(s, s.step, events.KindCommand, payload.Cmd, o.strict())
	it := &Interactive{Exec: e, cmd: wire, cwd: o.Cwd, ready: make(chan struct{}), firstOut: make(chan struct{})}
	e.out = newOutput(outputWindow, it.refetch)
	var span trace.Span // sandbox.exec, once the call is valid
	armed := false      // the span ends with the output (endSpanOnFinish)
	fail := func(err error) *Interactive {
		it.setupErr = err
		it.ended = true
		close(it.ready)
		e.fail(err)
		if span != nil && !armed {
			e.endSpan(span, false)
		}
		return it
	}
	switch {
	case s.closed:
		return fail(ErrClosed)
	case s.paused:
		return fail(ErrPaused)
	case bad != nil:
		return fail(bad)
	}
	ctx, span = s.execSpan(ctx, e)
	span.SetAttributes(attrInteractive.Bool(true))
	if rec, ok := s.replay.peek(e.step); ok && !recordedInteractive(rec) {
		s.replay.take(e.step)
		return fail(&ReplayDivergedError{SandboxID: s.id, Step: e.step, Recorded: recordedText(rec), Got: payload.Cmd})
	}
	if s.replayed(e, payload.Fingerprint) {
		it.setupErr = ErrExecDone
		it.ended = true
		close(it.ready)
		e.endSpan(span, true)
		return it
	}
	if p, ok := s.replay.takePending(e.step); ok {
		if p.fingerprint != payload.Fingerprint {
			return fail(&ReplayDivergedError{SandboxID: s.id, Step: e.step, Recorded: p.text, Got: payload.Cmd})
		}
		// Run as recorded: the recorded cwd and env (the call's are the same
		// unless values were redacted, which the recorded ones are).
		it.replay = p.stdin
	}
	if r := s.creds.redactor(); !r.Empty() {
		it.stdinRd = r.NewStream()
	}
	payload.Seq = e.step
	e.endSpanOnFinish(span)
	armed = true
	started, err := s.ledger.emitChained(ctx, e.chain, events.ExecStarted, e.step, payload)
	if err != nil {
		return fail(&SandboxError{SandboxID: s.id, Op: fmt.Sprintf("record exec %d started", e.step), Err: err})
	}
	it.live = true
	ectx, cancel := context.WithCancelCause(ctx)
	s.inflight[e] = cancel
	s.running.Add(1)
	go func() {
		defer func() {
			s.mu.Lock()
			delete(s.inflight, e)
			s.mu.Unlock()
			cancel(nil)
			s.running.Done()
		}()
		it.run(ectx, started)
	}()
	return it
}

// run attaches the terminal, sends the recorded stdin of a re-run, records
// the output until the process exits, and ends the exec.
func (it *Interactive) run(ctx context.Context, started <-chan error) {
	e := it.Exec
	err := it.setup(ctx, started)
	if err != nil {
		it.setupErr = err
		it.markEnded()
		close(it.ready)
		e.fail(err)
		it.cleanup(ctx)
		return
	}
	out := make(chan error, 1)
	go func() { out <- it.record(ctx) }()
	if err := it.sendReplay(ctx); err != nil {
		it.setupErr = err
		close(it.ready)
		_ = it.pty.Close() // ends record
		<-out
		it.markEnded()
		e.fail(err)
		it.cleanup(ctx)
		return
	}
	close(it.ready)
	err = <-out
	it.markEnded()
	it.cleanup(ctx)
	if err != nil {
		e.fail(err)
	}
}

func (it *Interactive) markEnded() {
	it.mu.Lock()
	it.ended = true
	it.mu.Unlock()
}

// setup creates the PTY session and attaches to it, once exec.started is written.
func (it *Interactive) setup(ctx context.Context, started <-chan error) error {
	e := it.Exec
	sb := e.sb
	if serr := <-started; serr != nil {
		return &SandboxError{SandboxID: sb.id, Op: fmt.Sprintf("record exec %d started", e.step), Err: serr}
	}
	ex, err := sb.execd()
	if err != nil {
		return err
	}
	id, err := ex.CreatePTY(ctx, opensandbox.PTYRequest{Cwd: it.cwd, Command: it.cmd})
	if err != nil {
		return it.connErr(ctx, err)
	}
	it.execd, it.session = ex, id
	p, err := ex.AttachPTY(ctx, id, opensandbox.PTYAttachOptions{})
	if err != nil {
		return it.connErr(ctx, err)
	}
	it.pty = p
	return nil
}

// connErr classifies a failed PTY call as execd's refusal (*SandboxError) or a
// connection failure.
func (it *Interactive) connErr(ctx context.Context, err error) error {
	e := it.Exec
	var apiErr *opensandbox.APIError
	var ptyErr *opensandbox.PTYError
	if errors.As(err, &apiErr) || errors.As(err, &ptyErr) || errors.Is(err, opensandbox.ErrInvalidRequest) {
		return &SandboxError{SandboxID: e.sb.id, Op: fmt.Sprintf("exec %d", e.step), Err: err}
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		err = fmt.Errorf("%w: %w", cause, err)
	}
	return &ExecConnectionError{SandboxID: e.sb.id, Step: e.step, Err: err}
}

// sendReplay sends the recorded stdin of a re-run, once the terminal printed
// something (or after firstOutputWait), each chunk recorded again first.
func (it *Interactive) sendReplay(ctx context.Context) error {
	if len(it.replay) == 0 {
		return nil
	}
	t := time.NewTimer(firstOutputWait)
	defer t.Stop()
	select {
	case <-it.firstOut:
	case <-t.C:
	case <-ctx.Done():
		return it.connErr(ctx, context.Cause(ctx))
	}
	for i, b := range it.replay {
		if i > 0 {
			if err := sleepCtx(ctx, replayStdinGap); err != nil {
				return it.connErr(ctx, err)
			}
		}
		if err := it.send(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// record records the terminal's output, each chunk before the readers get it,
// until the exit event, then records exec.completed and ends the output. It
// returns the exec's error when it did not complete.
func (it *Interactive) record(ctx context.Context) error {
	e := it.Exec
	red := e.red
	for {
		ev, err := it.pty.Next(ctx)
		if err != nil {
			it.mu.Lock()
			closing := it.closing
			it.mu.Unlock()
			if closing { // Close deleted the session: it ended, killed
				return it.complete(ctx, -1)
			}
			return it.connErr(ctx, err)
		}
		switch ev.Kind {
		case opensandbox.PTYStdout, opensandbox.PTYStderr, opensandbox.PTYReplay:
		case opensandbox.PTYExit:
			return it.complete(ctx, ev.ExitCode)
		default:
			continue
		}
		it.firstOutOnce.Do(func() { close(it.firstOut) })
		data := red.write(events.Stdout, ev.Data)
		if len(data) == 0 {
			continue
		}
		if err := it.emitOutput(ctx, events.Stdout, data, true); err != nil {
			return err
		}
	}
}

// emitOutput records one chunk of stream s and, when publish, hands it to the
// readers once written.
func (it *Interactive) emitOutput(ctx context.Context, s events.Stream, data []byte, publish bool) error {
	e := it.Exec
	done, err := e.sb.ledger.emitChained(ctx, e.chain, events.ExecOutput, e.step, outputPayload(e.step, s, data))
	if err != nil { // ctx ended (a Close, a cancel) before the chunk was queued
		return it.connErr(ctx, err)
	}
	if err := <-done; err != nil {
		return &SandboxError{SandboxID: e.sb.id, Op: fmt.Sprintf("record exec %d %s", e.step, s), Err: err}
	}
	if publish {
		if err := e.out.publish(ctx, chunk{stream: s, data: data}); err != nil {
			return &ExecConnectionError{SandboxID: e.sb.id, Step: e.step, Err: context.Cause(ctx)}
		}
	}
	return nil
}

// complete records what the redaction held back and exec.completed, and ends
// the output (a *CommandError for a strict exec's non-zero exit).
func (it *Interactive) complete(ctx context.Context, code int) error {
	e := it.Exec
	for _, c := range e.red.flush() {
		if err := it.emitOutput(ctx, c.stream, c.data, true); err != nil {
			return err
		}
	}
	it.wmu.Lock() // no stdin is recorded after exec.completed
	defer it.wmu.Unlock()
	if it.stdinRd != nil {
		if b := it.stdinRd.Flush(); len(b) > 0 {
			if err := it.emitOutput(ctx, events.Stdin, b, false); err != nil {
				return err
			}
		}
	}
	it.markEnded()
	wctx := context.WithoutCancel(ctx)
	if err := e.sb.ledger.write(wctx, events.ExecCompleted, e.step, events.ExecCompletedPayload{Seq: e.step, ExitCode: code}); err != nil {
		return &SandboxError{SandboxID: e.sb.id, Op: fmt.Sprintf("record exec %d completed", e.step), Err: err}
	}
	e.exitCode = code
	if e.strict && code != 0 {
		e.out.finish(&CommandError{ExitCode: code, Command: e.text, SandboxID: e.sb.id})
	} else {
		e.out.finish(nil)
	}
	return nil
}

// cleanup detaches and deletes the PTY session (best effort: the sandbox may be gone).
func (it *Interactive) cleanup(ctx context.Context) {
	if it.pty != nil {
		_ = it.pty.Close()
	}
	if it.execd == nil || it.session == "" {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ptyCleanupTimeout)
	defer cancel()
	_ = it.execd.DeletePTY(dctx, it.session)
}

// Write records p as stdin and sends it to the terminal, after the recorded
// stdin of a re-run. It waits for the terminal to be attached. A replayed exec
// takes and drops p (its recorded run had its input); a live one that has
// ended returns ErrExecDone, one that could not start its error. Safe for
// concurrent use; writes are recorded and sent in the order they take turns.
func (it *Interactive) Write(p []byte) (int, error) {
	<-it.ready
	if !it.live {
		if errors.Is(it.setupErr, ErrExecDone) {
			return len(p), nil // replayed
		}
		return 0, it.setupErr
	}
	if it.pty == nil || it.setupErr != nil {
		return 0, it.setupErr
	}
	if len(p) == 0 {
		return 0, nil
	}
	if err := it.send(context.Background(), p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// WriteString is Write of s.
func (it *Interactive) WriteString(s string) (int, error) { return it.Write([]byte(s)) }

// send records b as stdin, then sends it.
func (it *Interactive) send(ctx context.Context, b []byte) error {
	e := it.Exec
	it.wmu.Lock()
	defer it.wmu.Unlock()
	it.mu.Lock()
	ended := it.ended
	it.mu.Unlock()
	if ended {
		return ErrExecDone
	}
	rec := b
	if it.stdinRd != nil {
		rec = it.stdinRd.Write(b)
	}
	if len(rec) > 0 {
		if err := it.emitOutput(ctx, events.Stdin, rec, false); err != nil {
			return err
		}
	}
	if err := it.pty.Write(ctx, b); err != nil {
		return &ExecConnectionError{SandboxID: e.sb.id, Step: e.step, Err: err}
	}
	return nil
}

// Resize sets the terminal's size in columns and rows.
func (it *Interactive) Resize(ctx context.Context, cols, rows int) error {
	p, err := it.terminal()
	if err != nil || p == nil {
		return err
	}
	if cols <= 0 || rows <= 0 || cols > 0xffff || rows > 0xffff {
		return &OptionError{Field: "size", Reason: fmt.Sprintf("%dx%d is not a terminal size", cols, rows)}
	}
	return p.Resize(ctx, cols, rows)
}

// Signal sends a signal by name ("SIGINT", "SIGTERM", "SIGKILL", "SIGQUIT",
// "SIGHUP") to the terminal's foreground job, as the keyboard would.
func (it *Interactive) Signal(ctx context.Context, name string) error {
	p, err := it.terminal()
	if err != nil || p == nil {
		return err
	}
	switch name {
	case "SIGINT", "SIGTERM", "SIGKILL", "SIGQUIT", "SIGHUP":
	default:
		return &OptionError{Field: "signal", Reason: fmt.Sprintf("%q is not one of SIGINT, SIGTERM, SIGKILL, SIGQUIT, SIGHUP", name)}
	}
	return p.Signal(ctx, name)
}

// terminal waits for the terminal and returns it; nil (and no error) for a
// replayed exec, ErrExecDone once ended.
func (it *Interactive) terminal() (*opensandbox.PTY, error) {
	<-it.ready
	if !it.live {
		if errors.Is(it.setupErr, ErrExecDone) {
			return nil, nil
		}
		return nil, it.setupErr
	}
	if it.setupErr != nil {
		return nil, it.setupErr
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.ended {
		return nil, ErrExecDone
	}
	return it.pty, nil
}

// Close ends the terminal's process (its session is deleted) and waits for
// the exec to end: it is recorded as completed with exit code -1 unless the
// process exited first. It returns the exec's error, like Wait. A replayed or
// ended exec is left as it is.
func (it *Interactive) Close(ctx context.Context) error {
	<-it.ready
	if it.live && it.setupErr == nil {
		it.mu.Lock()
		ended := it.ended
		if !ended {
			it.closing = true
		}
		it.mu.Unlock()
		if !ended {
			if err := it.execd.DeletePTY(ctx, it.session); err != nil && !errors.Is(err, opensandbox.ErrNotFound) {
				return &SandboxError{SandboxID: it.sb.id, Op: fmt.Sprintf("close exec %d", it.step), Err: err}
			}
		}
	}
	_, err := it.Wait()
	return err
}

// refetch is Exec.refetch without the stdin chunks, which are not output.
func (it *Interactive) refetch(ctx context.Context, from, to int) ([]chunk, error) {
	return it.Exec.readBack(ctx, from, to, true)
}

// exportLine returns the shell line that exports env before the command, in
// a stable order.
func exportLine(env map[string]string) string {
	if len(env) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("export")
	for _, k := range slices.Sorted(maps.Keys(env)) {
		b.WriteString(" " + k + "=" + shellQuote(env[k]))
	}
	b.WriteString("; ")
	return b.String()
}

// validEnvName reports whether k is a POSIX shell variable name.
func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if c != '_' && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// ---- replay of interactive execs ----

// pendingInteractive is an interactive exec that had started and not
// completed before the checkpoint: a resumed handle starts it again.
type pendingInteractive struct {
	text        string
	fingerprint string
	stdin       [][]byte
}

// notePending keeps, of the execs open (started, not completed) at the end of
// a ledger prefix apply took, the interactive ones, and forgets those
// that completed in it.
func (r *replayCache) notePending(open map[int]*recordedExec) {
	for step, rec := range open {
		if rec.started == nil || !recordedInteractive(rec) {
			continue
		}
		if r.pending == nil {
			r.pending = map[int]*recordedExec{}
		}
		r.pending[step] = rec
	}
	for step := range r.pending {
		if _, done := r.steps[step]; done {
			delete(r.pending, step)
		}
	}
}

// peek returns the cached result of step without taking it. Nil-safe.
func (r *replayCache) peek(step int) (*recordedExec, bool) {
	if r == nil {
		return nil, false
	}
	rec, ok := r.steps[step]
	return rec, ok
}

// takePending removes and returns the pending interactive exec of step.
// Nil-safe; called with the handle's mu held.
func (r *replayCache) takePending(step int) (pendingInteractive, bool) {
	if r == nil {
		return pendingInteractive{}, false
	}
	rec, ok := r.pending[step]
	if !ok {
		return pendingInteractive{}, false
	}
	delete(r.pending, step)
	var p events.ExecStartedPayload
	if json.Unmarshal(events.UnwrapPayload(rec.started), &p) != nil {
		return pendingInteractive{}, false
	}
	pi := pendingInteractive{text: p.Text(), fingerprint: p.Fingerprint}
	if pi.fingerprint == "" {
		pi.fingerprint = events.Fingerprint(events.KindCommand, pi.text)
	}
	for _, raw := range rec.outputs {
		var o events.ExecOutputPayload
		if json.Unmarshal(events.UnwrapPayload(raw), &o) == nil && o.Type == events.Stdin && len(o.Bytes()) > 0 {
			pi.stdin = append(pi.stdin, o.Bytes())
		}
	}
	return pi, true
}

// recordedInteractive reports whether rec's exec.started says interactive.
func recordedInteractive(rec *recordedExec) bool {
	if rec.started == nil {
		return false
	}
	var p struct {
		Interactive bool `json:"interactive"`
	}
	return json.Unmarshal(events.UnwrapPayload(rec.started), &p) == nil && p.Interactive
}

// recordedText returns the command or code rec's exec.started recorded.
func recordedText(rec *recordedExec) string {
	var p events.ExecStartedPayload
	_ = json.Unmarshal(events.UnwrapPayload(rec.started), &p)
	return p.Text()
}

// sleepCtx sleeps d, or until ctx ends (its cause).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
