package projections_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/bus/bustest"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/testenv"
)

// TestReliabilityClusterR3 stops one node of a 3-node cluster (the stream
// leader) during a 100k-event publish to an R3 stream: every event whose
// publish was acknowledged reaches the projection.
func TestReliabilityClusterR3(t *testing.T) {
	n := loadSize(100_000, 20_000)
	c := testenv.StartNATSCluster(t, 3)
	b := openBus(t, bus.Config{URL: strings.Join(c.URLs(), ","), Replicas: 3})
	l := newLedger(t, b, bus.LedgerConfig{MaxPending: 4096, AckTimeout: 5 * time.Second})
	store := memory.New()
	p := &projections.Projector{Bus: b, Store: store}
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const sandboxes, syncEvery = 200, 25
	per := n / sandboxes
	ids := make([]string, sandboxes)
	acked := make([][]events.Entry, sandboxes)
	var published, failures atomic.Int64
	var wg sync.WaitGroup
	for i := range sandboxes {
		ids[i] = bustest.ID("r3")
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := ids[i]
			var pending []events.Entry
			for k := range per {
				e := events.New(time.Now().UnixMilli(), "r3", id, k, events.ExecOutput,
					events.NewOutput(k, events.Stdout, []byte("chunk "+strconv.Itoa(k))))
				err := l.Append(ctx, e)
				if err == nil {
					pending = append(pending, e)
					published.Add(1)
					if len(pending) == syncEvery || k == per-1 {
						if err = l.Sync(ctx, id); err == nil {
							acked[i] = append(acked[i], pending...)
							pending = nil
						}
					}
				}
				if err == nil {
					continue
				}
				if ctx.Err() != nil {
					return
				}
				// The writer failed (leader gone, ack timeout): its unacknowledged
				// events may or may not be stored. Take the sandbox over again and go on.
				failures.Add(1)
				pending = nil
				for {
					if _, err := l.Takeover(ctx, id); err == nil || ctx.Err() != nil {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	testenv.Eventually(t, 90*time.Second, func() error {
		if got := published.Load(); got < int64(n/3) {
			return fmt.Errorf("published %d of %d", got, n)
		}
		return nil
	})
	si, err := b.Stream().Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	leader := -1
	if si.Cluster != nil {
		for i := range 3 {
			if s := c.Server(i); s != nil && s.Name() == si.Cluster.Leader {
				leader = i
			}
		}
	}
	if leader < 0 {
		t.Fatalf("no stream leader in %+v", si.Cluster)
	}
	c.Stop(leader)
	t.Logf("stopped node %d (stream leader %s) after %d of %d events", leader, si.Cluster.Leader, published.Load(), n)
	var stuck bytes.Buffer
	watchdog := time.AfterFunc(60*time.Second, func() { _ = pprof.Lookup("goroutine").WriteTo(&stuck, 1) })
	wg.Wait()
	watchdog.Stop()
	if ctx.Err() != nil {
		t.Logf("goroutines 60 s after the stop:\n%s", stuck.String())
		var buf bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
		t.Fatalf("load did not finish: %v (published %d)\n%s", ctx.Err(), published.Load(), buf.String())
	}
	var total int
	for _, a := range acked {
		total += len(a)
	}
	t.Logf("%d events acknowledged, %d writer failures (taken over)", total, failures.Load())
	if total < n/2 {
		t.Fatalf("only %d of %d events acknowledged", total, n)
	}
	testenv.Eventually(t, 90*time.Second, func() error {
		for i, id := range ids {
			got, err := store.ReadAll(ctx, "r3", id)
			if err != nil {
				return err
			}
			have := make(map[string]bool, len(got))
			for _, e := range got {
				have[string(e.Payload)] = true
			}
			for _, e := range acked[i] {
				if !have[string(e.Payload)] {
					return fmt.Errorf("acknowledged event %s of %s not projected (projector %+v)", e.Payload, id, p.Progress())
				}
			}
		}
		return nil
	})
}
