package alineo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/spans"
	"github.com/alineo-labs/alineo/internal/workers"
	"github.com/alineo-labs/alineo/opensandbox"
	"go.opentelemetry.io/otel/trace"
)

// closeTimeout bounds the work Close does after its ctx ended: the delete and the
// sandbox.closed write.
const closeTimeout = 30 * time.Second

// Sandbox is a live sandbox: the handle returned by Client.Sandbox. Every method
// is safe for concurrent use. Close it when done: Close deletes the container,
// records sandbox.closed and frees the concurrency slot.
type Sandbox struct {
	c         *Client
	id        string
	name      string
	runID     string
	resources Resources
	shell     string
	image     string            // recorded in sandbox.created, inherited by forks
	env       map[string]string // given at creation (never recorded), inherited by forks; nil when unknown
	ledger    *ledger
	release   func() // frees the concurrency slot; idempotent
	// lineOutput asks execd for its line format instead of exact output
	// chunks (tests and benchmarks only).
	lineOutput bool

	mu       sync.Mutex
	ex       *opensandbox.Execd // nil until resolved, and again after Pause
	step     int                // the last step index handed out
	closed   bool
	paused   bool
	pausedEx *opensandbox.Execd // the client Pause closed; Resume reopens its endpoint
	inflight map[*Exec]context.CancelCauseFunc
	running  sync.WaitGroup // exec goroutines
	replay   *replayCache   // results replayed instead of run (Client.Resume); nil for none

	expires   bool      // created with a Timeout, or renewed: it may have expired by Close
	expiresAt time.Time // as the server last said; zero: none known

	creds credState // bound credential values, redacted from what is recorded

	run trace.Span // sandbox.run, from launch to Close; nil for a handle of Connect

	closeOnce sync.Once
	closeErr  error
}

// ID returns the sandbox id on the OpenSandbox server.
func (s *Sandbox) ID() string { return s.id }

// Name returns the session name: the one given in SandboxOptions, or the
// generated "sandbox-<first 8 of the id>".
func (s *Sandbox) Name() string { return s.name }

// Actor returns who the handle's entries are recorded as caused by
// (events.Entry.Actor; see WithActor).
func (s *Sandbox) Actor() string { return s.ledger.actor }

// RunID returns the run id resolved when the sandbox was created.
func (s *Sandbox) RunID() string { return s.runID }

// ExpiresAt returns when the server ends the sandbox unless it is renewed, as
// the server said when it created the sandbox (SandboxOptions.Timeout) or
// last renewed it; zero when it has no expiration. Safe for concurrent use.
func (s *Sandbox) ExpiresAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expiresAt
}

// Renew moves the sandbox's expiration to expiresAt, which must be in the
// future and later than the current one (OpenSandbox's renew-expiration),
// and returns the new expiration. A worker keeps the sandbox of a job alive
// this way, so that the sandbox of a worker that died expires on its own.
// Safe for concurrent use; it may be called on a closed handle, whose
// sandbox is gone.
//
// Errors: *SandboxError wrapping the server's (an *opensandbox.APIError:
// 400 when expiresAt is not later than the current expiration, 404 when the
// sandbox is gone, 409 when it is stopping or ended).
func (s *Sandbox) Renew(ctx context.Context, expiresAt time.Time) (time.Time, error) {
	got, err := s.c.os.RenewExpiration(ctx, s.id, expiresAt)
	if err != nil {
		return time.Time{}, &SandboxError{SandboxID: s.id, Op: "renew", Err: err}
	}
	s.mu.Lock()
	s.expires, s.expiresAt = true, got
	s.mu.Unlock()
	return got, nil
}

// execd returns the execd client, or why there is none (closed, paused).
func (s *Sandbox) execd() (*opensandbox.Execd, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.execdLocked()
}

