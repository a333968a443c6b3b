package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/alineo-labs/alineo/events"
)

// Anchor is one session's head hash at the time it was taken. Anchors are
// written one JSON object a line (WriteAnchors); an operator keeps the file
// (or the stream it is published to) away from the ledger's database, so
// that rewriting a whole chain, which keeps every link consistent, is still
// caught: the anchored hash is no longer in the chain.
type Anchor struct {
	Name      string `json:"name"`
	SandboxID string `json:"sandboxId"`
	Head      string `json:"head"`
	// Seq is the head entry's Seq and Entries the session's entry count
	// when anchored, for the operator; At is when (Unix ms).
	Seq     uint64 `json:"seq"`
	Entries int    `json:"entries"`
	At      int64  `json:"at"`
}

// Anchors reads src and returns the head of every chained session that
// holds (broken sessions are not anchored: their error is returned).
func Anchors(ctx context.Context, src Scanner, f Filter, at int64) ([]Anchor, error) {
	var v Verifier
	err := src.ScanLedger(ctx, f.SandboxID, f.Since, f.Until, func(e events.Entry) error {
		v.Add(e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("anchor: %w", err)
	}
	var out []Anchor
	for _, s := range v.Sessions() {
		switch s.State {
		case Broken:
			return nil, fmt.Errorf("anchor: %w: %s", ErrBroken, s)
		case Chained:
			out = append(out, Anchor{Name: s.Name, SandboxID: s.SandboxID, Head: s.Head, Seq: s.HeadSeq, Entries: s.Entries, At: at})
		}
	}
	return out, nil
}

// WriteAnchors writes as to w, one JSON object a line.
func WriteAnchors(w io.Writer, as []Anchor) error {
	enc := json.NewEncoder(w)
	for _, a := range as {
		if err := enc.Encode(a); err != nil {
			return fmt.Errorf("write anchors: %w", err)
		}
	}
	return nil
}

// ReadAnchors reads anchors written by WriteAnchors (several files
// concatenated too: the newest anchor of a session wins).
func ReadAnchors(r io.Reader) ([]Anchor, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []Anchor
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var a Anchor
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrInvalidAnchor, line, err)
		}
		if a.Name == "" || a.SandboxID == "" || a.Head == "" || !events.ValidHash(a.Head) {
			return nil, fmt.Errorf("%w: line %d: want name, sandboxId and a head hash", ErrInvalidAnchor, line)
		}
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read anchors: %w", err)
	}
	return out, nil
}

// anchorSet tracks, during a scan, whether each anchored head is seen.
type anchorSet struct {
	want    map[events.Session]Anchor
	seen    map[events.Session]bool
	partial bool // a time range: an anchored session may have no entry in it
}

func newAnchorSet(as []Anchor, f Filter) *anchorSet {
	s := &anchorSet{want: map[events.Session]Anchor{}, seen: map[events.Session]bool{}, partial: f.Since != 0 || f.Until != 0}
	for _, a := range as {
		if f.SandboxID != "" && a.SandboxID != f.SandboxID {
			continue
		}
		k := events.Session{Name: a.Name, SandboxID: a.SandboxID}
		if old, ok := s.want[k]; !ok || a.At >= old.At {
			s.want[k] = a
		}
	}
	return s
}

func (s *anchorSet) see(e events.Entry) {
	if a, ok := s.want[e.Session()]; ok && e.Hash == a.Head {
		s.seen[e.Session()] = true
	}
}

// check marks broken every anchored session whose anchored head was not
// seen in a chain that otherwise holds (or that is missing altogether).
func (s *anchorSet) check(res *Result) {
	if s.partial {
		return // the anchored head may lie outside the range
	}
	for i := range res.Sessions {
		ss := &res.Sessions[i]
		k := events.Session{Name: ss.Name, SandboxID: ss.SandboxID}
		a, ok := s.want[k]
		delete(s.want, k)
		if !ok || s.seen[k] || ss.State == Broken {
			continue
		}
		ss.State, ss.Reason = Broken, fmt.Sprintf("anchored head %s (seq %d) is not in the chain (rewritten)", a.Head, a.Seq)
		ss.BrokenAt, ss.Index = a.Seq, 0
	}
	for k, a := range s.want {
		res.Sessions = append(res.Sessions, Session{Name: k.Name, SandboxID: k.SandboxID, State: Broken,
			BrokenAt: a.Seq, Reason: fmt.Sprintf("anchored with head %s but has no entries (deleted)", a.Head)})
	}
}
