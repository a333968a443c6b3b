package projections_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/postgres"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres()
	os.Exit(code)
}

// TestReliabilityPostgresOutage stops Postgres for 10 s while events keep
// arriving: the projector retries with backoff, loses nothing, and its lag
// goes back to zero once the database is back.
func TestReliabilityPostgresOutage(t *testing.T) {
	pg := testenv.PostgresServer(t)
	s, err := postgres.Open(pg.DSN(), postgres.Config{})
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	b := openBus(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	p := &projections.Projector{Bus: b, Store: s, BatchSize: 200, MaxBackoff: time.Second,
		Logger: slog.New(slog.DiscardHandler)}
	stop := run(t, p)

	publish(t, l, 5, 5, 20)
	caughtUp(t, b, p, 30*time.Second)
	errsBefore := p.Progress().Errors

	if err := pg.Stop(); err != nil {
		t.Fatalf("stop postgres: %v", err)
	}
	outage := time.Now()
	publish(t, l, 10, 5, 20)
	testenv.Eventually(t, 10*time.Second, func() error {
		if pr := p.Progress(); pr.Errors == errsBefore || pr.Lag == 0 {
			return fmt.Errorf("projector has not noticed the outage yet: %+v", pr)
		}
		return nil
	})
	behind := lastLedgerSeq(t, b) - p.Progress().Offset
	<-time.After(10*time.Second - time.Since(outage)) // the outage lasts 10 s
	if err := pg.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	t.Logf("postgres down for %v; projector %d events behind, %d retried errors", time.Since(outage).Round(time.Millisecond), behind, p.Progress().Errors-errsBefore)
	publish(t, l, 5, 5, 20)
	caughtUp(t, b, p, 60*time.Second)
	if got := p.Progress().Lag; got != 0 {
		t.Fatalf("lag = %d after recovery, want 0", got)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	rebuilt := memory.New()
	if _, err := projections.Rebuild(context.Background(), b, rebuilt, nil); err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	if err := projections.Verify(context.Background(), s, rebuilt); err != nil {
		t.Fatalf("Verify(postgres after outage, rebuilt): %v", err)
	}
}
