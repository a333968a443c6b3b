package execd

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"time"
	"unicode/utf8"
)

// Event types of the command stream (API-NOTES §6.1).
const (
	evInit     = "init"
	evPing     = "ping"
	evStdout   = "stdout"
	evStderr   = "stderr"
	evError    = "error"
	evComplete = "execution_complete"
)

// event is one object of the execd command stream. Every field is omitempty, as in the real execd.
type event struct {
	Type           string         `json:"type,omitempty"`
	Text           string         `json:"text,omitempty"`
	Data           string         `json:"data,omitempty"` // extension: exact bytes (base64) of a non-UTF-8 line
	ExecutionCount int            `json:"execution_count,omitempty"`
	ExecutionTime  int64          `json:"execution_time,omitempty"`
	Timestamp      int64          `json:"timestamp,omitempty"`
	Results        map[string]any `json:"results,omitempty"`
	Error          *eventError    `json:"error,omitempty"`
}

type eventError struct {
	Ename     string   `json:"ename,omitempty"`
	Evalue    string   `json:"evalue,omitempty"`
	Traceback []string `json:"traceback,omitempty"`
}

func nowMs() int64 { return time.Now().UnixMilli() }

// outputEvent builds the stdout/stderr event for one line (without its terminator).
func outputEvent(typ string, line []byte) event {
	ev := event{Type: typ, Timestamp: nowMs()}
	switch {
	case len(line) == 0:
		ev.Text = "\n"
	case utf8.Valid(line):
		ev.Text = string(line)
	default:
		// encoding/json turns each invalid byte into U+FFFD, exactly like the real execd;
		// Data keeps the original bytes.
		ev.Text = string(line)
		ev.Data = base64.StdEncoding.EncodeToString(line)
	}
	return ev
}

// ExactOutputHeader is this server's extension of the command stream. A
// request carrying it (any non-empty value but "0") on POST /command, POST /code
// or POST /session/{id}/run gets its stdout and stderr as chunks of exact bytes,
// each event one read from the process's pipe: text holds the chunk (newlines,
// carriage returns and an unterminated last line included) and, when the bytes
// are not valid UTF-8, data their base64. The response then carries the header
// too. Without it, output comes one event per line, newline stripped, as from
// the real execd. Python code (POST /code with language python) always streams
// chunks, as the real execd's Jupyter kernels do, and says so with the header.
const ExactOutputHeader = "X-Alineo-Exact-Output"

// wantsExact reports whether r asks for exact output chunks.
func wantsExact(r *http.Request) bool {
	v := r.Header.Get(ExactOutputHeader)
	return v != "" && v != "0"
}

// chunkEvent builds the stdout/stderr event of one chunk of exact bytes.
func chunkEvent(typ string, b []byte) event {
	ev := event{Type: typ, Text: string(b), Timestamp: nowMs()}
	if !utf8.Valid(b) {
		ev.Data = base64.StdEncoding.EncodeToString(b)
	}
	return ev
}

// chunkWriter hands each write on as chunks (pieces fitting the wire's line
// limit), holding back an incomplete UTF-8 character at the end of a write
// until the next one or Flush. Not safe for concurrent use.
type chunkWriter struct {
	max  int
	held []byte
	emit func([]byte)
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(c.held) > 0 {
		p = append(c.held, p...)
		c.held = nil
	}
	cut := len(p)
	for j := len(p) - 1; j >= 0 && j >= len(p)-utf8.UTFMax; j-- {
		if utf8.RuneStart(p[j]) {
			if !utf8.FullRune(p[j:]) {
				cut = j
			}
			break
		}
	}
	if cut < len(p) {
		c.held = append([]byte(nil), p[cut:]...)
		p = p[:cut]
	}
	if len(p) > 0 {
		splitForWire(p, c.max, c.emit)
	}
	return n, nil
}

// Flush emits a held-back partial character.
func (c *chunkWriter) Flush() {
	if len(c.held) > 0 {
		c.emit(c.held)
		c.held = nil
	}
}

// streamWriter writes events as `<json>\n\n`, each flushed (send) or left for the next flush
// (queue). Headers are committed on the first event, so errors found before it are still answered
// as ordinary JSON errors.
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	err     error // first write error; later sends are dropped
}

func newStreamWriter(w http.ResponseWriter) *streamWriter {
	return &streamWriter{w: w, rc: http.NewResponseController(w)}
}

// send writes ev and flushes it, with any event queued before it, to the client.
func (sw *streamWriter) send(ev event) error {
	if sw.queue(ev) != nil {
		return sw.err
	}
	if err := sw.rc.Flush(); err != nil {
		sw.err = err
	}
	return sw.err
}

