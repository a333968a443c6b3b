package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/postgres"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/metricsrv"
)

// Defaults shared by the binaries: everything embedded, under the working directory.
const (
	DefaultSQLite  = "./alineo.db"
	DefaultNATSDir = "./.alineo/nats"
)

// Store is the store a projector writes (ProjectionStore) and the API reads:
// its ledger tables and the read model kept beside them.
type Store interface {
	adapters.Store
	adapters.ProjectionStore
}

// UsePostgres reports whether the variables select Postgres: DATABASE_URL or
// PGHOST or PGDATABASE is set.
func UsePostgres(getenv func(string) string) bool {
	return getenv("DATABASE_URL") != "" || getenv("PGHOST") != "" || getenv("PGDATABASE") != ""
}

// OpenStore opens Postgres when dsn is set or the variables select it
// (postgres.Open then reads DATABASE_URL or the PG* variables), and SQLite at
// sqlitePath otherwise. It returns the store and a description for logs.
// ALINEO_VOCABULARY=typescript makes the store write the TypeScript SDK's
// event names and payloads (events.TypeScript), for a database shared with it.
func OpenStore(sqlitePath, dsn string, getenv func(string) string) (Store, string, error) {
	voc, err := events.ParseVocabulary(getenv("ALINEO_VOCABULARY"))
	if err != nil {
		return nil, "", fmt.Errorf("ALINEO_VOCABULARY: %w", err)
	}
	if dsn != "" || UsePostgres(getenv) {
		if dsn == "" {
			dsn = getenv("DATABASE_URL")
		}
		s, err := postgres.Open(dsn, postgres.Config{Vocabulary: voc})
		if err != nil {
			return nil, "", fmt.Errorf("postgres: %w", err)
		}
		return s, "postgres", nil
	}
	if sqlitePath == "" {
		sqlitePath = DefaultSQLite
	}
	s, err := sqlite.Open(sqlitePath, sqlite.Config{Synchronous: "NORMAL", Vocabulary: voc})
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: %w", err)
	}
	return s, "sqlite " + s.Path(), nil
}

// OpenBus connects to url with the fleet settings n (nil: none), or starts
// an embedded NATS server storing under dir when url is empty.
func OpenBus(ctx context.Context, url, dir string, n *NATS, log *slog.Logger) (*bus.Bus, error) {
	if dir == "" {
		dir = DefaultNATSDir
	}
	cfg := bus.Config{URL: url, StoreDir: dir, Logger: log}
	if err := n.busConfig(&cfg); err != nil {
		return nil, err
	}
	b, err := bus.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	return b, nil
}

// Serve serves h on addr until ctx is done, then shuts it down (see
// metricsrv.Serve).
func Serve(ctx context.Context, addr string, h http.Handler) (string, <-chan error, error) {
	return metricsrv.Serve(ctx, addr, h)
}

// MetricsHandler serves reg (and the Go and process collectors) at /metrics
// and a health answer at /healthz: 200 {"status":"ok"}, or, when one of
// checks fails, 503 {"status":"unhealthy","error":...} naming the first
// failure (see metricsrv.Handler).
func MetricsHandler(reg *prometheus.Registry, checks ...func() error) http.Handler {
	cs := make([]func(context.Context) error, len(checks))
	for i, c := range checks {
		cs[i] = func(context.Context) error { return c() }
	}
	return metricsrv.Handler(reg, cs...)
}

// NATSConnected is a health check: an error unless b's connection to NATS
// is up (it reconnects by itself after an outage).
func NATSConnected(b *bus.Bus) func() error {
	return func() error {
		if st := b.Conn().Status(); st != nats.CONNECTED {
			return fmt.Errorf("NATS connection %s", st)
		}
		return nil
	}
}

// NewRegistry returns a registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry { return metricsrv.NewRegistry() }

// Env returns getenv(key), or def when it is empty.
func Env(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}
