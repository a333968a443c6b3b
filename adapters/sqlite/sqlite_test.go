package sqlite_test

import (
	"fmt"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/testenv"
)

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformanceFile(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T) adapters.Store { return open(t, testenv.SQLitePath(t)) })
}

func TestConformanceMemory(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T) adapters.Store { return open(t, sqlite.Memory) })
}

func TestProjection(t *testing.T) {
	adaptertest.RunProjection(t, func(t *testing.T) adaptertest.ProjectionStore { return open(t, testenv.SQLitePath(t)) })
}

func TestSameAnswersAsMemory(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			adaptertest.Differential(t, memory.New(), open(t, testenv.SQLitePath(t)), seed)
		})
	}
}

// FuzzSameAnswersAsMemory explores workloads: go test -fuzz SameAnswers ./adapters/sqlite
func FuzzSameAnswersAsMemory(f *testing.F) {
	for seed := range uint64(3) {
		f.Add(seed + 100)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		adaptertest.Differential(t, memory.New(), open(t, sqlite.Memory), seed)
	})
}
