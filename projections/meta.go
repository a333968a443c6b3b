package projections

import (
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// meta is what the runtime reads of a message's JetStream metadata.
type meta struct {
	stream   uint64 // stream sequence
	consumer uint64 // consumer (delivery) sequence
	pending  uint64 // messages left for the consumer after this one
}

// metadata returns m's metadata, parsed from its reply subject without the
// allocations of jetstream's Msg.Metadata, which it falls back to for a
// reply it does not recognise (and so returns the same values and errors).
func metadata(m jetstream.Msg) (meta, error) {
	if md, ok := parseAckReply(m.Reply()); ok {
		return md, nil
	}
	md, err := m.Metadata()
	if err != nil {
		return meta{}, err
	}
	return meta{stream: md.Sequence.Stream, consumer: md.Sequence.Consumer, pending: md.NumPending}, nil
}

// The tokens of an acknowledgement subject: $JS.ACK.<stream>.<consumer>.
// <delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending> (v1, 9
// tokens), or with <domain>.<account hash> after $JS.ACK and possibly a
// random token at the end (v2, 11 or 12 tokens).
const (
	ackTokensV1    = 9
	ackTokensV2    = 12
	ackStreamSeqV1 = 5 // index of the stream sequence in a v1 subject
	ackStreamSeqV2 = 7
)

// parseAckReply parses the sequences and pending count of an
// acknowledgement subject; ok is false for anything else (or a number it
// does not read exactly as decimal digits).
func parseAckReply(reply string) (md meta, ok bool) {
	rest, found := strings.CutPrefix(reply, "$JS.ACK.")
	if !found {
		return meta{}, false
	}
	var tok [ackTokensV2]string
	n := 2 // $JS, ACK
	for n < len(tok) {
		t, after, more := strings.Cut(rest, ".")
		tok[n], rest = t, after
		n++
		if !more {
			break
		}
		if n == len(tok) {
			return meta{}, false // more tokens than any format has
		}
	}
	var first int
	switch {
	case n == ackTokensV1:
		first = ackStreamSeqV1
	case n == ackTokensV2-1 || n == ackTokensV2:
		first = ackStreamSeqV2
	default:
		return meta{}, false
	}
	var okS, okC, okP bool
	md.stream, okS = decimal(tok[first])
	md.consumer, okC = decimal(tok[first+1])
	md.pending, okP = decimal(tok[first+3])
	if !okS || !okC || !okP {
		return meta{}, false
	}
	return md, true
}

// decimal parses s, 1 to 19 decimal digits.
func decimal(s string) (uint64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}
