package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/postgres"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
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

// Serve serves h on addr until ctx is done, then shuts it down. It returns
// the bound address at once (addr may end in :0) and a channel that receives
// Serve's result.
func Serve(ctx context.Context, addr string, h http.Handler) (string, <-chan error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		done <- err
	}()
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	return ln.Addr().String(), done, nil
}

// MetricsHandler serves reg (and the Go and process collectors) at /metrics
// and a health answer at /healthz: 200 {"status":"ok"}, or, when one of
// checks fails, 503 {"status":"unhealthy","error":...} naming the first
// failure.
func MetricsHandler(reg *prometheus.Registry, checks ...func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for _, check := range checks {
			if err := check(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_ = json.NewEncoder(w).Encode(map[string]string{"status": "unhealthy", "error": err.Error()})
				return
			}
		}
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	return mux
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
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Env returns getenv(key), or def when it is empty.
func Env(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}
