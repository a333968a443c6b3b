package events

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"maps"
	"strings"
	"sync"
)

// HashPrefix starts every chain hash: a hash is "sha256:" and 64 lowercase
// hex digits, like Fingerprint.
const HashPrefix = "sha256:"

// chainDomain opens the encoding of every chained entry: it names the
// encoding's version, so that a later encoding can never produce the same
// bytes.
const chainDomain = "alineo.chain.v1\x00"

// ChainHash returns the hash of e chained after prev, the hash of the entry
// before it in its session ("" for the first). It is SHA-256 over the
// canonical encoding of docs/architecture.md §4.10: the version tag, then
// e.SandboxID, e.Name, e.StepIndex, e.Branch, e.Event, e.Payload in canonical
// JSON, e.Error, e.Actor, e.Ts and prev, each length-prefixed. Seq, Trace, PrevHash
// and Hash are not part of it. The payload is hashed as canonical JSON, so
// the hash survives a store that reformats JSON (Postgres JSONB); a payload
// that is not JSON is an error wrapping ErrInvalidEntry.
func ChainHash(e Entry, prev string) (string, error) {
	c := chainPool.Get().(*chainer)
	defer chainPool.Put(c)
	return c.hash(e, prev)
}

// ValidHash reports whether h is "" or a well-formed chain hash.
func ValidHash(h string) bool {
	if h == "" {
		return true
	}
	if len(h) != len(HashPrefix)+64 || !strings.HasPrefix(h, HashPrefix) {
		return false
	}
	for i := len(HashPrefix); i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Chain links entries into their sessions' hash chains. It remembers the
// head (the last hash) of each session it has seen; Link sets an entry's
// PrevHash and Hash and advances its session's head. The zero value is
// ready to use and knows no head: Seed tells it a session's stored head.
// Not safe for concurrent use.
type Chain struct {
	// The head of the only session seeded so far is kept inline (one,
	// oneHead when hasOne), so that a chain of one session, a writer's batch,
	// allocates no map; heads holds every head once a second is seeded.
	one     Session
	oneHead string
	hasOne  bool
	heads   map[Session]string
}

// Head returns the head Chain knows for s, and whether it knows one.
func (c *Chain) Head(s Session) (string, bool) {
	if c.heads == nil {
		if c.hasOne && c.one == s {
			return c.oneHead, true
		}
		return "", false
	}
	h, ok := c.heads[s]
	return h, ok
}

// Seed sets s's head to h (the hash of s's last stored entry, "" for none).
func (c *Chain) Seed(s Session, h string) {
	if c.heads == nil {
		if !c.hasOne || c.one == s {
			c.one, c.oneHead, c.hasOne = s, h, true
			return
		}
		c.heads = map[Session]string{c.one: c.oneHead}
		c.one, c.oneHead, c.hasOne = Session{}, "", false
	}
	c.heads[s] = h
}

// Clone returns a copy of c, to link a batch that may fail: the batch is
// linked on the copy, which replaces c once the batch is stored.
func (c *Chain) Clone() Chain {
	d := *c
	d.heads = maps.Clone(c.heads)
	return d
}

// Forget drops s's head: s is new again (its entries were deleted).
func (c *Chain) Forget(s Session) {
	if c.heads == nil {
		if c.hasOne && c.one == s {
			c.one, c.oneHead, c.hasOne = Session{}, "", false
		}
		return
	}
	delete(c.heads, s)
}

// Link chains e after its session's head: PrevHash is the head, or when
// the session has none (it is new), e.PrevHash as given (a fork's first
// entry names its parent's head); Hash is ChainHash(e, PrevHash). It
// returns the linked entry and advances the head.
func (c *Chain) Link(e Entry) (Entry, error) {
	s := e.Session()
	if h, ok := c.Head(s); ok {
		e.PrevHash = h
	} else if !ValidHash(e.PrevHash) {
		return e, &ValidationError{Field: "prevHash", Reason: "is not a chain hash", Err: ErrInvalidHash}
	}
	h, err := ChainHash(e, e.PrevHash)
	if err != nil {
		return e, err
	}
	e.Hash = h
	c.Seed(s, h)
	return e, nil
}

// chainer holds the buffers of one hash.
type chainer struct {
	h   hash.Hash
	buf []byte // the length-prefixed fields before the payload, and after it
	cn  canon  // the payload's canonical JSON
	sum [sha256.Size]byte
}

var chainPool = sync.Pool{New: func() any { return &chainer{h: sha256.New()} }}

func (c *chainer) hash(e Entry, prev string) (string, error) {
	c.h.Reset()
	b := append(c.buf[:0], chainDomain...)
	b = appendField(b, e.SandboxID)
	b = appendField(b, e.Name)
	b = binary.BigEndian.AppendUint64(b, uint64(int64(e.StepIndex)))
	if e.Branch == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.BigEndian.AppendUint64(b, uint64(int64(*e.Branch)))
	}
	b = appendField(b, string(e.Event))
	if e.Payload == nil {
		b = append(b, 0)
		c.h.Write(b)
	} else {
		js, err := c.cn.canonical(e.Payload)
		if err != nil {
			c.buf = b[:0]
			return "", &ValidationError{Field: "payload", Reason: "is not valid JSON", Err: err}
		}
		b = append(b, 1)
		b = binary.BigEndian.AppendUint64(b, uint64(len(js)))
		c.h.Write(b)
		c.h.Write(js)
		if cap(c.cn.vals) > 1<<20 {
			c.cn = canon{} // do not keep a huge buffer in the pool
		}
	}
	b = appendField(b[:0], e.Error)
	b = appendField(b, e.Actor)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Ts))
	b = appendField(b, prev)
	c.h.Write(b)
	c.buf = b[:0]
	sum := c.h.Sum(c.sum[:0])
	out := make([]byte, len(HashPrefix)+hex.EncodedLen(len(sum)))
	copy(out, HashPrefix)
	hex.Encode(out[len(HashPrefix):], sum)
	return string(out), nil
}

// appendField appends s with its length as 8 bytes, big-endian.
func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}
