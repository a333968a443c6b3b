package execstats_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/postgres"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/examples/execstats"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/projections/projectiontest"
	"github.com/alineo-labs/alineo/testenv"
)

// userProjection is a projection of a user's own: the sandboxes closed, one
// row each, exactly once through an SQLHandler with nothing but a Name.
func userProjection(db *sql.DB, d projections.Dialect) (*projections.SQLHandler, projections.Filter) {
	h := &projections.SQLHandler{DB: db, Dialect: d, Name: "closed-sandboxes",
		Schema: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS closed_sandboxes (seq BIGINT PRIMARY KEY, sandbox_id TEXT NOT NULL)`)
			return err
		},
		ApplyTx: func(ctx context.Context, tx *sql.Tx, es []events.Entry) error {
			for _, e := range es {
				if _, err := tx.ExecContext(ctx, d.Rebind(`INSERT INTO closed_sandboxes (seq, sandbox_id) VALUES (?, ?)`), int64(e.Seq), e.SandboxID); err != nil {
					return err
				}
			}
			return nil
		}}
	return h, projections.Filter{Events: []events.Event{events.SandboxClosed}}
}

// TestBesideTheProductTables (issue 40 item 2): execstats and a user's
// projection run in the database that holds the product's tables (whose
// alineo_projection_offsets has other columns), in SQLite and in Postgres,
// each with its own offset table, and all three catch up with the stream.
func TestBesideTheProductTables(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "alineo.db")
		store, err := sqlite.Open(path, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		besideTheProductTables(t, store, db, projections.SQLite)
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := testenv.Postgres(t)
		store, err := postgres.Open(dsn, postgres.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		besideTheProductTables(t, store, db, projections.Postgres)
	})
}

type productStore interface {
	adapters.Store
	adapters.ProjectionStore
}

func besideTheProductTables(t *testing.T, store productStore, db *sql.DB, d projections.Dialect) {
	ctx := context.Background()
	b := projectiontest.Bus(t)
	sandboxes, execs := 4, 3
	projectiontest.Publish(t, b, projectiontest.History(7, sandboxes, execs))
	user, userFilter := userProjection(db, d)
	runtimes := []*projections.Runtime{
		{Bus: b, Handler: projections.TablesHandler(store), Name: projections.TablesProjection, Consumer: projections.DefaultConsumer},
		{Bus: b, Handler: execstats.New(db, d), Name: execstats.Name, Filter: execstats.Filter},
		{Bus: b, Handler: user, Name: user.Name, Filter: userFilter},
	}
	for _, r := range runtimes {
		projectiontest.Start(t, r)
		projectiontest.Await(t, r, projectiontest.LastSeq(t, b, r.Filter), time.Minute)
	}
	ds, err := store.ListAllSandboxDetails(ctx, adapters.ListOptions{})
	if err != nil || len(ds) != sandboxes {
		t.Errorf("product's sandbox details = %d, %v; want %d", len(ds), err, sandboxes)
	}
	n := 0
	for _, r := range stats(t, db) {
		n += r.Count
	}
	if n != sandboxes*execs {
		t.Errorf("execstats counted %d execs, want %d", n, sandboxes*execs)
	}
	var closed int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM closed_sandboxes`).Scan(&closed); err != nil || closed != sandboxes {
		t.Errorf("user projection: %d closed sandboxes, %v; want %d", closed, err, sandboxes)
	}
	for _, table := range []string{"execstats_offsets", "closed_sandboxes_offsets"} {
		var keys int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&keys); err != nil || keys != 1 {
			t.Errorf("%s: %d keys, %v; want 1", table, keys, err)
		}
	}
}
