package postgres

import (
	"context"
	"testing"
)

// TestBenchBaselines runs the raw paths the benchmarks measure the store
// against on a few rows, so that a schema change they miss fails a test,
// not only a benchmark run.
func TestBenchBaselines(t *testing.T) {
	ctx := context.Background()
	s := migratedStore(t)
	es := outputEntries(30)
	if err := rawCopy(ctx, s, es[:10], 4); err != nil {
		t.Fatalf("rawCopy: %v", err)
	}
	projected := es[10:20]
	for i := range projected {
		projected[i].Seq = uint64(100 + i)
	}
	if err := rawProjected(ctx, s, projected); err != nil {
		t.Fatalf("rawProjected: %v", err)
	}
	p, err := s.db(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := p.QueryRow(ctx, `SELECT count(*) FROM alineo_events`).Scan(&n); err != nil || n != 20 {
		t.Fatalf("%d rows, %v; want 20", n, err)
	}
}
