package redact

import (
	"bytes"
	"sort"
)

// Redactor replaces secret values with "[REDACTED:<name>]". The zero value and a
// nil *Redactor redact nothing. Safe for concurrent use (it is immutable).
type Redactor struct {
	// byFirst maps a first byte to the secrets starting with it, longest first.
	byFirst [256][]secret
	maxLen  int
}

type secret struct {
	value  []byte
	marker []byte
}

// New returns a Redactor for secrets (name → value). Empty values are ignored.
// When two names share a value, the lexically smallest name is used in the marker.
func New(secrets map[string]string) *Redactor {
	r := &Redactor{}
	names := make([]string, 0, len(secrets))
	for n := range secrets {
		names = append(names, n)
	}
	sort.Strings(names)
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		v := secrets[n]
		if v == "" || seen[v] {
			continue
		}
		seen[v] = true
		s := secret{value: []byte(v), marker: []byte("[REDACTED:" + n + "]")}
		r.byFirst[v[0]] = append(r.byFirst[v[0]], s)
		r.maxLen = max(r.maxLen, len(v))
	}
	for i := range r.byFirst {
		sort.SliceStable(r.byFirst[i], func(a, b int) bool {
			return len(r.byFirst[i][a].value) > len(r.byFirst[i][b].value)
		})
	}
	return r
}

// Empty reports whether r redacts nothing.
func (r *Redactor) Empty() bool { return r == nil || r.maxLen == 0 }

// String returns s with every secret replaced.
func (r *Redactor) String(s string) string {
	if r.Empty() {
		return s
	}
	out, _ := r.redact(nil, []byte(s), true)
	return string(out)
}

// Bytes returns b with every secret replaced, in a new slice when anything was
// replaced (b itself otherwise).
func (r *Redactor) Bytes(b []byte) []byte {
	if r.Empty() {
		return b
	}
	out, _ := r.redact(nil, b, true)
	if bytes.Equal(out, b) {
		return b
	}
	return out
}

// Contains reports whether b contains any secret.
func (r *Redactor) Contains(b []byte) bool {
	if r.Empty() {
		return false
	}
	for i := range b {
		if r.matchAt(b, i) != nil {
			return true
		}
	}
	return false
}

// matchAt returns the longest secret that starts at b[i] and fits in b, or nil.
func (r *Redactor) matchAt(b []byte, i int) *secret {
	cands := r.byFirst[b[i]]
	for k := range cands {
		v := cands[k].value
		if len(b)-i >= len(v) && bytes.Equal(b[i:i+len(v)], v) {
			return &cands[k]
		}
	}
	return nil
}

// mayStartAt reports whether a secret longer than the rest of b could start
// at b[i]: the rest is a proper prefix of it, so the decision needs more input.
func (r *Redactor) mayStartAt(b []byte, i int) bool {
	rest := b[i:]
	for _, s := range r.byFirst[b[i]] {
		if len(s.value) > len(rest) && bytes.HasPrefix(s.value, rest) {
			return true
		}
	}
	return false
}

// redact appends the redaction of buf to out. Unless final, it stops at the
// first position whose decision needs more input (fewer than maxLen bytes left
// and a secret could start there: only such a tail is held back)
// and returns the index of the undecided rest.
func (r *Redactor) redact(out, buf []byte, final bool) ([]byte, int) {
	i := 0
	for i < len(buf) {
		if !final && len(buf)-i < r.maxLen && r.mayStartAt(buf, i) {
			break
		}
		if s := r.matchAt(buf, i); s != nil {
			out = append(out, s.marker...)
			i += len(s.value)
			continue
		}
		// Copy the run of bytes that cannot start a secret in one go; such
		// bytes need no lookahead, even in the held-back tail.
		j := i + 1
		for j < len(buf) && len(r.byFirst[buf[j]]) == 0 {
			j++
		}
		out = append(out, buf[i:j]...)
		i = j
	}
	return out, i
}

// NewStream returns a Stream that redacts with r.
func (r *Redactor) NewStream() *Stream { return &Stream{r: r} }

// Stream redacts a byte stream given in chunks. Not safe for concurrent use.
type Stream struct {
	r    *Redactor
	tail []byte
}

// Write takes the next chunk and returns what is safe to emit now: the redacted
// input up to the point where a secret might still be completed by later chunks.
// The returned slice is owned by the caller.
func (s *Stream) Write(chunk []byte) []byte {
	if s.r.Empty() {
		return append([]byte(nil), chunk...)
	}
	buf := append(s.tail, chunk...)
	out, rest := s.r.redact(make([]byte, 0, len(buf)), buf, false)
	s.tail = append(s.tail[:0:0], buf[rest:]...)
	return out
}

// Flush returns the redacted rest of the stream, held back by Write, and resets
// the stream.
func (s *Stream) Flush() []byte {
	if len(s.tail) == 0 {
		return nil
	}
	out, _ := s.r.redact(nil, s.tail, true)
	s.tail = nil
	return out
}

// Pending reports how many bytes Write holds back (at most len(longest)-1).
func (s *Stream) Pending() int { return len(s.tail) }
