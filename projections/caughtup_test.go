package projections_test

import (
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/projections"
)

// TestProjectorCaughtUpDoesNotWait: a batch that has read every pending
// message is committed at once, not after BatchWait (a minute here), both on
// the first catch-up and for messages appended later.
func TestProjectorCaughtUpDoesNotWait(t *testing.T) {
	b := openBus(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	store := memory.New()
	p := &projections.Projector{Bus: b, Store: store, BatchWait: time.Minute}
	publish(t, l, 2, 1, 3)
	run(t, p)
	caughtUp(t, b, p, 20*time.Second)
	publish(t, l, 1, 1, 1)
	caughtUp(t, b, p, 20*time.Second)
	if got, want := p.Progress().Applied, uint64(2*(3+3+2)+(3+1+2)); got != want {
		t.Fatalf("applied %d entries, want %d", got, want)
	}
}
