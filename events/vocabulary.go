package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The event names the TypeScript SDK (@alineo-labs/sandbox 0.2.0) writes. Each
// is an alias of one of ours: every reader of this module treats an entry of
// one name as an entry of the other (see Event.Canonical). The TypeScript SDK
// has no names for the egress and credential events.
const (
	TSSandboxCreated    Event = "sandbox_created"
	TSExecStart         Event = "exec_start"
	TSExecEvent         Event = "exec_event"
	TSExecComplete      Event = "exec_complete"
	TSCheckpointCreated Event = "checkpoint_created"
	TSSandboxPaused     Event = "sandbox_paused"
	TSSandboxResumed    Event = "sandbox_resumed"
	TSSandboxClosed     Event = "sandbox_closed"
)

// Canonical returns the name of this module's vocabulary (the dotted names of
// the storage docs) for ev: the dotted name of a TypeScript SDK name, and ev
// itself for every other name. An exec_event is canonically an exec.output;
// it is output only when its type is stdout or stderr (OutputStream).
func (ev Event) Canonical() Event {
	if len(ev) == 0 || strings.IndexByte(string(ev), '.') >= 0 {
		return ev // a dotted name, the common case: no lookup
	}
	switch ev {
	case TSSandboxCreated:
		return SandboxCreated
	case TSExecStart:
		return ExecStarted
	case TSExecEvent:
		return ExecOutput
	case TSExecComplete:
		return ExecCompleted
	case TSCheckpointCreated:
		return CheckpointCreated
	case TSSandboxPaused:
		return SandboxPaused
	case TSSandboxResumed:
		return SandboxResumed
	case TSSandboxClosed:
		return SandboxClosed
	}
	return ev
}

// Is reports whether ev names the event want in either vocabulary: it is
// ev.Canonical() == want.Canonical().
func (ev Event) Is(want Event) bool { return ev.Canonical() == want.Canonical() }

// Names returns the names ev is stored under in either vocabulary: its
// canonical name, then its TypeScript SDK name if it has one. A store queries
// with all of them.
func Names(ev Event) []Event {
	c := ev.Canonical()
	if ts := TypeScript.Name(c); ts != c {
		return []Event{c, ts}
	}
	return []Event{c}
}

// Vocabulary is the set of event names (and payload shapes) a writer stores.
// The zero value is Dotted.
type Vocabulary uint8

const (
	// Dotted is the vocabulary of the storage docs (storage.md): sandbox.created,
	// exec.started, exec.output... with this module's payloads. The default.
	Dotted Vocabulary = iota
	// TypeScript is exactly what the TypeScript SDK 0.2.0 writes: its names
	// (sandbox_created, exec_start, exec_event, exec_complete,
	// checkpoint_created, sandbox_paused, sandbox_resumed, sandbox_closed) and
	// its payload fields (see Vocabulary.Encode), so that TypeScript processes
	// read what ours write. Events it has no name for (egress.*, credential.*)
	// keep their dotted names; the TypeScript SDK reads none of them.
	TypeScript
)

// String returns "dotted" or "typescript".
func (v Vocabulary) String() string {
	switch v {
	case Dotted:
		return "dotted"
	case TypeScript:
		return "typescript"
	}
	return fmt.Sprintf("Vocabulary(%d)", uint8(v))
}

// ParseVocabulary parses "dotted" (or "") and "typescript" (or "ts"), in any case.
func ParseVocabulary(s string) (Vocabulary, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "dotted":
		return Dotted, nil
	case "typescript", "ts":
		return TypeScript, nil
	}
	return Dotted, fmt.Errorf("unknown vocabulary %q, want dotted or typescript", s)
}

// Valid reports whether v is Dotted or TypeScript.
func (v Vocabulary) Valid() bool { return v == Dotted || v == TypeScript }

// Name returns the name v stores the event ev under. Dotted stores every name
// as given; TypeScript stores this module's names under their TypeScript SDK
// aliases, and every other name as given.
func (v Vocabulary) Name(ev Event) Event {
	if v != TypeScript {
		return ev
	}
	switch ev {
	case SandboxCreated:
		return TSSandboxCreated
	case ExecStarted:
		return TSExecStart
	case ExecOutput:
		return TSExecEvent
	case ExecCompleted:
		return TSExecComplete
	case CheckpointCreated:
		return TSCheckpointCreated
	case SandboxPaused:
		return TSSandboxPaused
	case SandboxResumed:
		return TSSandboxResumed
	case SandboxClosed:
		return TSSandboxClosed
	}
	return ev
}

