package events

import (
	"encoding/binary"
	"strconv"
	"unicode/utf8"
)

// Validate checks the payloads written most (every output chunk, every exec
// start and end) with payloadFits, one strict pass over the bytes, instead of
// decoding them with encoding/json: several times faster for a typical
// exec.output. A differential fuzz test keeps its verdicts equal to
// encoding/json's.

// fieldKind is the JSON type a payload field must have.
type fieldKind uint8

const (
	kindString fieldKind = iota + 1
	kindInt
	kindBase64 // []byte: a string of standard, padded base64
)

// payloadFields lists, for the events with the most common payloads, the
// fields of the payload type that payloadFits checks. Names are the exact
// JSON names; a field missing here (a map) sends the payload to encoding/json.
var payloadFields = map[Event]map[string]fieldKind{
	ExecOutput:    {"seq": kindInt, "type": kindString, "text": kindString, "data": kindBase64},
	ExecStarted:   {"seq": kindInt, "kind": kindString, "cmd": kindString, "code": kindString, "fingerprint": kindString},
	ExecCompleted: {"seq": kindInt, "exitCode": kindInt},
	SandboxCreated: {"sandboxId": kindString, "runId": kindString, "resumedFrom": kindString, "snapshotId": kindString,
		"forkedFrom": kindString, "fromSnapshot": kindString, "fromEnvironment": kindString, "egressDefault": kindString},
	CheckpointCreated: {"snapshotId": kindString, "name": kindString},
}

// payloadFits reports whether payload is valid JSON that json.Unmarshal
// surely decodes into ev's payload type: an object whose keys are all exact
// field names of payloadFields[ev], each with a value of the field's kind (an
// integer in range for int, a well-formed string for string). false means
// "not known", not "invalid": the caller then decodes with encoding/json.
func payloadFits(ev Event, payload []byte) bool {
	fields := payloadFields[ev]
	if fields == nil {
		return false
	}
	s := scanner{b: payload}
	s.ws()
	if !s.eat('{') {
		return false
	}
	s.ws()
	if s.eat('}') {
		return s.end()
	}
	for {
		s.ws()
		key, ok := s.plainString()
		if !ok {
			return false
		}
		s.ws()
		if !s.eat(':') {
			return false
		}
		s.ws()
		switch fields[string(key)] {
		case kindInt:
			if !s.integer() {
				return false
			}
		case kindString:
			if !s.validString() {
				return false
			}
		case kindBase64:
			if !s.base64String() {
				return false
			}
		default:
			return false
		}
		s.ws()
		if s.eat(',') {
			continue
		}
		if s.eat('}') {
			return s.end()
		}
		return false
	}
}

// scanner walks JSON bytes for payloadFits.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// plainString reads a string without escapes, control characters or invalid
// UTF-8 (an object key that can only equal a field name verbatim).
func (s *scanner) plainString() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			str := s.b[start:s.i]
			s.i++
			return str, utf8.Valid(str)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// validString moves past a JSON string and reports whether it is well-formed:
// no control characters, and escapes only \" \\ \/ \b \f \n \r \t or \u with
// four hex digits. (Like encoding/json, it does not require valid UTF-8.)
func (s *scanner) validString() bool {
	if !s.eat('"') {
		return false
	}
	for s.i < len(s.b) {
		s.plain()
		if s.i >= len(s.b) {
			break
		}
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return false
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) || !isHex4(s.b[s.i+2:s.i+6]) {
					return false
				}
				s.i += 6
			default:
				return false
			}
		default:
			s.i++
		}
	}
	return false
}