// queue writes ev without flushing it: it reaches the client with the next send or, after a
// handler's last event, with the end of the response, in the same write. Events the client could
// not act on apart (init and the first ping, a stream's last event and its end) so cost one
// write and one wake-up of the client, not one each.
func (sw *streamWriter) queue(ev event) error {
	if sw.err != nil {
		return sw.err
	}
	if !sw.started {
		sw.started = true
		h := sw.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		h.Set("X-Accel-Buffering", "no")
		// A server-wide WriteTimeout must not cut long-running streams.
		_ = sw.rc.SetWriteDeadline(time.Time{})
		sw.w.WriteHeader(http.StatusOK)
	}
	if ev.Timestamp == 0 {
		ev.Timestamp = nowMs()
	}
	b, err := json.Marshal(ev)
	if err != nil {
		sw.err = err
		return err
	}
	b = append(b, '\n', '\n')
	if _, err := sw.w.Write(b); err != nil {
		sw.err = err
	}
	return sw.err
}

// lineSplitter cuts a byte stream into lines. `\n`, `\r` and `\r\n` end a line; a line longer than
// max bytes is emitted in pieces of at most max bytes, cut at a UTF-8 character boundary when the
// cut would fall inside a well-formed multi-byte character. It never holds more than max bytes.
// Not safe for concurrent use.
type lineSplitter struct {
	max    int
	buf    []byte
	skipLF bool // the previous byte was '\r': a '\n' right after it belongs to the same terminator
	emit   func(line []byte) error
}

func newLineSplitter(max int, emit func([]byte) error) *lineSplitter {
	return &lineSplitter{max: max, emit: emit}
}

// Write consumes p. The emit callback may keep no reference to the slice it gets.
func (l *lineSplitter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if l.skipLF {
			l.skipLF = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := indexEOL(p)
		seg := p
		if i >= 0 {
			seg = p[:i]
		}
		if room := l.max - len(l.buf); len(seg) > room {
			// The line does not fit: fill the buffer, emit a piece, keep going.
			l.buf = append(l.buf, seg[:room]...)
			p = p[room:]
			if err := l.emitPiece(); err != nil {
				return n - len(p), err
			}
			continue
		}
		if i < 0 {
			l.buf = append(l.buf, p...)
			return n, nil
		}
		l.buf = append(l.buf, seg...)
		if p[i] == '\r' {
			l.skipLF = true
		}
		p = p[i+1:]
		err := l.emit(l.buf)
		l.buf = l.buf[:0]
		if err != nil {
			return n - len(p), err
		}
	}
	return n, nil
}

// emitPiece emits a full buffer, keeping back an incomplete UTF-8 character at its end.
func (l *lineSplitter) emitPiece() error {
	cut := len(l.buf)
	for j := len(l.buf) - 1; j >= 0 && j >= len(l.buf)-utf8.UTFMax; j-- {
		if utf8.RuneStart(l.buf[j]) {
			if !utf8.FullRune(l.buf[j:]) && j > 0 {
				cut = j
			}
			break
		}
	}
	err := l.emit(l.buf[:cut])
	rest := copy(l.buf, l.buf[cut:])
	l.buf = l.buf[:rest]
	return err
}

// Flush emits a pending unterminated line, if any.
func (l *lineSplitter) Flush() error {
	if len(l.buf) == 0 {
		return nil
	}
	err := l.emit(l.buf)
	l.buf = l.buf[:0]
	return err
}

func indexEOL(p []byte) int {
	for i, c := range p {
		if c == '\n' || c == '\r' {
			return i
		}
	}
	return -1
}

// wireOverhead bounds the JSON of an output event around its text and data:
// {"type":"stdout","text":"","data":"","timestamp":<13 digits>}.
const wireOverhead = 96

// splitForWire cuts line into pieces whose encoded event (text with encoding/json escapes, plus
// the base64 data of a non-UTF-8 piece) fits in maxLine bytes, at character boundaries, and
// calls emit for each. Clients read events with a line limit (the official Go SDK: 4 MiB), so
// MaxLine bounds the wire line, not only the text. An empty line is emitted as is.
func splitForWire(line []byte, maxLine int, emit func([]byte)) {
	budget := maxLine - wireOverhead
	start, cost, invalid := 0, 0, false
	for i := 0; i < len(line); {
		r, size := utf8.DecodeRune(line[i:])
		bad := r == utf8.RuneError && size == 1
		c := jsonCost(r, bad, size)
		total := cost + c
		if invalid || bad {
			total += base64.StdEncoding.EncodedLen(i + size - start)
		}
		if total > budget && i > start {
			emit(line[start:i])
			start, cost, invalid = i, 0, false
			continue
		}
		cost += c
		invalid = invalid || bad
		i += size
	}
	if start < len(line) || len(line) == 0 {
		emit(line[start:])
	}
}

// jsonCost is an upper bound of the bytes encoding/json writes for one character.
func jsonCost(r rune, invalid bool, size int) int {
	switch {
	case invalid:
		return 6 // \ufffd
	case r < 0x20, r == '<', r == '>', r == '&', r == 0x2028, r == 0x2029:
		return 6 // \u00XX
	case r == '"', r == '\\':
		return 2
	}
	return size
}
