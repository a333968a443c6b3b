package postgres_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/postgres"
	"github.com/alineo-labs/alineo/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres()
	os.Exit(code)
}

func open(t testing.TB, dsn string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(dsn, postgres.Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T) adapters.Store { return open(t, testenv.Postgres(t)) })
}

func TestProjection(t *testing.T) {
	adaptertest.RunProjection(t, func(t *testing.T) adaptertest.ProjectionStore { return open(t, testenv.Postgres(t)) })
}

func TestSameAnswersAsMemory(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			adaptertest.Differential(t, memory.New(), open(t, testenv.Postgres(t)), seed)
		})
	}
}
