package events

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// errNotJSON is the cause of a payload that AppendCanonicalJSON cannot parse.
var errNotJSON = errors.New("not valid JSON")

// maxCanonicalDepth bounds the nesting AppendCanonicalJSON follows.
const maxCanonicalDepth = 1000

// AppendCanonicalJSON appends the canonical form of the JSON value js to dst:
// no whitespace; object members sorted by the UTF-8 bytes of their keys as
// written (keys that differ only in invalid UTF-8 are one), a repeated key
// keeping its last value (as Postgres JSONB does); strings with
// only '"', '\\' and control characters escaped (\b \f \n \r \t, others as
// \u00xx in lowercase hex), everything else as UTF-8, invalid UTF-8 and lone
// surrogates as U+FFFD; numbers as the shortest decimal that reads back to
// the same float64, in the notation of ECMAScript's Number.prototype.toString
// (RFC 8785 §3.2.2.3), -0 as 0. It is what a chain hash covers (ChainHash), so
// that a payload keeps its hash through a store that reformats JSON.
func AppendCanonicalJSON(dst, js []byte) ([]byte, error) {
	var p canon
	return p.appendCanonical(dst, js)
}

// appendCanonical is AppendCanonicalJSON reusing p's buffers.
func (p *canon) appendCanonical(dst, js []byte) ([]byte, error) {
	v, err := p.canonical(js)
	if err != nil {
		return dst, err
	}
	return append(dst, v...), nil
}

// canonical returns the canonical form of js in p's buffer (valid until
// p's next use).
func (p *canon) canonical(js []byte) ([]byte, error) {
	p.b, p.i = js, 0
	p.ms, p.vals = p.ms[:0], p.vals[:0]
	p.ws()
	if err := p.value(0); err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, errNotJSON
	}
	p.b = nil
	return p.vals, nil
}

// canon writes the canonical form onto vals, a stack: each value is
// appended at its top; an object pushes its members' keys and values
// there, then writes itself above them and moves that down over them.
type canon struct {
	b    []byte
	i    int
	ms   []member // the members of the objects being read, a stack
	vals []byte
	tmp  []byte // the last escaped string, decoded
}

func (p *canon) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *canon) value(depth int) error {
	if p.i >= len(p.b) || depth > maxCanonicalDepth {
		return errNotJSON
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, plain, err := p.str()
		switch {
		case err != nil:
			return err
		case plain: // its canonical form is itself
			p.vals = append(append(append(p.vals, '"'), s...), '"')
		default:
			p.vals = appendCanonicalString(p.vals, s)
		}
		return nil
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	}
	return errNotJSON
}

func (p *canon) literal(lit string) error {
	if !strings.HasPrefix(string(p.b[p.i:]), lit) {
		return errNotJSON
	}
	p.i += len(lit)
	p.vals = append(p.vals, lit...)
	return nil
}

// member is one member of an object: its key and its canonical value,
// vals[kOff:kEnd] and vals[kEnd:vEnd] (the key's bytes pushed first).
type member struct {
	kOff, kEnd, vEnd int
}

func (p *canon) object(depth int) error {
	p.i++ // {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		p.vals = append(p.vals, "{}"...)
		return nil
	}
	msBase, base := len(p.ms), len(p.vals)
	for {
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return errNotJSON
		}
		k, plain, err := p.str()
		if err != nil {
			return err
		}
		m := member{kOff: len(p.vals)}
		if plain {
			p.vals = append(p.vals, k...)
		} else {
			// Sorted and compared as written out: keys that differ only
			// in their invalid UTF-8 are one key.
			p.vals = appendValidUTF8(p.vals, k)
		}
		m.kEnd = len(p.vals)
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return errNotJSON
		}
		p.i++
		p.ws()
		if err := p.value(depth + 1); err != nil {
			return err
		}
		m.vEnd = len(p.vals)
		p.ms = append(p.ms, m)
		p.ws()
		if p.i >= len(p.b) {
			return errNotJSON
		}
		if p.b[p.i] == ',' {
			p.i++
			continue
		}
		if p.b[p.i] != '}' {
			return errNotJSON
		}
		p.i++
		break
	}
	ms := p.ms[msBase:]
	key := func(m member) []byte { return p.vals[m.kOff:m.kEnd] }
	// Stable: of repeated keys, the last one stays last.
	slices.SortStableFunc(ms, func(a, b member) int { return bytes.Compare(key(a), key(b)) })
	top := len(p.vals)
	out := append(p.vals, '{')
	first := true
	for i, m := range ms {
		if i+1 < len(ms) && bytes.Equal(key(ms[i+1]), key(m)) {
			continue // a later value of the same key wins
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = appendCanonicalString(out, out[m.kOff:m.kEnd])
		out = append(out, ':')
		out = append(out, out[m.kEnd:m.vEnd]...)
	}
	out = append(out, '}')
	n := copy(out[base:], out[top:]) // down over the members
	p.vals, p.ms = out[:base+n], p.ms[:msBase]
	return nil
}