// base64String moves past a JSON string that encoding/json surely decodes
// into a []byte: standard base64 in quanta of four, '=' padding only in the
// last. A string with an escape or a line break (which base64 skips) is
// reported false, not known.
func (s *scanner) base64String() bool {
	if !s.eat('"') {
		return false
	}
	start := s.i
	for s.i < len(s.b) && base64Char(s.b[s.i]) {
		s.i++
	}
	n := s.i - start
	switch {
	case s.i+2 < len(s.b) && s.b[s.i] == '=' && s.b[s.i+1] == '=' && n%4 == 2:
		s.i += 2
	case s.i+1 < len(s.b) && s.b[s.i] == '=' && n%4 == 3:
		s.i++
	case n%4 != 0:
		return false
	}
	return s.eat('"')
}

func base64Char(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/'
}

// Bytes repeated across a word, for plain.
const (
	ones   = 0x0101010101010101
	highs  = 0x8080808080808080
	quotes = '"' * ones
	slashs = '\\' * ones
	spaces = 0x20 * ones
)

// plain moves past the bytes of a string that need no look (neither '"' nor
// '\\' nor a control character), eight at a time: a long output line costs
// a few word operations per eight bytes instead of a switch per byte. It stops
// at the word that holds such a byte (the caller looks at it byte by byte).
func (s *scanner) plain() {
	b, i := s.b, s.i
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		// A byte below 0x20, or one equal to '"' or '\\' (XOR makes it zero),
		// sets its high bit in special; a byte of 0x80 or more never does.
		q, bs := x^quotes, x^slashs
		if ((x-spaces)&^x|(q-ones)&^q|(bs-ones)&^bs)&highs != 0 {
			break
		}
	}
	s.i = i
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// integer moves past a JSON integer (no fraction or exponent, no leading
// zero) that fits an int.
func (s *scanner) integer() bool {
	start := s.i
	s.eat('-')
	first := s.i
	n := s.digits()
	if n == 0 || n > 1 && s.b[first] == '0' {
		return false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return false
	}
	if n < 10 || strconv.IntSize == 64 && n < 19 {
		return true // fits without parsing
	}
	_, err := strconv.ParseInt(string(s.b[start:s.i]), 10, strconv.IntSize)
	return err == nil
}

// ValidJSON reports whether b is one valid JSON value (surrounding
// whitespace allowed): json.Valid's answer, in one pass of a hand scanner
// several times faster than encoding/json's. Readers of the ledger use it to
// check the payloads they decode.
func ValidJSON(b []byte) bool {
	n, ok := JSONValueLen(b)
	return ok && (&scanner{b: b, i: n}).end()
}

// JSONValueLen returns the length of the JSON value b starts with (leading
// whitespace included) and whether that value is valid, so a decoder finds
// where an embedded value ends and checks it in one pass: when ok,
// ValidJSON(b[:n]) holds.
func JSONValueLen(b []byte) (n int, ok bool) {
	s := scanner{b: b}
	s.ws()
	if !s.value(0) {
		return 0, false
	}
	return s.i, true
}

// maxDepth is encoding/json's nesting limit: deeper input is invalid.
const maxDepth = 10000

// value moves past one JSON value and reports whether it is well-formed.
func (s *scanner) value(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; c {
	case '{', '[':
		if depth >= maxDepth {
			return false
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		s.i++
		s.ws()
		if s.eat(closer) {
			return true
		}
		for {
			s.ws()
			if c == '{' {
				if !s.validString() {
					return false
				}
				s.ws()
				if !s.eat(':') {
					return false
				}
				s.ws()
			}
			if !s.value(depth + 1) {
				return false
			}
			s.ws()
			if s.eat(',') {
				continue
			}
			return s.eat(closer)
		}
	case '"':
		return s.validString()
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		return s.number()
	}
}

func (s *scanner) lit(w string) bool {
	if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
		s.i += len(w)
		return true
	}
	return false
}

// number moves past a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	s.eat('-')
	switch {
	case s.eat('0'):
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return false
	}
	if s.eat('.') && s.digits() == 0 {
		return false
	}
	if s.eat('e') || s.eat('E') {
		if !s.eat('+') {
			s.eat('-')
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

// digits moves past a run of decimal digits and returns its length.
func (s *scanner) digits() int {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}
