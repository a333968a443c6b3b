package execstats_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/alineo-labs/alineo/examples/execstats"
	"github.com/alineo-labs/alineo/examples/internal/fixture"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/projections/projectiontest"
	"github.com/alineo-labs/alineo/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	fixture.Close()
	testenv.StopPostgres()
	os.Exit(code)
}

// The same projection into Postgres gives the same figures as into SQLite.
func TestPostgresEqualsSQLite(t *testing.T) {
	pg, err := sql.Open("pgx", testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	b := projectiontest.Bus(t)
	es := projectiontest.History(5, 60, 10)
	projectiontest.Publish(t, b, es)
	last := projectiontest.LastSeq(t, b, execstats.Filter)
	lite := openDB(t)
	for _, tgt := range []struct {
		db *sql.DB
		d  projections.Dialect
	}{{pg, projections.Postgres}, {lite, projections.SQLite}} {
		r := runtime(&projections.Runtime{Bus: b, BatchSize: 300}, execstats.New(tgt.db, tgt.d), "execstats-"+string(tgt.d))
		projectiontest.Start(t, r)
		projectiontest.Await(t, r, last, 2*time.Minute)
	}
	if err := execstats.Verify(context.Background(), pg, projections.Postgres, lite, projections.SQLite); err != nil {
		t.Fatalf("Postgres differs from SQLite: %v", err)
	}
	if got := stats(t, pg); len(got) == 0 {
		t.Fatal("no figures in Postgres")
	}
}
