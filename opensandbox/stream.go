package opensandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EventKind is the "type" of an execd stream event. Unknown kinds are delivered as is.
type EventKind string

// Event kinds of an execd command or code stream.
const (
	EventInit              EventKind = "init"               // first; Text is the command or context id
	EventPing              EventKind = "ping"               // keep-alive
	EventStdout            EventKind = "stdout"             // one line, newline stripped ("\n" for an empty line); a chunk of exact bytes when Stream.Exact
	EventStderr            EventKind = "stderr"             // same for stderr
	EventResult            EventKind = "result"             // Jupyter result; see Results
	EventError             EventKind = "error"              // terminal failure; Error.EValue holds the exit code
	EventExecutionComplete EventKind = "execution_complete" // terminal success
	EventExecutionCount    EventKind = "execution_count"    // Jupyter
	EventStatus            EventKind = "status"             // Jupyter
)

// Terminal reports whether k ends a run (error or execution_complete).
func (k EventKind) Terminal() bool { return k == EventError || k == EventExecutionComplete }

// ExecError is the error object of an "error" event.
type ExecError struct {
	EName     string   `json:"ename"`
	EValue    string   `json:"evalue"`
	Traceback []string `json:"traceback,omitempty"`
}

// Event is one decoded stream event.
type Event struct {
	Kind           EventKind      `json:"type"`
	Text           string         `json:"text,omitempty"`
	ExecutionCount int            `json:"execution_count,omitempty"`
	ExecutionTime  int64          `json:"execution_time,omitempty"` // milliseconds
	Timestamp      int64          `json:"timestamp,omitempty"`      // Unix milliseconds
	Results        map[string]any `json:"results,omitempty"`        // MIME-keyed; execd renames text/plain to "text"
	Error          *ExecError     `json:"error,omitempty"`
	// Data is the output's exact bytes when Text cannot hold them (they are
	// not valid UTF-8): sandboxd's extension, base64 on the wire. Empty
	// otherwise; then Text is exact.
	Data []byte `json:"data,omitempty"`
	// Raw is the event's JSON exactly as received.
	Raw json.RawMessage `json:"-"`
}

// Time returns the event's timestamp, or the zero time if it has none.
func (e Event) Time() time.Time {
	if e.Timestamp == 0 {
		return time.Time{}
	}
	return time.UnixMilli(e.Timestamp)
}

// decodeEvent decodes one frame. The kind comes from the JSON "type", else from the
// SSE event name. Flat ename/evalue/traceback fields of old servers are accepted.
func decodeEvent(f frame) (Event, error) {
	var w struct {
		Event
		EName     *string  `json:"ename"`
		EValue    *string  `json:"evalue"`
		Traceback []string `json:"traceback"`
	}
	if err := json.Unmarshal(f.data, &w); err != nil {
		return Event{}, &frameError{fmt.Sprintf("event is not a JSON object (%v): %q", err, truncate(f.data, 64))}
	}
	ev := w.Event
	if ev.Kind == "" {
		ev.Kind = EventKind(f.event)
	}
	if ev.Kind == "" {
		return Event{}, &frameError{fmt.Sprintf("event has no type: %q", truncate(f.data, 64))}
	}
	if ev.Error == nil && (w.EName != nil || w.EValue != nil) {
		ev.Error = &ExecError{Traceback: w.Traceback}
		if w.EName != nil {
			ev.Error.EName = *w.EName
		}
		if w.EValue != nil {
			ev.Error.EValue = *w.EValue
		}
	}
	ev.Raw = json.RawMessage(f.data)
	return ev, nil
}

// Result is how a run ended.
type Result struct {
	// ID is the command id (or code context id) from the init event.
	ID string
	// ExitCode is 0 after execution_complete; after an error event it is the integer
	// in Error.EValue (-1 when killed by a signal or timeout), or 1 when EValue is not
	// an integer (start failure, code exception).
	ExitCode int
	// Error is the terminal error event's payload, nil on success.
	Error *ExecError
	// ExecutionTime from execution_complete, 0 otherwise.
	ExecutionTime time.Duration
}

func exitCode(e *ExecError) int {
	if e == nil {
		return 1
	}
	if n, err := strconv.Atoi(strings.TrimSpace(e.EValue)); err == nil {
		return n
	}
	return 1
}

// drainTimeout bounds how long a finished stream's leftover response is read in the
// background (execd keeps /command open about 1 s after the terminal event).
const drainTimeout = 3 * time.Second

// Stream is one running command, code run or session run. Read it with Next/Event;
// every event is delivered, pings included, and reading stops at the terminal event
// without waiting for the server to close the response. Next, Event, Result and Wait must be called from one goroutine; Close
// may be called from any goroutine, any number of times.
type Stream struct {
	op     string
	ctx    context.Context
	cancel context.CancelFunc
	body   io.ReadCloser
	fr     *frameReader
	owner  *Execd

	ev       Event
	res      Result
	n        int
	terminal bool
	done     bool
	err      error

	exact bool

	mu       sync.Mutex
	released bool
}

