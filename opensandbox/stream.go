package opensandbox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"
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

// CommandExecError is the EName of the error event that ends a shell command
// (or shell code) with a non-zero exit: its EValue is the exit code.
const CommandExecError = "CommandExecError"

// Exception reports whether e is an exception raised by code (a Jupyter
// kernel's, or a code context's: EName is the exception's class, EValue its
// message, Traceback the interpreter's), rather than the exit of a shell
// command (EName CommandExecError, or none).
func (e *ExecError) Exception() bool {
	return e != nil && e.EName != "" && e.EName != CommandExecError
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
	if f.decoded {
		ev := f.ev
		if ev.Kind == "" {
			ev.Kind = EventKind(f.event)
		}
		if ev.Kind == "" {
			return Event{}, &frameError{fmt.Sprintf("event has no type: %q", truncate(f.data, 64))}
		}
		ev.Raw = json.RawMessage(f.data)
		return ev, nil
	}
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
	// an integer (start failure). An exception (Error.Exception) is 1 whatever its
	// message, but for Python's SystemExit, whose integer EValue is the exit code
	// (sys.exit(3) is 3).
	ExitCode int
	// Error is the terminal error event's payload, nil on success.
	Error *ExecError
	// Results are those of the run's last result event: the value of the
	// code's last expression, MIME-keyed (execd renames text/plain to
	// "text"); nil when there was none.
	Results map[string]any
	// ExecutionTime from execution_complete, 0 otherwise.
	ExecutionTime time.Duration
}

