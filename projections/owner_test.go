package projections_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/projections/projectiontest"
	"github.com/alineo-labs/alineo/testenv"
)

// TestSecondProjectorWaits: two projectors started on the same partition:
// the second applies nothing while the first runs, and takes over, from the
// first's offset, once the first stops; a holder that dies without
// releasing is taken over once its claim expires.
func TestSecondProjectorWaits(t *testing.T) {
	b := projectiontest.Bus(t)
	es := projectiontest.History(10, 5, 2)
	projectiontest.Publish(t, b, es)
	last := projectiontest.LastSeq(t, b, projections.Filter{})
	shared := &recorder{}
	first := &projections.Runtime{Bus: b, Handler: shared, Name: "owned", OwnerTTL: 2 * time.Second}
	stopFirst := projectiontest.Start(t, first)
	projectiontest.Await(t, first, last, 20*time.Second)

	second := &projections.Runtime{Bus: b, Handler: shared, Name: "owned", OwnerTTL: 2 * time.Second}
	stopSecond := projectiontest.Start(t, second)
	testenv.Eventually(t, 10*time.Second, func() error {
		if !second.Progress().Waiting {
			return errors.New("the second projector does not wait")
		}
		return nil
	})
	more := projectiontest.History(3, 2, 1)
	for i := range more {
		more[i].SandboxID = "later-" + more[i].SandboxID
	}
	projectiontest.Publish(t, b, more)
	total := len(es) + len(more)
	last2 := projectiontest.LastSeq(t, b, projections.Filter{})
	projectiontest.Await(t, first, last2, 20*time.Second)
	if p := second.Progress(); p.Applied != 0 || !p.Waiting {
		t.Fatalf("second projector while the first runs: %+v, want waiting and nothing applied", p)
	}
	if err := stopFirst(); err != nil {
		t.Fatal(err)
	}
	// A clean stop releases the claim: the second takes over at once.
	more = projectiontest.History(2, 2, 1)
	for i := range more {
		more[i].SandboxID = "after-" + more[i].SandboxID
	}
	projectiontest.Publish(t, b, more)
	total += len(more)
	last3 := projectiontest.LastSeq(t, b, projections.Filter{})
	projectiontest.Await(t, second, last3, 20*time.Second)
	if got, want := len(shared.entries()), total; got != want {
		t.Errorf("%d entries applied in all, want %d (each once)", got, want)
	}

	// A holder that died (its claim not released, not renewed) is taken
	// over once the claim expires.
	if err := stopSecond(); err != nil {
		t.Fatal(err)
	}
	kv, err := b.JetStream().KeyValue(context.Background(), projections.OwnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(context.Background(), first.Key(), []byte("a dead projector")); err != nil {
		t.Fatal(err)
	}
	third := &projections.Runtime{Bus: b, Handler: shared, Name: "owned", OwnerTTL: 2 * time.Second}
	projectiontest.Start(t, third)
	start := time.Now()
	testenv.Eventually(t, 15*time.Second, func() error {
		if e, err := kv.Get(context.Background(), first.Key()); err == nil && string(e.Value()) != "a dead projector" {
			return nil
		} else if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return err
		}
		return errors.New("the dead projector's claim is still held")
	})
	if time.Since(start) < time.Second {
		t.Errorf("a live claim was taken after %v", time.Since(start))
	}
}
