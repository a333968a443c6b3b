package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/internal/groupcommit"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/validated"
)

var (
	_ adapters.Store           = (*Store)(nil)
	_ adapters.ProjectionStore = (*Store)(nil)
	_ validated.Appender       = (*Store)(nil)
	_ validated.Applier        = (*Store)(nil)
)

// Memory is the path of an in-memory ledger: one database for the store's
// lifetime, gone on Close.
const Memory = ":memory:"

// Config tunes a Store. The zero value is valid.
type Config struct {
	// BusyTimeout is how long a statement waits for another connection's or
	// process's lock before failing with an error wrapping
	// adapters.ErrUnavailable. Default 10s. An append's ctx ends its wait
	// for the store's writer; once its transaction has begun, it runs to
	// its end (a lock's wait bounded by BusyTimeout), whatever ctx does.
	BusyTimeout time.Duration
	// MaxReaders bounds the read pool. Default 4. An in-memory store has one
	// connection for everything.
	MaxReaders int
	// Synchronous is the PRAGMA synchronous level: "FULL" (default: a
	// committed append survives a power loss) or "NORMAL" (in WAL mode: it
	// survives a crash of the process, and commits are much faster).
	Synchronous string
	// Vocabulary is the set of event names and payload fields the store
	// writes: events.Dotted (default, the names of the storage docs) or
	// events.TypeScript (exactly what the TypeScript SDK 0.2.0 writes, so that
	// TypeScript processes sharing the database read what this store writes).
	// Reads accept both whatever it is.
	Vocabulary events.Vocabulary
	// Logger receives migration notes. Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.BusyTimeout == 0 {
		c.BusyTimeout = 10 * time.Second
	}
	if c.MaxReaders == 0 {
		c.MaxReaders = 4
	}
	if c.Synchronous == "" {
		c.Synchronous = "FULL"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.BusyTimeout < 0:
		return c, fmt.Errorf("%w: BusyTimeout %v < 0", ErrInvalidConfig, c.BusyTimeout)
	case c.MaxReaders < 0:
		return c, fmt.Errorf("%w: MaxReaders %d < 0", ErrInvalidConfig, c.MaxReaders)
	case !c.Vocabulary.Valid():
		return c, fmt.Errorf("%w: Vocabulary %v", ErrInvalidConfig, c.Vocabulary)
	}
	c.Synchronous = strings.ToUpper(c.Synchronous)
	if c.Synchronous != "FULL" && c.Synchronous != "NORMAL" {
		return c, fmt.Errorf("%w: Synchronous %q, want FULL or NORMAL", ErrInvalidConfig, c.Synchronous)
	}
	return c, nil
}

// Store is a ledger in one SQLite database. All methods are safe for concurrent
// use, by several Stores on the same file too, in one process or several.
type Store struct {
	path string // absolute, or Memory
	cfg  Config
	// unchained makes appends skip the hash chain: set by this package's
	// benchmarks only, to measure what the chain costs.
	unchained bool
	// heads remembers the chain heads this store committed (chain.go).
	heads headCache
	// writerConns counts the writer connections opened: a new one has a
	// data version of its own, so the count tells, with the data version,
	// whether the heads a commit remembers may be trusted without a probe
	// (headCache.seed).
	writerConns atomic.Uint64
	// initSem serialises first use: one goroutine migrates while the others
	// wait (or give up when their ctx ends). A failed init is retried by the
	// next call.
	initSem chan struct{}

	// stmts holds the append path's prepared statements, by SQL (see prepared).
	stmts           sync.Map
	appendsPrepared atomic.Bool

	// gc commits appends: concurrent ones share one transaction (one fsync).
	gc *groupcommit.Committer[[]events.Entry]
	// ck checkpoints a file-backed store's WAL in the background once it
	// is open; nil before, after Close, and for an in-memory store.
	ck atomic.Pointer[checkpointer]

	mu     sync.RWMutex
	closed bool
	w      *sql.DB // one connection; every transaction is BEGIN IMMEDIATE
	r      *sql.DB // readers; the same handle as w for an in-memory store
}

// Open returns a Store for the database file at path, or Memory. It only
// validates its arguments: the file, its parent folders and the schema are
// created on first use.
func Open(path string, cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case path == "":
		return nil, fmt.Errorf("%w: empty path", ErrInvalidConfig)
	case strings.ContainsRune(path, 0):
		return nil, fmt.Errorf("%w: path contains NUL", ErrInvalidConfig)
	case path != Memory && strings.HasPrefix(path, "file:"):
		return nil, fmt.Errorf("%w: %q: pass a file path, not a URI", ErrInvalidConfig, path)
	}
	if path != Memory {
		if path, err = filepath.Abs(path); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	s := &Store{path: path, cfg: cfg, initSem: make(chan struct{}, 1)}
	s.gc = groupcommit.New(s.commitAppends, func(es []events.Entry) int { return len(es) }, groupcommit.Config{})
	return s, nil
}

// Path returns the absolute path of the database file, or Memory.
func (s *Store) Path() string { return s.path }

