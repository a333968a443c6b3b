package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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

// Config tunes a Store. The zero value is valid.
type Config struct {
	// ConnectTimeout bounds each attempt to open a connection, unless the DSN
	// sets connect_timeout. Default 5s.
	ConnectTimeout time.Duration
	// MaxConns bounds the pool, unless the DSN sets pool_max_conns. Default 10.
	MaxConns int32
	// Vocabulary is the set of event names and payload fields the store
	// writes: events.Dotted (default, the names of the storage docs) or
	// events.TypeScript (exactly what the TypeScript SDK 0.2.0 writes, so that
	// TypeScript processes sharing the database read what this store writes;
	// payloads are JSONB objects, which its reads parse, not the JSONB strings
	// its own Postgres adapter stores). Reads accept both whatever it is.
	Vocabulary events.Vocabulary
	// Logger receives migration notes. Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.MaxConns == 0 {
		c.MaxConns = 10
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ConnectTimeout < 0 || c.MaxConns < 0 {
		return c, fmt.Errorf("%w: ConnectTimeout %v, MaxConns %d", ErrInvalidConfig, c.ConnectTimeout, c.MaxConns)
	}
	if !c.Vocabulary.Valid() {
		return c, fmt.Errorf("%w: Vocabulary %v", ErrInvalidConfig, c.Vocabulary)
	}
	return c, nil
}

// maxCommitsInFlight bounds the append batches being committed at once.
const maxCommitsInFlight = 4

// Store is a ledger in one Postgres database. All methods are safe for
// concurrent use, by several Stores (and processes) on one database too.
type Store struct {
	pcfg *pgxpool.Config
	cfg  Config
	// initSem serialises first use; a failed init is retried by the next call.
	initSem chan struct{}

	mu     sync.RWMutex
	closed bool
	pool   *pgxpool.Pool

	cu catchUpState

	// heads remembers the chain heads this store committed (chain.go).
	heads headCache

	// gc commits appends: concurrent ones share one transaction, in one
	// round trip.
	gc *groupcommit.Committer[[]events.Entry]
}

// Open returns a Store for the database at dsn: a postgres:// URL or a
// key=value string. An empty dsn means $DATABASE_URL, or else the PG*
// variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE). Open only parses
// and validates: it connects and migrates on first use.
func Open(dsn string, cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if dsn == "" {
		dsn = os.Getenv("DATABASE_URL")
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		pcfg.MaxConns = cfg.MaxConns
	}
	s := &Store{pcfg: pcfg, cfg: cfg, initSem: make(chan struct{}, 1)}
	// A few batches in flight at once, each on a connection of its own: a
	// commit waits for a round trip to a server process, which a loaded
	// machine may be slow to run; the pool keeps half its connections for
	// reads.
	inFlight := max(1, min(maxCommitsInFlight, int(pcfg.MaxConns)/2))
	s.gc = groupcommit.New(s.commitAppends, func(es []events.Entry) int { return len(es) },
		groupcommit.Config{MaxInFlight: inFlight})
	return s, nil
}

func (s *Store) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// db returns the pool, connecting and migrating on first use. Callers pass its
// error through translate.
func (s *Store) db(ctx context.Context) (*pgxpool.Pool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if p, err := s.current(); p != nil || err != nil {
		return p, err
	}
	select {
	case s.initSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.initSem }()
	if p, err := s.current(); p != nil || err != nil {
		return p, err
	}
	p, err := pgxpool.NewWithConfig(ctx, s.pcfg)
	if err != nil {
		return nil, err
	}
	if err := migrate(ctx, p, s.cfg.Logger); err != nil {
		p.Close()
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		p.Close()
		return nil, adapters.ErrClosed
	}
	s.pool = p
	return p, nil
}

func (s *Store) current() (*pgxpool.Pool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, adapters.ErrClosed
	}
	return s.pool, nil
}

// Close closes the pool, once the appends it finds queued or being committed
// are committed (or failed), waiting for connections in use to be returned;
// appends made after it started are refused. It is idempotent; every later
// call returns an error wrapping adapters.ErrClosed.
func (s *Store) Close() error {
	s.gc.Close()
	s.mu.Lock()
	p := s.pool
	s.closed, s.pool = true, nil
	s.mu.Unlock()
	if p != nil {
		p.Close()
	}
	return nil
}
