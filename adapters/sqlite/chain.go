package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"modernc.org/sqlite"

	"github.com/alineo-labs/alineo/events"
)

// The hash chain (docs/architecture.md §4.10). An append's entries are
// linked inside its immediate transaction, after each session's head: the
// hash of the session's last row (by id). No other writer can append until
// commit, so the entries and their hashes commit together after the right
// head. The store remembers the heads it committed and the id and hash of
// the last row it wrote; one probe of the table's last row (the rowid
// B-tree's rightmost leaf) tells whether anyone wrote since, in which case
// it forgets them and reads each session's head from its rows again.
//
// The probe is skipped when nothing can have written since this store's
// last commit: the writer connection's data version (SQLite's
// SQLITE_FCNTL_DATA_VERSION, which changes with every commit to the file,
// this connection's and any other connection's, of this process or
// another: the latter seen when this connection next begins a
// transaction) is, inside the transaction, the one read right after this
// store's last commit, on the same connection. It is read with a file
// control on the driver's connection, neither a statement nor a page: the
// probe, then PRAGMA data_version (about 25 allocations a commit through
// database/sql), were most of what the chain added to a commit.

const (
	// lastRow is the table's last row.
	lastRow = `SELECT id, COALESCE(hash, '') FROM alineo_events ORDER BY id DESC LIMIT 1`
	// sessionHead is a session's last row's hash ("" when it has none).
	sessionHead = `SELECT COALESCE(hash, '') FROM alineo_events WHERE name = ? AND sandbox_id = ? ORDER BY id DESC LIMIT 1`
)

// maxHeadsKept bounds the heads a store remembers; beyond it, it forgets them all.
const maxHeadsKept = 1 << 16

// headCache is what a store remembers of the chain. Only the commit (one
// at a time: the store has one writer) uses it, under mu.
type headCache struct {
	mu sync.Mutex
	// lastID and lastHash are the id and hash of the last row this store
	// wrote; lastID is -1 when unknown.
	lastID   int64
	lastHash string
	m        map[events.Session]string
	// at is when the heads were last known current: the writer's state
	// right after the last commit.
	at writerState
}

// writerState is what tells whether anything but this store's appends wrote
// to the file: the writer connection (its ordinal) and its data version.
type writerState struct {
	conn        uint64
	dataVersion uint32
}

// connDataVersion returns the data version of the driver's connection c
// (SQLITE_FCNTL_DATA_VERSION of its main database).
func connDataVersion(c *sql.Conn) (uint32, error) {
	var v uint32
	err := c.Raw(func(dc any) error {
		fc, ok := dc.(sqlite.FileControl)
		if !ok {
			return fmt.Errorf("driver connection %T has no file control", dc)
		}
		var err error
		v, err = fc.FileControlDataVersion("main")
		return err
	})
	return v, err
}

// headsMoved is what a commit tells the cache.
type headsMoved struct {
	chain    *events.Chain
	appends  [][]events.Entry
	lastID   int64
	lastHash string
	at       writerState
}

type queryRower func(ctx context.Context, tx *sql.Tx, q string, a ...any) *sql.Row

// seed returns a chain holding the head of every session of appends that
// has rows. Called inside the commit's immediate transaction; now is the
// writer's state read there.
func (c *headCache) seed(ctx context.Context, tx *sql.Tx, query queryRower, appends [][]events.Entry, now writerState) (events.Chain, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var chain events.Chain
	if c.m == nil || c.lastID < 0 || now != c.at || len(c.m) > maxHeadsKept {
		var id int64
		var h string
		err := query(ctx, tx, lastRow).Scan(&id, &h)
		if errors.Is(err, sql.ErrNoRows) {
			id, err = 0, nil
		}
		if err != nil {
			return chain, err
		}
		if id != c.lastID || h != c.lastHash || c.m == nil || len(c.m) > maxHeadsKept {
			c.m = make(map[events.Session]string) // someone else wrote: read the heads again
		}
	}
	var seen map[events.Session]bool
	for _, es := range appends {
		for _, e := range es {
			k := e.Session()
			if seen[k] {
				continue
			}
			if seen == nil {
				seen = make(map[events.Session]bool)
			}
			seen[k] = true
			if h, ok := c.m[k]; ok {
				chain.Seed(k, h)
				continue
			}
			var h string
			err := query(ctx, tx, sessionHead, k.Name, k.SandboxID).Scan(&h)
			switch {
			case err == nil:
				// A session whose last row has no hash (the TypeScript
				// SDK's) starts its chain at "".
				chain.Seed(k, h)
			case !errors.Is(err, sql.ErrNoRows):
				return chain, err
			}
		}
	}
	return chain, nil
}

// moved records a commit's outcome: the heads it moved when it committed,
// nothing (and no trust in what is remembered) when it did not.
func (c *headCache) moved(m headsMoved, committed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !committed || m.chain == nil {
		c.lastID, c.m = -1, nil
		return
	}
	for _, es := range m.appends {
		for _, e := range es {
			if h, ok := m.chain.Head(e.Session()); ok {
				c.m[e.Session()] = h
			}
		}
	}
	c.lastID, c.lastHash, c.at = m.lastID, m.lastHash, m.at
}