func (s *Store) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// dbs returns the writer and reader handles, initialising the store on first
// use. Callers pass its error through translate.
func (s *Store) dbs(ctx context.Context) (w, r *sql.DB, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if w, r, err := s.handles(); w != nil || err != nil {
		return w, r, err
	}
	select {
	case s.initSem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	defer func() { <-s.initSem }()
	if w, r, err := s.handles(); w != nil || err != nil {
		return w, r, err
	}
	w, r, err = s.open(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", s.path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		closeBoth(w, r)
		return nil, nil, adapters.ErrClosed
	}
	s.w, s.r = w, r
	if s.path != Memory {
		// sql.Open fails for an unknown driver only (open used it); the
		// writer's automatic checkpoint would bound the WAL without it.
		if ck, err := sql.Open("sqlite", s.dsn(false, "synchronous("+s.cfg.Synchronous+")")); err == nil {
			ck.SetMaxOpenConns(1)
			ck.SetMaxIdleConns(1)
			ck.SetConnMaxLifetime(0)
			ck.SetConnMaxIdleTime(0)
			s.ck.Store(newCheckpointer(ck, s.cfg.Logger))
		}
	}
	return w, r, nil
}

// askCheckpoint tells the background checkpointer that a write transaction
// committed.
func (s *Store) askCheckpoint() {
	if c := s.ck.Load(); c != nil {
		c.commit()
	}
}

func (s *Store) handles() (w, r *sql.DB, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, nil, adapters.ErrClosed
	}
	return s.w, s.r, nil
}

func closeBoth(w, r *sql.DB) {
	if r != nil && r != w {
		_ = r.Close()
	}
	if w != nil {
		_ = w.Close()
	}
}

// dsn returns the driver's name for the database with the given pragmas.
func (s *Store) dsn(immediate bool, pragmas ...string) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", s.cfg.BusyTimeout.Milliseconds()))
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	if immediate {
		q.Set("_txlock", "immediate")
	}
	if s.path == Memory {
		return ":memory:?" + q.Encode()
	}
	return "file:" + (&url.URL{Path: s.path}).EscapedPath() + "?" + q.Encode()
}

// open creates the parent folders, opens the handles and migrates.
func (s *Store) open(ctx context.Context) (w, r *sql.DB, err error) {
	syncPragma := "synchronous(" + s.cfg.Synchronous + ")"
	if s.path != Memory {
		commitWithFdatasync()
		// MkdirAll tolerates a folder that another store created meanwhile.
		if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
			return nil, nil, err
		}
	}
	drv, err := sqliteDriver()
	if err != nil {
		return nil, nil, err
	}
	w = sql.OpenDB(countingConnector{dsn: s.dsn(true, syncPragma, fmt.Sprintf("wal_autocheckpoint(%d)", autoCheckpointFrames)), drv: drv, opened: &s.writerConns})
	// One connection, kept for the store's lifetime: that also keeps an
	// in-memory database alive and the same for every call.
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	defer func() {
		if err != nil {
			closeBoth(w, r)
		}
	}()
	if s.path != Memory {
		if err := s.wal(ctx, w); err != nil {
			return nil, nil, err
		}
	}
	if err := migrate(ctx, w, s.cfg.Logger); err != nil {
		return nil, nil, err
	}
	if s.path == Memory {
		return w, w, nil
	}
	r, err = sql.Open("sqlite", s.dsn(false, "query_only(1)"))
	if err != nil {
		return nil, nil, err
	}
	r.SetMaxOpenConns(s.cfg.MaxReaders)
	r.SetMaxIdleConns(s.cfg.MaxReaders)
	return w, r, nil
}

// wal switches the database to WAL mode. The switch needs a moment alone with
// the file, which a second process starting at once may hold: retry briefly.
func (s *Store) wal(ctx context.Context, w *sql.DB) error {
	deadline := time.Now().Add(s.cfg.BusyTimeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		var mode string
		err := w.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode)
		if err == nil {
			if !strings.EqualFold(mode, "wal") {
				return fmt.Errorf("journal_mode is %q after switching to WAL", mode)
			}
			return nil
		}
		if time.Now().After(deadline) || !isBusy(err) {
			return fmt.Errorf("switch to WAL: %w", err)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close closes the database handles, once the appends it finds queued or
// being committed are committed (or failed); appends made after it started
// are refused. It is idempotent; every later call returns an error wrapping
// adapters.ErrClosed. An in-memory ledger is gone.
func (s *Store) Close() error {
	s.gc.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if c := s.ck.Swap(nil); c != nil {
		_ = c.close()
	}
	s.appendsPrepared.Store(false)
	s.stmts.Range(func(q, st any) bool {
		_ = st.(*sql.Stmt).Close()
		s.stmts.Delete(q)
		return true
	})
	var err error
	if s.r != nil && s.r != s.w {
		err = s.r.Close()
	}
	if s.w != nil {
		if werr := s.w.Close(); err == nil {
			err = werr
		}
	}
	s.w, s.r = nil, nil
	if err != nil {
		return fmt.Errorf("sqlite: close: %w", err)
	}
	return nil
}

// sqliteDriver returns the "sqlite" driver registered by modernc.org/sqlite.
var sqliteDriver = sync.OnceValues(func() (driver.Driver, error) {
	db, err := sql.Open("sqlite", "")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return db.Driver(), nil
})

// countingConnector opens connections to dsn with drv, counting them in
// opened.
type countingConnector struct {
	dsn    string
	drv    driver.Driver
	opened *atomic.Uint64
}

func (c countingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err == nil {
		c.opened.Add(1)
	}
	return conn, err
}

func (c countingConnector) Driver() driver.Driver { return c.drv }
