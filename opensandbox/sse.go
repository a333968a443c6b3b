package opensandbox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// maxFrame bounds one line and one assembled event (16 MiB; the official SDK stops
// at 4 MiB, which a long unbroken output line can exceed).
const maxFrame = 16 << 20

// frame is one event's payload: the JSON object and the SSE "event:" name, if any.
// When the reader decoded the object as it read it (decodeFlat), decoded is
// set and ev holds the result, Raw aside.
type frame struct {
	event   string
	data    []byte
	ev      Event
	decoded bool
}

// frameError is a malformed stream; detail names what was wrong.
type frameError struct{ detail string }

func (e *frameError) Error() string { return e.detail }

// frameReader splits an execd event stream into frames. It accepts both what execd
// really sends (bare JSON objects, each followed by a blank line, or, for
// /metrics/watch, one per line with no blank line) and standard SSE ("event:",
// "data:" lines joined with "\n", "id:"/"retry:" fields, ":" comments, dispatch on a
// blank line). A bare JSON object is dispatched as soon as it is complete, so a
// terminal event is seen without waiting for the blank line after it. CRLF line ends
// are accepted. Anything else is a *frameError naming the offending bytes and their
// offset; the reader never panics.
type frameReader struct {
	br     *bufio.Reader
	max    int
	offset int64 // bytes consumed so far
	line   []byte

	// SSE state of the block being assembled.
	event   string
	data    []byte
	hasData bool
	// raw holds a bare JSON object spanning several lines; rawLines counts them.
	raw      []byte
	rawLines int
	// scratch is decodeFlat's buffer for strings with escapes.
	scratch []byte
}

// maxRawLines bounds a bare JSON object that spans lines (execd never sends one;
// the bound keeps the re-validation per line from going quadratic).
const maxRawLines = 256

// readers are the frame readers' 64 KiB buffers, reused from one stream to
// the next: a command's stream is short and its buffer would otherwise be most
// of what a round trip allocates.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

func newFrameReader(r io.Reader) *frameReader {
	br := readers.Get().(*bufio.Reader)
	br.Reset(r)
	return &frameReader{br: br, max: maxFrame}
}

// free returns the reader's buffer for reuse; the reader must not be used
// after. Every frame it returned stays valid: frames never alias the buffer.
func (r *frameReader) free() {
	if r.br == nil {
		return
	}
	r.br.Reset(nil)
	readers.Put(r.br)
	r.br = nil
}

// readLine returns the next line without its line end. At EOF a last unterminated
// line is returned before io.EOF. The line is valid until the next call: a line
// that fits the buffer is not copied.
func (r *frameReader) readLine() ([]byte, error) {
	chunk, err := r.br.ReadSlice('\n')
	r.offset += int64(len(chunk))
	if err == nil && len(chunk) <= r.max {
		return trimEOL(chunk), nil
	}
	r.line = r.line[:0]
	for first := true; ; first = false {
		if !first {
			chunk, err = r.br.ReadSlice('\n')
			r.offset += int64(len(chunk))
		}
		if len(r.line)+len(chunk) > r.max {
			return nil, &frameError{fmt.Sprintf("line longer than %d bytes at byte %d", r.max, r.offset)}
		}
		r.line = append(r.line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) && len(r.line) > 0 {
				return trimEOL(r.line), nil
			}
			return nil, err
		}
		return trimEOL(r.line), nil
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// next returns the next frame, io.EOF at a clean end, a *frameError for malformed
// input, or the underlying read error.
func (r *frameReader) next() (frame, error) {
	for {
		line, err := r.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) {
				if len(r.raw) > 0 {
					return frame{}, &frameError{fmt.Sprintf("stream ended inside a JSON object: %q", truncate(r.raw, 64))}
				}
				if r.hasData {
					return r.dispatchSSE(), nil
				}
			}
			return frame{}, err
		}
		// A bare JSON object, possibly spanning lines.
		if len(r.raw) > 0 || (!r.hasData && r.event == "" && startsJSON(line)) {
			if len(bytes.TrimSpace(line)) == 0 {
				return frame{}, &frameError{fmt.Sprintf("invalid JSON before byte %d: %q", r.offset, truncate(r.raw, 64))}
			}
			if len(r.raw)+len(line) > r.max {
				return frame{}, &frameError{fmt.Sprintf("event longer than %d bytes at byte %d", r.max, r.offset)}
			}
			if len(r.raw) > 0 {
				r.raw = append(r.raw, '\n')
			}
			r.raw = append(r.raw, line...)
			r.rawLines++
			// Decoded in the one pass that also finds whether the object is
			// complete; only other objects are scanned by encoding/json,
			// which then checks them again as it decodes them.
			var f frame
			res := decodeFlat(r.raw, &f.ev, &r.scratch)
			switch res {
			case flatOK:
				f.data, f.decoded = r.raw, true
				r.raw, r.rawLines = nil, 0
				return f, nil
			case flatOther:
				if json.Valid(r.raw) {
					f := frame{data: r.raw}
					r.raw, r.rawLines = nil, 0
					return f, nil
				}
			}
			if r.rawLines >= maxRawLines {
				return frame{}, &frameError{fmt.Sprintf("JSON object spans more than %d lines at byte %d", maxRawLines, r.offset)}
			}
			if res != flatIncomplete && !couldContinue(r.raw) {
				return frame{}, &frameError{fmt.Sprintf("invalid JSON before byte %d: %q", r.offset, truncate(r.raw, 64))}
			}
			continue
		}
		switch {
		case len(line) == 0:
			if r.hasData {
				return r.dispatchSSE(), nil
			}
			r.event = "" // an event: without data dispatches nothing
		case line[0] == ':':
			// comment / keep-alive
		default:
			name, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(name) {
			case "data":
				if len(r.data)+len(value)+1 > r.max {
					return frame{}, &frameError{fmt.Sprintf("event longer than %d bytes at byte %d", r.max, r.offset)}
				}
				if r.hasData {
					r.data = append(r.data, '\n')
				}
				r.data = append(r.data, value...)
				r.hasData = true
			case "event":
				r.event = string(value)
			case "id", "retry":
			default:
				return frame{}, &frameError{fmt.Sprintf("unexpected line before byte %d: %q", r.offset, truncate(line, 64))}
			}
		}
	}
}

func (r *frameReader) dispatchSSE() frame {
	f := frame{event: r.event, data: r.data}
	r.event, r.data, r.hasData = "", nil, false
	return f
}

func startsJSON(line []byte) bool {
	t := bytes.TrimLeft(line, " \t")
	return len(t) > 0 && t[0] == '{'
}

// couldContinue reports whether an incomplete JSON prefix may still become valid with
// more lines: it fails fast on bytes that no continuation can fix.
func couldContinue(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		_, err := dec.Token()
		if err == nil {
			continue
		}
		return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	}
}
