package opensandbox

import (
	"testing"
	"time"
)

// TestPollBackOffStartsFast: the wait loops poll 2 ms after the first look,
// then double the interval up to 100 ms, so a transition of a few tens of
// milliseconds is seen a few milliseconds late, not a flat 100 ms.
func TestPollBackOffStartsFast(t *testing.T) {
	bo := pollBackOff(pollMax)
	want := []time.Duration{2, 4, 8, 16, 32, 64, 100, 100, 100}
	var elapsed time.Duration
	for i, w := range want {
		w *= time.Millisecond
		d := bo.NextBackOff()
		if lo, hi := w*9/10, w*11/10; d < lo || d > hi {
			t.Fatalf("interval %d = %v, want %v ±10%%", i, d, w)
		}
		elapsed += d
		if i == 4 && elapsed > 70*time.Millisecond {
			t.Errorf("5 polls took %v of waiting, want about 62 ms", elapsed)
		}
	}
}
