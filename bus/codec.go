package bus

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/alineo-labs/alineo/events"
)

// The ledger's hot paths (every Append, every replayed message) encode and
// decode entries by hand: encoding/json costs several microseconds per entry,
// more than the publish itself. The format is exactly the JSON object of
// events.Marshal; anything the fast decoder does not recognise goes to
// encoding/json, and a differential fuzz test keeps the two in agreement.

// appendEntry appends e as a JSON object with events.Marshal's field names.
// e must be valid (events.Validate): its payload is appended verbatim.
func appendEntry(buf []byte, e events.Entry) []byte {
	if e.Seq != 0 {
		buf = append(buf, `{"seq":`...)
		buf = strconv.AppendUint(buf, e.Seq, 10)
		buf = append(buf, `,"ts":`...)
	} else {
		buf = append(buf, `{"ts":`...)
	}
	buf = strconv.AppendInt(buf, e.Ts, 10)
	buf = append(buf, `,"name":`...)
	buf = appendString(buf, e.Name)
	buf = append(buf, `,"sandboxId":`...)
	buf = appendString(buf, e.SandboxID)
	buf = append(buf, `,"stepIndex":`...)
	buf = strconv.AppendInt(buf, int64(e.StepIndex), 10)
	if e.Branch != nil {
		buf = append(buf, `,"branch":`...)
		buf = strconv.AppendInt(buf, int64(*e.Branch), 10)
	}
	buf = append(buf, `,"event":`...)
	buf = appendString(buf, string(e.Event))
	if len(e.Payload) > 0 {
		buf = append(buf, `,"payload":`...)
		buf = append(buf, e.Payload...)
	}
	if e.Error != "" {
		buf = append(buf, `,"error":`...)
		buf = appendString(buf, e.Error)
	}
	if e.Actor != "" {
		buf = append(buf, `,"actor":`...)
		buf = appendString(buf, e.Actor)
	}
	if e.PrevHash != "" {
		buf = append(buf, `,"prevHash":`...)
		buf = appendString(buf, e.PrevHash)
	}
	if e.Hash != "" {
		buf = append(buf, `,"hash":`...)
		buf = appendString(buf, e.Hash)
	}
	return append(buf, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD, as
// encoding/json does.
func appendString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// decodeEntry decodes data as encoding/json would into an events.Entry. It
// returns ok=false (and the caller falls back to encoding/json) on anything
// outside the shapes appendEntry writes: escapes in strings, unknown keys,
// floats, out-of-range numbers.
func decodeEntry(data []byte) (e events.Entry, ok bool) {
	return decodeEntryWith(data, nil)
}

// interner reuses the strings of the previous entry: a replay decodes one
// session, whose name and sandbox id repeat on every message, and whose
// entries' PrevHash is the Hash of the entry before (the hash chain). With
// names set (a Decoder's), session names are looked up there too: a
// projection reads many sessions' messages interleaved.
type interner struct {
	name, id, actor, hash string
	names                 map[string]string
}

// maxNames bounds an interner's names: past it the map starts again.
const maxNames = 4096

// sessionName is get for a session name, looked up in in.names when set.
func (in *interner) sessionName(b []byte, prev *string) (string, bool) {
	if in == nil || in.names == nil || string(b) == *prev {
		return in.get(b, prev)
	}
	if s, ok := in.names[string(b)]; ok {
		return s, true
	}
	s, ok := in.get(b, prev)
	if ok {
		if len(in.names) >= maxNames {
			clear(in.names)
		}
		in.names[s] = s
	}
	return s, ok
}

// Decoder is DecodeValidMsg for one reader of many messages, a projection's
// consumer: the strings messages repeat are reused instead of allocated for
// every entry (session names; the sandbox id, taken from the subject the
// reader has parsed already). The zero value is ready. Not safe for
// concurrent use.
type Decoder struct {
	in interner
}

// DecodeValid returns what DecodeValidMsg(data, seq) returns, errors
// included. sandboxID is the sandbox id the message's subject names ("" if
// not known): an entry of that sandbox shares the string.
func (d *Decoder) DecodeValid(data []byte, seq uint64, sandboxID string) (events.Entry, error) {
	if d.in.names == nil {
		d.in.names = make(map[string]string)
	}
	if sandboxID != "" && sandboxID != d.in.id && utf8.ValidString(sandboxID) {
		d.in.id = sandboxID // what get hands out unchecked must be valid UTF-8
	}
	e, err := decodeMsg(data, seq, &d.in)
	if err != nil {
		return events.Entry{}, err
	}
	if err := events.Validate(e); err != nil {
		return events.Entry{}, err
	}
	return e, nil
}

// get returns b, a string's bytes not checked for UTF-8 yet, as a string;
// ok is false when b is not valid UTF-8. A repeat of the previous string is
// neither checked nor copied again.
func (in *interner) get(b []byte, prev *string) (string, bool) {
	if in != nil && string(b) == *prev {
		return *prev, true
	}
	if !utf8.Valid(b) {
		return "", false
	}
	s := string(b)
	if in != nil {
		*prev = s
	}
	return s, true
}

// eventName returns ev's constant for a known event without allocating.
func eventName(b []byte) events.Event {
	for _, ev := range events.All {
		if string(b) == string(ev) {
			return ev
		}
	}
	return events.Event(b)
}

// decodeEntryWith is decodeEntry reusing strings through in (nil for none).
// The payload aliases data.
func decodeEntryWith(data []byte, in *interner) (e events.Entry, ok bool) {
	ok = decodeEntryInto(&e, data, in)
	return e, ok
}

// decodeEntryInto is decodeEntryWith decoding into *e, which must be zero:
// a replay decodes straight into its result's next slot, not into a copy.
func decodeEntryInto(e *events.Entry, data []byte, in *interner) (ok bool) {
	var nameBuf, idBuf, actorBuf, hashBuf string
	names, ids, actors, hashes := &nameBuf, &idBuf, &actorBuf, &hashBuf
	if in != nil {
		names, ids, actors, hashes = &in.name, &in.id, &in.actor, &in.hash
	}
	d := decoder{b: data}
	d.ws()
	if !d.eat('{') {
		return false
	}
	d.ws()
	if d.eat('}') {
		return d.end()
	}
	for {
		d.ws()
		// Compared below without a string of its own, nor a UTF-8 check: a
		// key equal to one of ours is ASCII, any other is refused anyway.
		key, ok := d.rawStr()
		if !ok {
			return false
		}
		d.ws()
		if !d.eat(':') {
			return false
		}
		d.ws()
		switch string(key) {
		case "seq":
			if e.Seq, ok = d.uint(); !ok {
				return false
			}
		case "ts":
			if e.Ts, ok = d.int(64); !ok {
				return false
			}
		case "stepIndex":
			n, ok := d.int(strconv.IntSize)
			if !ok {
				return false
			}
			e.StepIndex = int(n)
		case "branch":
			if d.lit("null") {
				e.Branch = nil
				break
			}
			n, ok := d.int(strconv.IntSize)
			if !ok {
				return false
			}
			b := int(n)
			e.Branch = &b
		case "name":
			if e.Name, ok = d.sessionName(in, names); !ok {
				return false
			}
		case "sandboxId":
			if e.SandboxID, ok = d.interned(in, ids); !ok {
				return false
			}
		case "event":
			b, ok := d.strBytes()
			if !ok {
				return false
			}
			e.Event = eventName(b)
		case "error":
			if e.Error, ok = d.str(); !ok {
				return false
			}
		case "actor":
			// A session's entries mostly share one actor: reused, as the
			// sandbox id is.
			if e.Actor, ok = d.interned(in, actors); !ok {
				return false
			}
		case "prevHash":
			// The previous entry's Hash, in a chained session read in order.
			if e.PrevHash, ok = d.interned(in, hashes); !ok {
				return false
			}
		case "hash":
			if e.Hash, ok = d.interned(in, hashes); !ok {
				return false
			}
		case "payload":
			n, ok := events.JSONValueLen(d.b[d.i:])
			if !ok {
				return false
			}
			raw := d.b[d.i : d.i+n]
			d.i += n
			e.Payload = json.RawMessage(raw[:len(raw):len(raw)])
		default:
			return false
		}
		d.ws()
		if d.eat(',') {
			continue
		}
		if d.eat('}') {
			return d.end()
		}
		return false
	}
}

type decoder struct {
	b []byte
	i int
}

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) eat(c byte) bool {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *decoder) lit(s string) bool {
	if len(d.b)-d.i >= len(s) && string(d.b[d.i:d.i+len(s)]) == s {
		d.i += len(s)
		return true
	}
	return false
}

func (d *decoder) end() bool {
	d.ws()
	return d.i == len(d.b)
}

// str reads a string without escapes, control characters or invalid UTF-8.
func (d *decoder) str() (string, bool) {
	b, ok := d.strBytes()
	if !ok {
		return "", false
	}
	return string(b), true
}

// strBytes is str returning the bytes inside data.
func (d *decoder) strBytes() ([]byte, bool) {
	s, ok := d.rawStr()
	if !ok || !utf8.Valid(s) {
		return nil, false
	}
	return s, true
}

// interned reads a string through in (see interner.get).
func (d *decoder) interned(in *interner, prev *string) (string, bool) {
	b, ok := d.rawStr()
	if !ok {
		return "", false
	}
	return in.get(b, prev)
}

// sessionName reads a string through in (see interner.sessionName).
func (d *decoder) sessionName(in *interner, prev *string) (string, bool) {
	b, ok := d.rawStr()
	if !ok {
		return "", false
	}
	return in.sessionName(b, prev)
}

// rawStr is strBytes without the UTF-8 check: the caller makes it.
func (d *decoder) rawStr() ([]byte, bool) {
	if !d.eat('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
		d.i++
	}
	return nil, false
}

func (d *decoder) digits() []byte {
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	num := d.b[start:d.i]
	// A JSON number: no leading zeros, and no fraction or exponent here.
	digits := num
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || (len(digits) > 1 && digits[0] == '0') {
		return nil
	}
	if d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		return nil
	}
	return num
}

// maxShort is the most digits short parses: 18 never overflow an int64.
const maxShort = 18

// short returns the value of the digits of num, at most maxShort of them.
func short(num []byte) uint64 {
	var n uint64
	for _, c := range num {
		n = n*10 + uint64(c-'0')
	}
	return n
}

func (d *decoder) int(bits int) (int64, bool) {
	num := d.digits()
	if num == nil {
		return 0, false
	}
	neg := num[0] == '-'
	digits := num
	if neg {
		digits = num[1:]
	}
	if len(digits) > maxShort {
		n, err := strconv.ParseInt(string(num), 10, bits)
		return n, err == nil
	}
	n := int64(short(digits))
	if neg {
		n = -n
	}
	if bits < 64 && (n < -1<<(bits-1) || n > 1<<(bits-1)-1) {
		return 0, false
	}
	return n, true
}

func (d *decoder) uint() (uint64, bool) {
	num := d.digits()
	if num == nil || num[0] == '-' {
		return 0, false
	}
	if len(num) > maxShort {
		n, err := strconv.ParseUint(string(num), 10, 64)
		return n, err == nil
	}
	return short(num), true
}
