package audit

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/alineo-labs/alineo/events"
)

// State is a session's chain state.
type State string

const (
	// Unchained: no entry of the session has a hash (the TypeScript SDK wrote it).
	Unchained State = "unchained"
	// Chained: from its first chained entry on, every entry holds.
	Chained State = "chained"
	// Broken: an entry was edited, deleted, inserted or reordered.
	Broken State = "broken"
)

// Filter selects what a Scanner reads. The zero value is everything.
type Filter struct {
	SandboxID string // "" for every sandbox
	// Since and Until bound the entries' Ts (Unix ms, inclusive; 0 for no
	// bound). With a bound, a session's first entry in range is taken as
	// the start of its chain: its link to the entry before is not checked.
	Since, Until int64
}

// Scanner streams a ledger's entries in append order (each session's in
// the order written, Seq increasing), with PrevHash and Hash as stored and
// payloads as stored, calling fn for each, and stops at fn's first error.
// The SQLite and Postgres stores implement it (ScanLedger).
type Scanner interface {
	ScanLedger(ctx context.Context, sandboxID string, since, until int64, fn func(events.Entry) error) error
}

// Session is the verification of one session.
type Session struct {
	Name      string `json:"name"`
	SandboxID string `json:"sandboxId"`
	State     State  `json:"state"`
	// Entries counts the session's entries read; Unchained those before its
	// chain starts.
	Entries   int `json:"entries"`
	Unchained int `json:"unchained"`
	// Head is the hash of the last chained entry that holds, HeadSeq its Seq.
	Head    string `json:"head,omitempty"`
	HeadSeq uint64 `json:"headSeq,omitempty"`
	// ForkedFrom is the PrevHash of the chain's first entry when it names
	// a parent's head (a fork).
	ForkedFrom string `json:"forkedFrom,omitempty"`
	// BrokenAt is the Seq of the first entry that breaks the chain (Index
	// its position in the session, from 1), and Reason why.
	BrokenAt uint64 `json:"brokenAt,omitempty"`
	Index    int    `json:"index,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// FirstChained is the position in the session (from 1) of its chain's
// first entry: 1 unless the session began unchained (a TypeScript session
// resumed here).
func (s Session) FirstChained() int { return s.Unchained + 1 }

// String describes s in one line.
func (s Session) String() string {
	switch s.State {
	case Broken:
		return fmt.Sprintf("%s %s: broken at entry %d (seq %d): %s", s.Name, s.SandboxID, s.Index, s.BrokenAt, s.Reason)
	case Chained:
		return fmt.Sprintf("%s %s: chained, %d entries (%d before the chain), head %s", s.Name, s.SandboxID, s.Entries, s.Unchained, s.Head)
	}
	return fmt.Sprintf("%s %s: unchained, %d entries", s.Name, s.SandboxID, s.Entries)
}

// Verifier checks entries given in append order. Its memory grows with the
// number of sessions, not of entries. Not safe for concurrent use.
type Verifier struct {
	sessions map[events.Session]*Session
	order    []events.Session
	// entries counts what Add was given.
	entries int
}

// Add checks e, the next entry of its session.
func (v *Verifier) Add(e events.Entry) {
	v.entries++
	k := e.Session()
	s := v.sessions[k]
	if s == nil {
		if v.sessions == nil {
			v.sessions = make(map[events.Session]*Session)
		}
		s = &Session{Name: k.Name, SandboxID: k.SandboxID, State: Unchained}
		v.sessions[k] = s
		v.order = append(v.order, k)
	}
	s.Entries++
	if s.State == Broken {
		return
	}
	if e.Hash == "" {
		if s.State == Chained {
			v.breaks(s, e, "has no hash after the chain started (inserted, or its hash removed)")
			return
		}
		s.Unchained++
		return
	}
	if !events.ValidHash(e.Hash) || !events.ValidHash(e.PrevHash) {
		v.breaks(s, e, "holds a malformed hash")
		return
	}
	h, err := events.ChainHash(e, e.PrevHash)
	if err != nil {
		v.breaks(s, e, "does not hash: "+err.Error())
		return
	}
	if h != e.Hash {
		v.breaks(s, e, "does not hash to its recorded hash (edited)")
		return
	}
	if s.State == Chained && e.PrevHash != s.Head {
		v.breaks(s, e, "does not follow the entry before it (an entry deleted, inserted or reordered)")
		return
	}
	if s.State == Unchained {
		s.ForkedFrom = e.PrevHash
	}
	s.State, s.Head, s.HeadSeq = Chained, e.Hash, e.Seq
}

func (v *Verifier) breaks(s *Session, e events.Entry, reason string) {
	s.State, s.BrokenAt, s.Index, s.Reason = Broken, e.Seq, s.Entries, "entry "+reason
}

// Entries returns the number of entries given to Add.
func (v *Verifier) Entries() int { return v.entries }

// Sessions returns every session seen, in the order first seen.
func (v *Verifier) Sessions() []Session {
	out := make([]Session, 0, len(v.order))
	for _, k := range v.order {
		out = append(out, *v.sessions[k])
	}
	return out
}

// Check returns the chain state of one session's entries, in any order:
// they are put in append order (Seq) first. The dashboard shows it.
func Check(es []events.Entry) Session {
	sorted := slices.Clone(es)
	slices.SortStableFunc(sorted, func(a, b events.Entry) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	var v Verifier
	for _, e := range sorted {
		v.Add(e)
	}
	if s := v.Sessions(); len(s) > 0 {
		return s[0]
	}
	return Session{State: Unchained}
}

// Result is the outcome of Verify.
type Result struct {
	Entries  int       `json:"entries"`
	Sessions []Session `json:"sessions"`
	// Broken counts the broken sessions, anchor mismatches included.
	Broken int `json:"broken"`
}

// Options tunes Verify. The zero value is valid.
type Options struct {
	// Progress, when set, is called every ProgressEvery entries with the
	// number read so far.
	Progress      func(entries int)
	ProgressEvery int // default 100000
	// Anchors, when set, are the heads published earlier: each anchored
	// session's chain must still hold that hash (see CheckAnchors).
	Anchors []Anchor
}

// Verify reads src with f and checks every session's chain. It returns
// the result and, when any session is broken, an error wrapping ErrBroken.
func Verify(ctx context.Context, src Scanner, f Filter, opts Options) (Result, error) {
	every := opts.ProgressEvery
	if every <= 0 {
		every = 100000
	}
	var v Verifier
	want := newAnchorSet(opts.Anchors, f)
	// The ledger is read in one goroutine and checked in this one: reading
	// (a database's rows, the stream's messages) and hashing each take about
	// half the time, so a verify runs nearly at the speed of the read. The
	// entries go over in batches, at most scanBatches of them at once, so
	// memory stays bounded.
	err := scanBatched(ctx, src, f, func(batch []events.Entry) {
		for _, e := range batch {
			v.Add(e)
			want.see(e)
			if opts.Progress != nil && v.entries%every == 0 {
				opts.Progress(v.entries)
			}
		}
	})
	if err != nil {
		return Result{}, fmt.Errorf("verify: %w", err)
	}
	res := Result{Entries: v.entries, Sessions: v.Sessions()}
	want.check(&res)
	for _, s := range res.Sessions {
		if s.State == Broken {
			res.Broken++
		}
	}
	if res.Broken > 0 {
		var names []string
		for _, s := range res.Sessions {
			if s.State == Broken {
				names = append(names, s.SandboxID)
			}
		}
		return res, fmt.Errorf("%w: %d session(s): %s", ErrBroken, res.Broken, strings.Join(names, ", "))
	}
	return res, nil
}

// The size and number in flight of the batches scanBatched hands over.
const (
	scanBatch   = 256
	scanBatches = 8
)

// scanBatched reads src with f in a goroutine of its own and calls fn with
// the entries in order, scanBatch at a time, in the caller's goroutine. It
// returns the read's error, or ctx's.
func scanBatched(ctx context.Context, src Scanner, f Filter, fn func([]events.Entry)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	full := make(chan []events.Entry, scanBatches)
	free := make(chan []events.Entry, scanBatches+2)
	for range scanBatches + 2 {
		free <- make([]events.Entry, 0, scanBatch)
	}
	done := make(chan error, 1)
	go func() {
		defer close(full)
		batch := <-free
		err := src.ScanLedger(ctx, f.SandboxID, f.Since, f.Until, func(e events.Entry) error {
			batch = append(batch, e)
			if len(batch) < scanBatch {
				return nil
			}
			select {
			case full <- batch:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case batch = <-free:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		})
		if err == nil && len(batch) > 0 {
			select {
			case full <- batch:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		done <- err
	}()
	for batch := range full {
		fn(batch)
		clear(batch) // drop the payloads' references before the batch is reused
		free <- batch[:0]
	}
	return <-done
}