// execdLocked is execd with s.mu held.
func (s *Sandbox) execdLocked() (*opensandbox.Execd, error) {
	switch {
	case s.closed:
		return nil, ErrClosed
	case s.paused:
		return nil, ErrPaused
	case s.ex != nil:
		return s.ex, nil
	}
	return nil, &ExecConnectionError{SandboxID: s.id, Err: errors.New("execd not resolved; call Resume after Pause")}
}

// checkOpen returns ErrClosed once Close was called.
func (s *Sandbox) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// fileExecd returns the execd client for a file or metrics operation.
func (s *Sandbox) fileExecd(ctx context.Context) (*opensandbox.Execd, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.execd()
}

// Exec runs a shell command and returns at once with its handle; the command
// starts now. It takes the handle's next step index, and exec.started is queued
// for the ledger before Exec returns, so the ledger keeps the order of calls.
// The command string reaches the sandbox unchanged: with a Shell (from opts or
// SandboxOptions) it is quoted as one argument of "shell -c". opts holds at most
// one ExecOptions.
//
// Cancelling ctx stops the command's stream; the exec then ends with an
// *ExecConnectionError wrapping ctx's error, and what was recorded stays.
func (s *Sandbox) Exec(ctx context.Context, cmd string, opts ...ExecOptions) *Exec {
	o, bad := oneOption("ExecOptions", opts)
	switch {
	case bad != nil:
	case cmd == "":
		bad = &OptionError{Field: "cmd", Reason: "is empty"}
	case o.Timeout < 0:
		bad = &OptionError{Field: "Timeout", Reason: "is negative"}
	}
	shell := o.Shell
	if shell == "" {
		shell = s.shell
	}
	wire := cmd
	if shell != "" {
		wire = wrapShell(shell, cmd)
	}
	req := opensandbox.CommandRequest{Command: wire, Cwd: o.Cwd, Envs: o.Env, Timeout: o.Timeout, ExactOutput: !s.lineOutput}
	text := s.redactText(cmd) // what is recorded and reported
	payload := events.ExecStartedPayload{Kind: events.KindCommand, Cmd: text, Fingerprint: events.Fingerprint(events.KindCommand, text)}
	return s.start(ctx, execCall{text: text, strict: o.strict(), bad: bad, started: payload, lines: true,
		open: func(ctx context.Context, ex *opensandbox.Execd) (*opensandbox.Stream, error) {
			return ex.RunCommand(ctx, req)
		}})
}

// ExecCode runs code through execd's code interpreter (POST /code) and returns
// its handle, like Exec. Without a Language the code runs as a shell script. A
// non-zero exit or an exception (exit code 1) is a *CommandError when strict.
// What the interpreter reports of the code, its last expression's value and
// its exception, is in the result (see CodeContext.Run).
func (s *Sandbox) ExecCode(ctx context.Context, code string, opts ...CodeOptions) *Exec {
	o, bad := oneOption("CodeOptions", opts)
	switch {
	case bad != nil:
	case code == "":
		bad = &OptionError{Field: "code", Reason: "is empty"}
	}
	req := opensandbox.CodeRequest{Code: code, ExactOutput: !s.lineOutput}
	if o.Language != "" || o.ContextID != "" {
		req.Context = &opensandbox.CodeContext{ID: o.ContextID, Language: o.Language}
	}
	text := s.redactText(code) // what is recorded and reported
	payload := events.ExecStartedPayload{Kind: events.KindCode, Code: text, Fingerprint: events.Fingerprint(events.KindCode, text)}
	return s.start(ctx, execCall{text: text, strict: o.strict(), bad: bad, started: payload, lines: o.Language == "",
		open: func(ctx context.Context, ex *opensandbox.Execd) (*opensandbox.Stream, error) {
			return ex.RunCode(ctx, req)
		}})
}

// execCall is an exec-like call (Exec, ExecCode) as Sandbox.start takes it.
type execCall struct {
	text    string                    // the command or code as recorded and reported: bound values redacted
	strict  bool                      // a non-zero exit is a *CommandError
	bad     error                     // why the call's arguments are invalid; nil if they are not
	started events.ExecStartedPayload // exec.started, but for its Seq; its Kind is the exec's
	lines   bool                      // the output events are lines of a shell command, not raw bytes
	open    openFunc                  // sends the request
}

