package audit

import (
	"context"
	"errors"
	"testing"

	"github.com/alineo-labs/alineo/events"
)

// fakeScanner hands out n entries of one session, then fails with err.
type fakeScanner struct {
	n   int
	err error
}

func (s fakeScanner) ScanLedger(ctx context.Context, _ string, _, _ int64, fn func(events.Entry) error) error {
	for i := 1; i <= s.n; i++ {
		if err := fn(events.Entry{Seq: uint64(i), Ts: int64(i), Name: "n", SandboxID: "s", Event: events.ExecOutput}); err != nil {
			return err
		}
	}
	return s.err
}

// TestScanBatched: the entries arrive whole and in order across batches,
// the read's error comes back, and a cancelled read ends without a leak.
func TestScanBatched(t *testing.T) {
	for _, n := range []int{0, 1, scanBatch - 1, scanBatch, scanBatch*scanBatches*3 + 7} {
		var got []uint64
		err := scanBatched(t.Context(), fakeScanner{n: n}, Filter{}, func(b []events.Entry) {
			for _, e := range b {
				got = append(got, e.Seq)
			}
		})
		if err != nil || len(got) != n {
			t.Fatalf("n=%d: %d entries, %v", n, len(got), err)
		}
		for i, s := range got {
			if s != uint64(i+1) {
				t.Fatalf("n=%d: entry %d has seq %d", n, i, s)
			}
		}
	}
	boom := errors.New("boom")
	if err := scanBatched(t.Context(), fakeScanner{n: 1000, err: boom}, Filter{}, func([]events.Entry) {}); !errors.Is(err, boom) {
		t.Fatalf("read error: got %v, want boom", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	err := scanBatched(ctx, fakeScanner{n: 1 << 20}, Filter{}, func([]events.Entry) {
		if calls++; calls == 3 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: got %v, want context.Canceled", err)
	}
}
