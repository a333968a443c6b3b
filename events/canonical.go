package events

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// errNotJSON is the cause of a payload that AppendCanonicalJSON cannot parse.
var errNotJSON = errors.New("not valid JSON")

// maxCanonicalDepth bounds the nesting AppendCanonicalJSON follows.
const maxCanonicalDepth = 1000

// AppendCanonicalJSON appends the canonical form of the JSON value js to dst:
// no whitespace; object members sorted by the UTF-8 bytes of their keys, a
// repeated key keeping its last value (as Postgres JSONB does); strings with
// only '"', '\\' and control characters escaped (\b \f \n \r \t, others as
// \u00xx in lowercase hex), everything else as UTF-8, invalid UTF-8 and lone
// surrogates as U+FFFD; numbers as the shortest decimal that reads back to
// the same float64, in the notation of ECMAScript's Number.prototype.toString
// (RFC 8785 §3.2.2.3), -0 as 0. It is what a chain hash covers (ChainHash), so
// that a payload keeps its hash through a store that reformats JSON.
func AppendCanonicalJSON(dst, js []byte) ([]byte, error) {
	p := canon{b: js}
	p.ws()
	out, err := p.value(dst, 0)
	if err != nil {
		return dst, err
	}
	p.ws()
	if p.i != len(p.b) {
		return dst, errNotJSON
	}
	return out, nil
}

type canon struct {
	b []byte
	i int
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

func (p *canon) value(dst []byte, depth int) ([]byte, error) {
	if p.i >= len(p.b) || depth > maxCanonicalDepth {
		return dst, errNotJSON
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(dst, depth)
	case c == '[':
		return p.array(dst, depth)
	case c == '"':
		s, err := p.str(nil)
		if err != nil {
			return dst, err
		}
		return appendCanonicalString(dst, s), nil
	case c == 't':
		return p.literal(dst, "true")
	case c == 'f':
		return p.literal(dst, "false")
	case c == 'n':
		return p.literal(dst, "null")
	case c == '-' || '0' <= c && c <= '9':
		return p.number(dst)
	}
	return dst, errNotJSON
}

func (p *canon) literal(dst []byte, lit string) ([]byte, error) {
	if !strings.HasPrefix(string(p.b[p.i:]), lit) {
		return dst, errNotJSON
	}
	p.i += len(lit)
	return append(dst, lit...), nil
}

type member struct {
	key string
	val []byte
}

func (p *canon) object(dst []byte, depth int) ([]byte, error) {
	p.i++ // {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return append(dst, "{}"...), nil
	}
	var ms []member
	for {
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return dst, errNotJSON
		}
		k, err := p.str(nil)
		if err != nil {
			return dst, err
		}
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return dst, errNotJSON
		}
		p.i++
		p.ws()
		v, err := p.value(nil, depth+1)
		if err != nil {
			return dst, err
		}
		ms = append(ms, member{string(k), v})
		p.ws()
		if p.i >= len(p.b) {
			return dst, errNotJSON
		}
		if p.b[p.i] == ',' {
			p.i++
			continue
		}
		if p.b[p.i] != '}' {
			return dst, errNotJSON
		}
		p.i++
		break
	}
	// Stable: of repeated keys, the last one stays last.
	slices.SortStableFunc(ms, func(a, b member) int { return strings.Compare(a.key, b.key) })
	dst = append(dst, '{')
	first := true
	for i, m := range ms {
		if i+1 < len(ms) && ms[i+1].key == m.key {
			continue // a later value of the same key wins
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendCanonicalString(dst, []byte(m.key))
		dst = append(dst, ':')
		dst = append(dst, m.val...)
	}
	return append(dst, '}'), nil
}

func (p *canon) array(dst []byte, depth int) ([]byte, error) {
	p.i++ // [
	p.ws()
	dst = append(dst, '[')
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return append(dst, ']'), nil
	}
	for n := 0; ; n++ {
		if n > 0 {
			dst = append(dst, ',')
		}
		p.ws()
		var err error
		if dst, err = p.value(dst, depth+1); err != nil {
			return dst, err
		}
		p.ws()
		if p.i >= len(p.b) {
			return dst, errNotJSON
		}
		if p.b[p.i] == ',' {
			p.i++
			continue
		}
		if p.b[p.i] != ']' {
			return dst, errNotJSON
		}
		p.i++
		return append(dst, ']'), nil
	}
}

// str decodes the JSON string at p.i into dst (its UTF-8 bytes, escapes
// resolved). A string without escapes is returned as a slice of the input.
func (p *canon) str(dst []byte) ([]byte, error) {
	p.i++ // "
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := p.b[start:p.i]
			p.i++
			if dst == nil {
				return s, nil
			}
			return append(dst, s...), nil
		}
		if c == '\\' {
			return p.strSlow(append(dst, p.b[start:p.i]...))
		}
		if c < 0x20 {
			return nil, errNotJSON
		}
		p.i++
	}
	return nil, errNotJSON
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
		if p.i+1 >= len(p.b) {
			return nil, errNotJSON
		}
		e := p.b[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			dst = append(dst, e)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return nil, errNotJSON
			}
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					if lo, ok := p.hex4(); ok {
						if d := utf16.DecodeRune(r, lo); d != utf8.RuneError {
							r2 = d
						} else {
							p.i = save // not a pair: the next escape stands alone
						}
					} else {
						return nil, errNotJSON
					}
				}
				r = r2
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return nil, errNotJSON
		}
	}
	return nil, errNotJSON
}

func (p *canon) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// number checks the JSON number grammar at p.i and appends its canonical form.
func (p *canon) number(dst []byte) ([]byte, error) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
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
		return dst, errNotJSON
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return dst, errNotJSON
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return dst, errNotJSON
		}
	}
	lit := string(p.b[start:p.i])
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) {
		return append(dst, lit...), nil // out of float64's range: kept as written
	}
	return appendES6Number(dst, f), nil
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
	for i := 0; i < len(s); {
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
