package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/alineo-labs/alineo/adapters/internal/summary"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/alineo-labs/alineo/adapters/internal/entries"
	"github.com/alineo-labs/alineo/events"
)

// The hash chain (docs/architecture.md §4.10). Each session's head, the hash
// of its last chained entry, is kept in alineo_chain_heads and moved in the
// transaction of the entries that move it, with a compare-and-set: the
// transaction fails (division by zero, SQLSTATE 22012, the one error a
// plain statement can raise on demand) unless the head is still the one
// the entries were chained after. So a commit keeps its single round trip:
// the store links entries after the heads it remembers, and only when
// another writer (a process, or a commit of this store in flight) moved a
// head meanwhile does it read the heads and link again.

// moveHead is the compare-and-set of one session's head: $3 is the head the
// entries were chained after (NULL: the session had none), $4 the new head.
const moveHead = `WITH moved AS (
  INSERT INTO alineo_chain_heads AS h (name, sandbox_id, hash) VALUES ($1, $2, $4)
  ON CONFLICT (name, sandbox_id) DO UPDATE SET hash = excluded.hash WHERE h.hash = $3
  RETURNING 1)
SELECT 1 / count(*) FROM moved`

// setHead moves a head unconditionally (projected entries carry their hashes).
const setHead = `INSERT INTO alineo_chain_heads (name, sandbox_id, hash) VALUES ($1, $2, $3)
ON CONFLICT (name, sandbox_id) DO UPDATE SET hash = excluded.hash`

// maxHeadsKept bounds the heads a store remembers; beyond it, it forgets
// them all (a forgotten head costs one failed round trip when next used).
const maxHeadsKept = 1 << 16

// headMove is one session's head before (from, known: whether it had one)
// and after a commit.
type headMove struct {
	session  events.Session
	from, to string
	known    bool
}

// headCache remembers the heads this store last committed or read.
type headCache struct {
	mu sync.Mutex
	m  map[events.Session]string
}

// link chains in into es (same length) after the remembered heads: a
// session this store has not seen is assumed new (the compare-and-set finds
// out otherwise). It returns each session's move.
func (c *headCache) link(es, in []events.Entry) ([]headMove, error) {
	var chain events.Chain
	var moves []headMove
	c.mu.Lock()
	for _, e := range in {
		k := e.Session()
		if containsSession(moves, k) {
			continue
		}
		h, ok := c.m[k]
		if ok {
			chain.Seed(k, h)
		}
		moves = append(moves, headMove{session: k, from: h, known: ok})
	}
	c.mu.Unlock()
	for i, e := range in {
		var err error
		if es[i], err = chain.Link(e); err != nil {
			return nil, err
		}
	}
	for i := range moves {
		moves[i].to, _ = chain.Head(moves[i].session)
	}
	return moves, nil
}

func containsSession(moves []headMove, k events.Session) bool {
	for _, m := range moves {
		if m.session == k {
			return true
		}
	}
	return false
}

// commit remembers the heads a committed batch moved to.
func (c *headCache) commit(moves []headMove) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) > maxHeadsKept {
		c.m = make(map[events.Session]string)
	}
	for _, m := range moves {
		c.m[m.session] = m.to
	}
}

// forget drops the heads of a batch that failed: whether it committed is
// not always known, and the next commit reads them again if need be.
func (c *headCache) forget(moves []headMove) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range moves {
		delete(c.m, m.session)
	}
}

// lockHead makes sure a session has a head row ("" for none yet) and locks
// it until the transaction ends, so that no other commit moves it meanwhile.
const lockHead = `WITH made AS (
  INSERT INTO alineo_chain_heads (name, sandbox_id, hash) VALUES ($1, $2, '')
  ON CONFLICT (name, sandbox_id) DO NOTHING)
SELECT hash FROM alineo_chain_heads WHERE name = $1 AND sandbox_id = $2 FOR UPDATE`

// commitLocked is commitLinked for a commit whose compare-and-set failed:
// in one transaction it locks the heads of in's sessions (in a fixed order,
// so two such commits cannot deadlock), links in into es after them, writes
// es, moves the heads and folds d into the details. It returns the moves.
func commitLocked(ctx context.Context, p *pgxpool.Pool, es, in []events.Entry, d *summary.Deltas) ([]headMove, error) {
	var sessions []events.Session
	for _, e := range in {
		if k := e.Session(); !slices.Contains(sessions, k) {
			sessions = append(sessions, k)
		}
	}
	slices.SortFunc(sessions, func(a, b events.Session) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.SandboxID, b.SandboxID))
	})
	var moves []headMove
	err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		var chain events.Chain
		moves = moves[:0]
		for _, k := range sessions {
			var h string
			if err := tx.QueryRow(ctx, lockHead, k.Name, k.SandboxID).Scan(&h); err != nil {
				return err
			}
			if h != "" {
				chain.Seed(k, h)
			}
			moves = append(moves, headMove{session: k, from: h, known: true})
		}
		for i, e := range in {
			var err error
			if es[i], err = chain.Link(e); err != nil {
				return err
			}
		}
		for i := range moves {
			moves[i].to, _ = chain.Head(moves[i].session)
		}
		return commitLinked(ctx, tx, es, d, moves)
	})
	return moves, err
}

// queueHeads queues the compare-and-set of every move.
func queueHeads(b *pgx.Batch, moves []headMove) {
	for _, m := range moves {
		var from any
		if m.known {
			from = m.from
		}
		b.Queue(moveHead, m.session.Name, m.session.SandboxID, from, m.to)
	}
}

// queueProjectedHeads moves the head of each session of projected entries
// es to its last chained entry's hash.
func queueProjectedHeads(b *pgx.Batch, es []events.Entry) {
	for _, e := range entries.Heads(es) {
		b.Queue(setHead, e.Name, e.SandboxID, e.Hash)
	}
}

// headMoved reports the failure of moveHead's compare-and-set.
func headMoved(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22012" // division_by_zero
}
