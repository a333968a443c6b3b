package api

import (
	"context"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// TestHubSharesAndCutsOff: two live streams with one filter share one feed;
// the one that does not read is cut off once its queue is full, the other
// gets every event; the feed ends when both leave.
func TestHubSharesAndCutsOff(t *testing.T) {
	b, err := bus.Open(context.Background(), bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := New(Config{Store: memory.New(), Bus: b, StreamBuffer: 4})
	if err != nil {
		t.Fatal(err)
	}
	f := bus.Filter{SandboxID: "hub", Events: []events.Event{events.ExecOutput}}
	fast, leaveFast, err := s.hub.join(s, f)
	if err != nil {
		t.Fatal(err)
	}
	slow, leaveSlow, err := s.hub.join(s, bus.Filter{SandboxID: "hub", Events: []events.Event{events.ExecOutput, events.ExecOutput}})
	if err != nil {
		t.Fatal(err)
	}
	s.hub.mu.Lock()
	feeds := len(s.hub.feeds)
	s.hub.mu.Unlock()
	if feeds != 1 {
		t.Fatalf("feeds = %d, want 1 shared feed", feeds)
	}
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 20
	got := 0
	for i := range n {
		if err := l.Append(context.Background(), events.New(time.Now().UnixMilli(), "hub", "hub", 1, events.ExecOutput, events.NewOutput(i, events.Stdout, []byte("x")))); err != nil {
			t.Fatal(err)
		}
		select { // keep the fast stream drained
		case fr := <-fast:
			if fr.err != nil {
				t.Fatal(fr.err)
			}
			got++
		case <-time.After(5 * time.Second):
			t.Fatalf("fast stream got %d of %d", got, i+1)
		}
	}
	if got != n {
		t.Fatalf("fast stream got %d, want %d", got, n)
	}
	buffered := 0
	for range slow {
		buffered++
	}
	if buffered != 4 {
		t.Errorf("slow stream had %d frames before it was cut off, want its buffer of 4", buffered)
	}
	leaveSlow()
	leaveFast()
	s.hub.mu.Lock()
	feeds = len(s.hub.feeds)
	s.hub.mu.Unlock()
	if feeds != 0 {
		t.Errorf("feeds after leaving = %d, want 0", feeds)
	}
}