func (p *canon) array(depth int) error {
	p.i++ // [
	p.ws()
	p.vals = append(p.vals, '[')
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		p.vals = append(p.vals, ']')
		return nil
	}
	for n := 0; ; n++ {
		if n > 0 {
			p.vals = append(p.vals, ',')
		}
		p.ws()
		if err := p.value(depth + 1); err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.b) {
			return errNotJSON
		}
		if p.b[p.i] == ',' {
			p.i++
			continue
		}
		if p.b[p.i] != ']' {
			return errNotJSON
		}
		p.i++
		p.vals = append(p.vals, ']')
		return nil
	}
}

// str decodes the JSON string at p.i: one without escapes is returned as a
// slice of the input, one with escapes decoded into p.tmp (valid until the
// next str). plain reports a string of ASCII without escapes, which is its
// own canonical form.
func (p *canon) str() (s []byte, plain bool, err error) {
	p.i++ // "
	start := p.i
	p.i += plainPrefix(p.b[p.i:])
	plain = true
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s = p.b[start:p.i]
			p.i++
			return s, plain, nil
		}
		if c == '\\' {
			t, err := p.strSlow(append(p.tmp[:0], p.b[start:p.i]...))
			if err != nil {
				return nil, false, err
			}
			p.tmp = t
			return t, false, nil
		}
		if c < 0x20 {
			return nil, false, errNotJSON
		}
		if c >= utf8.RuneSelf {
			plain = false
		}
		p.i++
	}
	return nil, false, errNotJSON
}

// strSlow continues str from an escape.
func (p *canon) strSlow(dst []byte) ([]byte, error) {
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return dst, nil
		case c < 0x20:
			return nil, errNotJSON
		case c != '\\':
			dst = append(dst, c)
			p.i++
			continue
		}
		var ok bool
		if dst, p.i, ok = appendUnescaped(dst, p.b, p.i); !ok {
			return nil, errNotJSON
		}
	}
	return nil, errNotJSON
}

// number checks the JSON number grammar at p.i and appends its canonical form.
func (p *canon) number() error {
	start, neg := p.i, 0
	if p.b[p.i] == '-' {
		p.i++
		neg = 1
	}
	digits := func() int {
		n := 0
		for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return errNotJSON
	}
	frac, exp := false, false
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		frac = true
		if digits() == 0 {
			return errNotJSON
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		exp = true
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return errNotJSON
		}
	}
	// An integer of at most 15 digits is exact in a float64 and below 1e21,
	// so ECMAScript writes it as JSON does, "-0" aside: kept as written,
	// without ParseFloat and AppendFloat (most numbers of a payload, a
	// step's seq and an exit code, are such; with their large frames they
	// also grew the stack of every exec's goroutine that hashed them).
	if !frac && !exp && p.i-start-neg <= 15 {
		if p.i-start == 2 && neg == 1 && p.b[start+1] == '0' {
			p.vals = append(p.vals, '0')
		} else {
			p.vals = append(p.vals, p.b[start:p.i]...)
		}
		return nil
	}
	lit := string(p.b[start:p.i])
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) {
		p.vals = append(p.vals, lit...) // out of float64's range: kept as written
		return nil
	}
	p.vals = appendES6Number(p.vals, f)
	return nil
}

// appendES6Number appends f as ECMAScript's Number.prototype.toString does.
func appendES6Number(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0')
	}
	if a := math.Abs(f); a >= 1e21 || a < 1e-6 {
		s := strconv.AppendFloat(nil, f, 'e', -1, 64) // d.ddde±XX
		mant, exp, _ := strings.Cut(string(s), "e")
		dst = append(dst, mant...)
		dst = append(dst, 'e')
		if exp[0] == '+' {
			dst = append(dst, '+')
		} else {
			dst = append(dst, '-')
		}
		exp = strings.TrimLeft(exp[1:], "0")
		return append(dst, exp...)
	}
	return strconv.AppendFloat(dst, f, 'f', -1, 64)
}

// appendCanonicalString appends s (UTF-8, maybe invalid) as a canonical JSON string.
func appendCanonicalString(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := plainPrefix(s); i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, s[start:i]...)
				dst = append(dst, "\uFFFD"...)
				i++
				start = i
				continue
			}
			i += size
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			const hexd = "0123456789abcdef"
			dst = append(dst, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendValidUTF8 appends s with each byte that is not part of valid UTF-8
// replaced by U+FFFD, as appendCanonicalString writes it.
func appendValidUTF8(dst, s []byte) []byte {
	for len(s) > 0 {
		r, size := utf8.DecodeRune(s)
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, "\uFFFD"...)
		} else {
			dst = append(dst, s[:size]...)
		}
		s = s[size:]
	}
	return dst
}

// plainPrefix returns the length of s's leading run of bytes that a JSON
// string holds as they are, unescaped, in either direction: ASCII from 0x20,
// but '"' and '\\'. It tests eight bytes at a time, rounded down to whole
// words; the caller's byte loop goes on from there.
func plainPrefix(s []byte) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		q, bs := x^(ones*'"'), x^(ones*'\\')
		// Each term is non-zero when some byte of x is below 0x20, a '"'
		// (a zero byte of q), a '\\' (of bs), or 0x80 and above.
		if (x-ones*0x20)&^x&highs|(q-ones)&^q&highs|(bs-ones)&^bs&highs|x&highs != 0 {
			break
		}
	}
	return i
}