// tsExecStart is the TypeScript SDK's exec_start payload: {cmd, seq} for a
// command, {code, seq} for code, {cmd, seq, interactive, cwd, env} for a
// command on a terminal.
type tsExecStart struct {
	Cmd         *string           `json:"cmd,omitempty"`
	Code        *string           `json:"code,omitempty"`
	Seq         int               `json:"seq"`
	Interactive bool              `json:"interactive,omitempty"`
	Cwd         string            `json:"cwd,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
}

// tsExecEvent is the TypeScript SDK's exec_event payload for a stdout or
// stderr chunk: {seq, type, text, timestamp}.
type tsExecEvent struct {
	Seq       int    `json:"seq"`
	Type      Stream `json:"type"`
	Text      string `json:"text"`
	Timestamp int64  `json:"timestamp"`
}

// Encode returns e as v stores it. Dotted returns e unchanged. TypeScript
// renames the event (Name) and writes the payload fields of the TypeScript
// SDK: exec_start {cmd | code, seq} (no kind or fingerprint: a reader computes
// the fingerprint from the text), exec_event {seq, type, text, timestamp} (the
// chunk's text, without the exact bytes of output that is not valid UTF-8,
// which the TypeScript SDK cannot store either; timestamp is e.Ts). Other
// payloads have the TypeScript SDK's fields already and are kept as they are.
// Entries named in the TypeScript vocabulary already are kept as they are. e
// must have passed Validate; an error means a payload did not decode.
func (v Vocabulary) Encode(e Entry) (Entry, error) {
	if v != TypeScript {
		return e, nil
	}
	name := v.Name(e.Event)
	if name == e.Event {
		return e, nil
	}
	switch e.Event {
	case ExecStarted:
		if len(e.Payload) == 0 || bytes.Equal(e.Payload, []byte("null")) {
			break
		}
		var p ExecStartedPayload
		if err := e.Decode(&p); err != nil {
			return e, err
		}
		text := p.Text()
		ts := tsExecStart{Seq: p.Seq, Interactive: p.Interactive, Cwd: p.Cwd, Env: p.Env}
		if p.Kind == KindCode || (p.Kind == "" && p.Cmd == "" && p.Code != "") {
			ts.Code = &text
		} else {
			ts.Cmd = &text
		}
		b, err := json.Marshal(ts)
		if err != nil {
			return e, err
		}
		e.Payload = b
	case ExecOutput:
		if len(e.Payload) == 0 || bytes.Equal(e.Payload, []byte("null")) {
			break
		}
		var p ExecOutputPayload
		if err := e.Decode(&p); err != nil {
			return e, err
		}
		b, err := json.Marshal(tsExecEvent{Seq: p.Seq, Type: p.Type, Text: p.Text, Timestamp: e.Ts})
		if err != nil {
			return e, err
		}
		e.Payload = b
	}
	e.Event = name
	return e, nil
}

// OutputStream returns the stream of an exec.output (or exec_event) payload
// and whether it is output at all: only the types stdout and stderr are. The
// TypeScript SDK records every execd event as an exec_event (init, ping,
// error, execution_complete, stdin...); those are kept in the ledger and are
// not output.
func OutputStream(payload json.RawMessage) (Stream, bool) {
	var p struct {
		Type Stream `json:"type"`
	}
	if json.Unmarshal(UnwrapPayload(payload), &p) != nil {
		return "", false
	}
	return p.Type, p.Type == Stdout || p.Type == Stderr
}

// UnwrapPayload returns the JSON a payload holds. A payload stored as a JSON
// string holding JSON text (as the TypeScript SDK's Postgres adapter stores
// every payload, a JSONB string) is decoded once more into that JSON; any
// other payload is returned as it is. A string whose content is not a JSON
// object or array is a plain string payload and is returned as it is too.
func UnwrapPayload(p json.RawMessage) json.RawMessage {
	if len(p) < 2 || p[0] != '"' {
		return p
	}
	s, ok := unquote(p)
	if !ok {
		return p
	}
	t := bytes.TrimSpace(s)
	if len(t) == 0 || (t[0] != '{' && t[0] != '[') || !json.Valid(t) {
		return p
	}
	return json.RawMessage(t)
}

// unquote decodes the JSON string literal q (quotes included), or reports
// false when q is not exactly one. It is encoding/json's string decoding
// without the reflection: a payload read back from a JSONB string is decoded
// on every read.
func unquote(q []byte) ([]byte, bool) {
	q = bytes.Trim(q, " \t\r\n") // JSON's white space
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		return nil, false
	}
	in := q[1 : len(q)-1]
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); {
		c := in[i]
		switch {
		case c == '"' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			// Invalid UTF-8 becomes U+FFFD byte by byte, as in encoding/json.
			r, size := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, in[i:i+size]...)
			}
			i += size
		case c != '\\':
			out = append(out, c)
			i++
		default:
			var ok bool
			if out, i, ok = appendUnescaped(out, in, i); !ok {
				return nil, false
			}
		}
	}
	return out, true
}

// appendUnescaped appends the character of the escape sequence at in[i]
// (a backslash) to dst, and returns the index after the sequence, or false
// when in[i:] starts no valid escape. As in encoding/json, a surrogate that
// is not the first of a valid pair becomes U+FFFD, and the escape after it,
// if not its pair's second, stands alone.
func appendUnescaped(dst, in []byte, i int) ([]byte, int, bool) {
	if i+1 >= len(in) {
		return nil, 0, false
	}
	switch e := in[i+1]; e {
	case '"', '\\', '/':
		return append(dst, e), i + 2, true
	case 'b':
		return append(dst, '\b'), i + 2, true
	case 'f':
		return append(dst, '\f'), i + 2, true
	case 'n':
		return append(dst, '\n'), i + 2, true
	case 'r':
		return append(dst, '\r'), i + 2, true
	case 't':
		return append(dst, '\t'), i + 2, true
	case 'u':
		r, ok := hex4(in[i+2:])
		if !ok {
			return nil, 0, false
		}
		i += 6
		if utf16.IsSurrogate(r) {
			lo, pair := rune(0), false
			if i+1 < len(in) && in[i] == '\\' && in[i+1] == 'u' {
				if lo, pair = hex4(in[i+2:]); !pair {
					return nil, 0, false
				}
			}
			if d := utf16.DecodeRune(r, lo); pair && d != utf8.RuneError {
				r, i = d, i+6
			} else {
				r = utf8.RuneError
			}
		}
		return utf8.AppendRune(dst, r), i, true
	}
	return nil, 0, false
}

// hex4 decodes the four hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
