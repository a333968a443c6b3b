package sqlite

import (
	"context"
	"testing"
)

// TestBenchBaselines runs the raw paths the benchmarks measure the store
// against on a few rows, so that a schema change they miss fails a test,
// not only a benchmark run.
func TestBenchBaselines(t *testing.T) {
	ctx := context.Background()
	_, raw := migrated(t)
	es := outputEntries(30)
	if err := rawInsert(ctx, raw, es[:10], 4); err != nil {
		t.Fatalf("rawInsert: %v", err)
	}
	projected := es[10:20]
	for i := range projected {
		projected[i].Seq = uint64(100 + i)
	}
	if err := rawProjected(ctx, raw, projected); err != nil {
		t.Fatalf("rawProjected: %v", err)
	}
	var n int
	if err := raw.QueryRowContext(ctx, `SELECT count(*) FROM alineo_events`).Scan(&n); err != nil || n != 20 {
		t.Fatalf("%d rows, %v; want 20", n, err)
	}
	if err := rawRead(ctx, raw); err != nil {
		t.Fatalf("rawRead: %v", err)
	}
}