// start numbers the call, then answers it from the replay cache, or queues
// exec.started and runs it in a goroutine of its own.
func (s *Sandbox) start(ctx context.Context, call execCall) *Exec {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.step++
	e := newExec(s, s.step, call.started.Kind, call.text, call.strict)
	switch {
	case s.closed:
		e.fail(ErrClosed)
		return e
	case s.paused:
		e.fail(ErrPaused)
		return e
	case call.bad != nil:
		e.fail(call.bad)
		return e
	}
	ctx, span := s.execSpan(ctx, e)
	if s.replayed(e, call.started.Fingerprint) {
		e.endSpan(span, true)
		return e
	}
	e.endSpanOnFinish(span)
	// Resolved here, under s.mu, before anything is recorded, rather than by
	// the exec's goroutine, which would wait for this call to release s.mu
	// before sending its request.
	ex, err := s.execdLocked()
	if err != nil {
		e.fail(err)
		return e
	}
	payload := call.started
	payload.Seq = e.step
	// exec.started is queued here, under s.mu, so the ledger keeps the order
	// of calls; the exec's goroutine writes it when no writer is running
	// (lead), and sends the request once it is written.
	started, lead, err := s.ledger.emitLed(ctx, e.chain, events.ExecStarted, e.step, startedPayload(payload))
	if err != nil {
		e.fail(&SandboxError{SandboxID: s.id, Op: fmt.Sprintf("record exec %d started", e.step), Err: err})
		return e
	}
	ectx, cancel := context.WithCancelCause(ctx)
	s.inflight[e] = cancel
	s.running.Add(1)
	// On a worker rather than a goroutine of its own: the exec's commits go
	// deep (a durable store's transaction, its chain hash), and a new
	// goroutine's stack would be grown, by copying, for every exec.
	workers.Go(ctx, func() {
		defer func() {
			s.mu.Lock()
			delete(s.inflight, e)
			s.mu.Unlock()
			cancel(nil)
			s.running.Done()
		}()
		if lead {
			s.ledger.writeLed(ectx, 1)
		}
		e.run(ectx, cancel, ex, started, call.open, call.lines)
	})
	return e
}

// Pause pauses the sandbox (its processes are frozen) and waits until it is
// Paused, then cancels the streams of running execs and records
// sandbox.paused. Exec and file operations fail with ErrPaused until Resume.
func (s *Sandbox) Pause(ctx context.Context) (err error) {
	ctx, span := s.span(ctx, "sandbox.pause")
	defer func() { spans.End(span, err) }()
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := s.c.pause(ctx, s.id); err != nil {
		return err
	}
	s.mu.Lock()
	s.paused = true
	ex := s.ex
	s.ex = nil
	if ex != nil {
		s.pausedEx = ex
	}
	for _, cancel := range s.inflight {
		cancel(ErrPaused)
	}
	s.mu.Unlock()
	if ex != nil {
		ex.Close()
	}
	if err := s.ledger.write(ctx, events.SandboxPaused, events.SandboxLevel, nil); err != nil {
		return &SandboxError{SandboxID: s.id, Op: "record sandbox.paused", Err: err}
	}
	return nil
}

// Resume resumes a paused sandbox, waits until it is Running and execd answers,
// and records sandbox.resumed.
func (s *Sandbox) Resume(ctx context.Context) (err error) {
	ctx, span := s.span(ctx, "sandbox.resume")
	defer func() { spans.End(span, err) }()
	if err := s.checkOpen(); err != nil {
		return err
	}
	ex, err := s.resume(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ex.Close()
		return ErrClosed
	}
	old := s.ex
	s.ex, s.paused = ex, false
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
	if err := s.ledger.write(ctx, events.SandboxResumed, events.SandboxLevel, nil); err != nil {
		return &SandboxError{SandboxID: s.id, Op: "record sandbox.resumed", Err: err}
	}
	return nil
}

