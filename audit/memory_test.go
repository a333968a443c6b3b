package audit_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/audit"
	"github.com/alineo-labs/alineo/events"
)

// generated is a Scanner of n chained entries over sessions sessions,
// made on the fly: the ledger exists nowhere in memory.
type generated struct {
	n, sessions int
	payload     string
}

func (g generated) ScanLedger(ctx context.Context, _ string, _, _ int64, fn func(events.Entry) error) error {
	var chain events.Chain
	for i := range g.n {
		e := events.New(int64(1+i), "mem", fmt.Sprintf("s%d", i%g.sessions), 1, events.ExecOutput,
			events.NewOutput(i, events.Stdout, []byte(g.payload)))
		e.Seq = uint64(i + 1)
		e, err := chain.Link(e)
		if err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// TestVerifyBoundedMemory verifies 300k entries of 1 KiB (300 MiB of
// payloads; 100k under the race detector or -short, still above the limit)
// and samples the live heap along the way: it stays far below what keeping
// the entries would take. Verify also reports progress.
func TestVerifyBoundedMemory(t *testing.T) {
	n := 300_000
	if testing.Short() || raceEnabled {
		n = 100_000
	}
	g := generated{n: n, sessions: 100, payload: strings.Repeat("x", 1024)}
	var peak uint64
	var progress []int
	opts := audit.Options{ProgressEvery: n / 10, Progress: func(read int) {
		progress = append(progress, read)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
	}}
	res, err := audit.Verify(t.Context(), g, audit.Filter{}, opts)
	if err != nil || res.Entries != n || len(res.Sessions) != 100 {
		t.Fatalf("Verify = %d entries, %d sessions, %v", res.Entries, len(res.Sessions), err)
	}
	if len(progress) != 10 || progress[9] != n {
		t.Fatalf("progress = %v, want 10 reports up to %d", progress, n)
	}
	const limit = 64 << 20
	if peak > limit {
		t.Fatalf("live heap reached %d MiB verifying %d MiB of entries; want under %d MiB", peak>>20, n>>10, limit>>20)
	}
	t.Logf("live heap peak %.1f MiB for %d entries", float64(peak)/(1<<20), n)
}