func exitCode(e *ExecError) int {
	if e == nil || e.Exception() && e.EName != "SystemExit" {
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
	src    *eofReader // body, as the frame reader reads it
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
	src := &eofReader{r: resp.Body}
	return &Stream{op: op, ctx: ctx, cancel: cancel, body: resp.Body, src: src, fr: newFrameReader(src), owner: owner,
		exact: resp.Header.Get(HeaderExactOutput) == "1"}
}

// eofReader is a reader that records whether it returned io.EOF: a stream
// whose terminal event came with the response's end (sandboxd's execd writes
// them together) has read the whole body by then, and has nothing to drain.
type eofReader struct {
	r   io.Reader
	eof bool
}

func (r *eofReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err == io.EOF {
		r.eof = true
	}
	return n, err
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
	case EventResult:
		s.res.Results = ev.Results
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
		s.fr.free() // Next reads no further
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
	s.fr.free() // Next reads no further
	s.release(false)
}

// release ends the request. After a terminal event the rest of the response is
// drained in the background (bounded by drainTimeout) rather than aborted, since
// aborting a proxied response mid-way makes some servers' relays fail; otherwise,
// or when the response was read to its end already, the request ends at once.
func (s *Stream) release(graceful bool) {
	s.mu.Lock()
	if s.released {
		s.mu.Unlock()
		return
	}
	s.released = true
	s.mu.Unlock()
	if !graceful || s.src.eof || s.owner == nil || !s.owner.startDrain(s) {
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

// flatResult is what decodeFlat made of a JSON text.
type flatResult int

const (
	flatOther      flatResult = iota // not an object decodeFlat handles: decode it with encoding/json
	flatOK                           // decoded: one flat object, nothing after it
	flatIncomplete                   // a valid prefix of an object: more lines may complete it
)

// decodeFlat decodes, in one pass, the event objects execd and sandboxd send
// for output, pings and the end of a command: a flat object whose members are
// among type, text, data (strings) and timestamp, execution_count,
// execution_time (integers). It sets into ev exactly what json.Unmarshal would,
// and reports flatOther, having set nothing of use, for anything else (another
// member, a nested value, null, a number that is not an integer, invalid
// UTF-8, a lone surrogate escape, bytes after the object): encoding/json then
// decodes it, or names what is wrong. scratch is reused for unescaped strings.
func decodeFlat(d []byte, ev *Event, scratch *[]byte) flatResult {
	p := flatParser{d: d, scratch: scratch}
	if p.ws(); p.end() {
		return flatIncomplete
	}
	if p.d[p.i] != '{' {
		return flatOther
	}
	p.i++
	if p.ws(); p.end() {
		return flatIncomplete
	}
	if p.d[p.i] == '}' {
		p.i++
		return p.close()
	}
	for {
		if r := p.member(ev); r != flatOK {
			return r
		}
		if p.ws(); p.end() {
			return flatIncomplete
		}
		switch p.d[p.i] {
		case ',':
			p.i++
			if p.ws(); p.end() {
				return flatIncomplete
			}
		case '}':
			p.i++
			return p.close()
		default:
			return flatOther
		}
	}
}

type flatParser struct {
	d       []byte
	i       int
	scratch *[]byte
}

func (p *flatParser) end() bool { return p.i >= len(p.d) }

func (p *flatParser) ws() {
	for p.i < len(p.d) {
		switch p.d[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// close checks that only whitespace follows the object.
func (p *flatParser) close() flatResult {
	if p.ws(); !p.end() {
		return flatOther
	}
	return flatOK
}

// member decodes one `"key": value` into ev.
func (p *flatParser) member(ev *Event) flatResult {
	if p.d[p.i] != '"' {
		return flatOther
	}
	key, escaped, r := p.str(false)
	if r != flatOK {
		return r
	}
	if escaped {
		return flatOther
	}
	if p.ws(); p.end() {
		return flatIncomplete
	}
	if p.d[p.i] != ':' {
		return flatOther
	}
	p.i++
	if p.ws(); p.end() {
		return flatIncomplete
	}
	switch string(key) {
	case "type", "text":
		s, _, r := p.strValue()
		if r == flatOK {
			if key[1] == 'y' {
				ev.Kind = EventKind(s)
			} else {
				ev.Text = string(s)
			}
		}
		return r
	case "data":
		s, escaped, r := p.strValue()
		if r != flatOK {
			return r
		}
		if escaped {
			return flatOther
		}
		b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
		n, err := base64.StdEncoding.Decode(b, s)
		if err != nil {
			return flatOther
		}
		ev.Data = b[:n]
		return flatOK
	case "timestamp":
		return p.integer(&ev.Timestamp)
	case "execution_time":
		return p.integer(&ev.ExecutionTime)
	case "execution_count":
		var n int64
		r := p.integer(&n)
		ev.ExecutionCount = int(n)
		return r
	}
	return flatOther
}

func (p *flatParser) strValue() ([]byte, bool, flatResult) {
	if p.d[p.i] != '"' {
		return nil, false, flatOther
	}
	return p.str(true)
}

// str reads the string at p.i (its opening quote) and returns its value,
// whether it had escapes, and the result. With unescape false an escaped
// string's value is not built.
func (p *flatParser) str(unescape bool) ([]byte, bool, flatResult) {
	start := p.i + 1
	for j := start; j < len(p.d); {
		c := p.d[j]
		switch {
		case c == '"':
			p.i = j + 1
			return p.d[start:j], false, flatOK
		case c == '\\':
			if !unescape {
				return nil, true, flatOther
			}
			return p.unescape(start, j)
		case c < 0x20:
			return nil, false, flatOther
		case c < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRune(p.d[j:])
			if r == utf8.RuneError && size == 1 {
				return nil, false, flatOther
			}
			j += size
		}
	}
	return nil, false, flatIncomplete
}

// unescape builds in scratch the value of the string that starts at start and
// has its first escape at j.
func (p *flatParser) unescape(start, j int) ([]byte, bool, flatResult) {
	b := append((*p.scratch)[:0], p.d[start:j]...)
	defer func() { *p.scratch = b[:0] }()
	for j < len(p.d) {
		c := p.d[j]
		switch {
		case c == '"':
			p.i = j + 1
			return b, true, flatOK
		case c == '\\':
			if j+1 >= len(p.d) {
				return nil, true, flatOther // no line can continue it: a newline is no escape
			}
			var r flatResult
			if b, j, r = p.escape(b, j); r != flatOK {
				return nil, true, r
			}
		case c < 0x20:
			return nil, true, flatOther
		case c < utf8.RuneSelf:
			b = append(b, c)
			j++
		default:
			r, size := utf8.DecodeRune(p.d[j:])
			if r == utf8.RuneError && size == 1 {
				return nil, true, flatOther
			}
			b = append(b, p.d[j:j+size]...)
			j += size
		}
	}
	return nil, true, flatIncomplete
}

// escape appends the value of the escape at j (a backslash, with a byte after
// it) to b and returns the index after it.
func (p *flatParser) escape(b []byte, j int) ([]byte, int, flatResult) {
	c := p.d[j+1]
	switch c {
	case '"', '\\', '/':
		return append(b, c), j + 2, flatOK
	case 'b':
		return append(b, '\b'), j + 2, flatOK
	case 'f':
		return append(b, '\f'), j + 2, flatOK
	case 'n':
		return append(b, '\n'), j + 2, flatOK
	case 'r':
		return append(b, '\r'), j + 2, flatOK
	case 't':
		return append(b, '\t'), j + 2, flatOK
	case 'u':
		if j+6 > len(p.d) {
			return b, j, flatOther // as above
		}
		var r rune
		for _, h := range p.d[j+2 : j+6] {
			switch {
			case '0' <= h && h <= '9':
				h -= '0'
			case 'a' <= h && h <= 'f':
				h -= 'a' - 10
			case 'A' <= h && h <= 'F':
				h -= 'A' - 10
			default:
				return b, j, flatOther
			}
			r = r<<4 | rune(h)
		}
		if utf16.IsSurrogate(r) {
			return b, j, flatOther // a pair, or a lone half: encoding/json decides
		}
		return utf8.AppendRune(b, r), j + 6, flatOK
	}
	return b, j, flatOther
}

// integer reads a JSON integer into n.
func (p *flatParser) integer(n *int64) flatResult {
	start := p.i
	j := start
	if j < len(p.d) && p.d[j] == '-' {
		j++
	}
	digits := j
	for j < len(p.d) && '0' <= p.d[j] && p.d[j] <= '9' {
		j++
	}
	switch {
	case j-digits > 1 && p.d[digits] == '0':
		return flatOther // a leading zero is not JSON
	case j == len(p.d):
		return flatIncomplete
	case j == digits, p.d[j] == '.', p.d[j] == 'e', p.d[j] == 'E':
		return flatOther
	}
	v, err := strconv.ParseInt(string(p.d[start:j]), 10, 64)
	if err != nil {
		return flatOther
	}
	*n = v
	p.i = j
	return flatOK
}