// resume resumes the sandbox, waits until it is Running and execd answers,
// and returns a new execd client. On the endpoint of the client Pause closed,
// execd is probed while the sandbox resumes (a frozen execd answers once it
// is thawed); without one, the endpoint is resolved once the sandbox is
// Running.
func (s *Sandbox) resume(ctx context.Context) (*opensandbox.Execd, error) {
	s.mu.Lock()
	prev := s.pausedEx
	s.mu.Unlock()
	if prev == nil {
		if err := s.c.resumeRunning(ctx, s.id); err != nil {
			return nil, err
		}
		ex, err := s.c.os.Execd(ctx, s.id)
		if err != nil {
			return nil, &ExecConnectionError{SandboxID: s.id, Err: err}
		}
		return ex, nil
	}
	ex, err := prev.Reopen()
	if err != nil {
		return nil, &ExecConnectionError{SandboxID: s.id, Err: err}
	}
	rctx, cancel := context.WithTimeout(ctx, runningTimeout)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- ex.WaitReady(rctx) }()
	werr := s.c.resumeRunning(ctx, s.id)
	if werr != nil {
		cancel() // not Running: stop probing execd
	}
	rerr := <-ready
	switch {
	case werr != nil:
		ex.Close()
		return nil, werr
	case rerr != nil:
		ex.Close()
		return nil, &ExecConnectionError{SandboxID: s.id, Err: rerr}
	}
	return ex, nil
}

// Close cancels the streams of running execs (they end with an error wrapping
// ErrClosed, and what they recorded stays), deletes the container, records
// sandbox.closed (even if the delete failed) and frees the concurrency slot. It
// is idempotent: later calls return the first call's result. The work after the
// cancel continues for a bounded time even if ctx ends.
//
// sandbox.closed has no payload when the sandbox was deleted. Otherwise its
// events.SandboxClosedPayload says what became of it: Outcome
// events.OutcomeExpired when its server had ended it at its expiration (a
// sandbox created with a Timeout is looked up first), or
// events.OutcomeUnreachable when the delete failed: it may still run.
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		if s.run != nil {
			ctx = trace.ContextWithSpan(ctx, s.run) // sandbox.closed is the run's
		}
		s.closeErr = s.close(ctx)
		s.endRun(s.closeErr)
	})
	return s.closeErr
}

func (s *Sandbox) close(ctx context.Context) error {
	defer s.release()
	s.mu.Lock()
	s.closed = true
	for _, cancel := range s.inflight {
		cancel(ErrClosed)
	}
	ex := s.ex
	s.ex = nil
	s.mu.Unlock()
	s.running.Wait() // every exec has recorded what it got before sandbox.closed

	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	var errs []error
	if ex != nil {
		ex.Close()
	}
	s.mu.Lock()
	expires := s.expires
	s.mu.Unlock()
	outcome := events.OutcomeClosed
	if expires && s.c.expired(wctx, s.id) {
		outcome = events.OutcomeExpired
	}
	if err := s.c.os.DeleteSandbox(wctx, s.id); err != nil && !errors.Is(err, opensandbox.ErrNotFound) {
		errs = append(errs, &SandboxError{SandboxID: s.id, Op: "delete", Err: err})
		if outcome == events.OutcomeClosed {
			outcome = events.OutcomeUnreachable
		}
	}
	var payload any // none for a plain deletion, as before outcomes were recorded
	if outcome != events.OutcomeClosed {
		payload = events.SandboxClosedPayload{Outcome: outcome}
	}
	if err := s.ledger.write(wctx, events.SandboxClosed, events.SandboxLevel, payload); err != nil {
		errs = append(errs, &SandboxError{SandboxID: s.id, Op: "record sandbox.closed", Err: err})
	}
	return errors.Join(errs...)
}