func newStream(ctx context.Context, cancel context.CancelFunc, op string, resp *http.Response, owner *Execd) *Stream {
	return &Stream{op: op, ctx: ctx, cancel: cancel, body: resp.Body, fr: newFrameReader(resp.Body), owner: owner,
		exact: resp.Header.Get(HeaderExactOutput) == "1"}
}

// Exact reports whether the server streams output as chunks of exact bytes
// (it answered a request with ExactOutput, or streams Python code so): each
// stdout/stderr event is then a chunk, its bytes Data if set, else Text. If
// false, output events are execd's lines without their terminators.
func (s *Stream) Exact() bool { return s.exact }

// Next advances to the next event and reports whether there is one. It returns
// false after the terminal event, or on failure (see Err).
func (s *Stream) Next() bool {
	if s.done {
		return false
	}
	if s.terminal {
		s.done = true
		return false
	}
	if err := s.ctx.Err(); err != nil {
		// Cancelled or closed: do not hand out events still buffered.
		s.fail(err)
		return false
	}
	f, err := s.fr.next()
	if err == nil {
		var ev Event
		ev, err = decodeEvent(f)
		if err == nil {
			s.n++
			s.ev = ev
			s.observe(ev)
			return true
		}
	}
	s.fail(err)
	return false
}

func (s *Stream) observe(ev Event) {
	switch ev.Kind {
	case EventInit:
		if s.res.ID == "" {
			s.res.ID = ev.Text
		}
	case EventExecutionComplete:
		s.res.ExitCode = 0
		s.res.ExecutionTime = time.Duration(ev.ExecutionTime) * time.Millisecond
		s.terminal = true
	case EventError:
		s.res.Error = ev.Error
		if s.res.Error == nil {
			s.res.Error = &ExecError{EValue: ev.Text}
		}
		s.res.ExitCode = exitCode(s.res.Error)
		s.terminal = true
	}
	if s.terminal {
		s.release(true)
	}
}

func (s *Stream) fail(err error) {
	s.done = true
	se := &StreamError{Op: s.op, ID: s.res.ID, Events: s.n}
	var fe *frameError
	switch {
	case errors.As(err, &fe):
		se.Err, se.Detail = ErrMalformedStream, fe.detail
	case errors.Is(err, io.EOF):
		se.Err = ErrStreamTruncated
	case s.ctx.Err() != nil:
		se.Err = context.Cause(s.ctx)
	default:
		// The connection broke (reset, cut inside a chunk): still a truncation.
		se.Err = fmt.Errorf("%w: %w", ErrStreamTruncated, err)
	}
	s.err = se
	s.release(false)
}

// release ends the request. After a terminal event the rest of the response is
// drained in the background (bounded by drainTimeout) rather than aborted, since
// aborting a proxied response mid-way makes some servers' relays fail; otherwise the
// request is cancelled at once.
func (s *Stream) release(graceful bool) {
	s.mu.Lock()
	if s.released {
		s.mu.Unlock()
		return
	}
	s.released = true
	s.mu.Unlock()
	if !graceful || s.owner == nil || !s.owner.startDrain(s) {
		s.cancel()
		s.body.Close()
		if s.owner != nil {
			s.owner.untrack(s)
		}
	}
}

// drain reads the rest of the response until EOF, drainTimeout or cancellation.
func (s *Stream) drain() {
	t := time.AfterFunc(drainTimeout, s.cancel)
	_, _ = io.Copy(io.Discard, io.LimitReader(s.body, 1<<20))
	t.Stop()
	s.cancel()
	s.body.Close()
}

// Event returns the event Next advanced to.
func (s *Stream) Event() Event { return s.ev }

// ID returns the command or context id from the init event ("" before it).
func (s *Stream) ID() string { return s.res.ID }

// Err returns nil if the stream ended at its terminal event (or has not ended yet),
// else a *StreamError: wrapping ErrStreamTruncated (and the transport error, if any)
// when the response ended or broke before the terminal event, ErrMalformedStream for
// bytes that are not events, or the context's error when it was cancelled (also by
// Close).
func (s *Stream) Err() error { return s.err }

// Result returns how the run ended; meaningful once Next has returned the terminal
// event (ExitCode is -1 and ok false otherwise).
func (s *Stream) Result() (res Result, ok bool) {
	if !s.terminal {
		r := s.res
		r.ExitCode = -1
		return r, false
	}
	return s.res, true
}

// Wait reads the remaining events, discarding them, and returns the result. The
// error is Err() (a *StreamError) if the stream did not reach its terminal event. A
// nonzero exit is not an error: check Result.ExitCode.
func (s *Stream) Wait() (Result, error) {
	for s.Next() {
	}
	if s.err != nil {
		r, _ := s.Result()
		return r, s.err
	}
	r, _ := s.Result()
	return r, nil
}

// Close cancels the request if the stream has not reached its terminal event, and
// lets an already finished one drain in the background. Safe to call concurrently
// and repeatedly. After Close, Next returns false; Err reports context.Canceled if the
// stream had not finished.
func (s *Stream) Close() error {
	s.mu.Lock()
	if s.released {
		s.mu.Unlock()
		return nil
	}
	s.released = true
	s.mu.Unlock()
	s.cancel()
	s.body.Close()
	if s.owner != nil {
		s.owner.untrack(s)
	}
	return nil
}
