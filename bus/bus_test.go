package bus_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/bus/bustest"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/testenv"
)

// openEmbedded opens a bus on a fresh embedded server.
func openEmbedded(t testing.TB, cfg bus.Config) *bus.Bus {
	t.Helper()
	cfg.URL = testenv.NATS(t)
	b, err := bus.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestBus(t *testing.T) {
	bustest.Run(t, func(t *testing.T, cfg bus.Config) *bus.Bus { return openEmbedded(t, cfg) })
}

// TestAdapterConformance runs the Ledger half of the storage suite against
// the bus ledger (the bus serves no read model), with a memory projection
// kept by a projector running in the test, as a fleet has one.
func TestAdapterConformance(t *testing.T) {
	adaptertest.RunLedger(t, func(t *testing.T) adapters.Ledger {
		b := openEmbedded(t, bus.Config{})
		proj := memory.New()
		p := &projections.Projector{Bus: b, Store: proj, BatchWait: 5 * time.Millisecond}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("projector: %v", err)
			}
		})
		l, err := bus.NewLedger(b, bus.LedgerConfig{Projection: proj, AwaitProjection: p.Await})
		if err != nil {
			t.Fatalf("NewLedger: %v", err)
		}
		return l
	})
}

// TestAdapterConformanceBare runs the Ledger half against a bus ledger with
// nothing beside it: the stream is the whole ledger.
func TestAdapterConformanceBare(t *testing.T) {
	adaptertest.RunLedger(t, func(t *testing.T) adapters.Ledger {
		l, err := bus.NewLedger(openEmbedded(t, bus.Config{}), bus.LedgerConfig{})
		if err != nil {
			t.Fatalf("NewLedger: %v", err)
		}
		return l
	})
}

// TestBusClusterR3 runs the conformance suite on an R3 stream of a 3-node
// cluster, each case on streams and subjects of its own.
func TestBusClusterR3(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster: not with -short")
	}
	c := testenv.StartNATSCluster(t, 3)
	url := strings.Join(c.URLs(), ",")
	var n atomic.Int64
	bustest.Run(t, func(t *testing.T, cfg bus.Config) *bus.Bus {
		i := n.Add(1)
		cfg.URL, cfg.Replicas = url, 3
		cfg.Stream = fmt.Sprintf("LEDGER_%d", i)
		cfg.SubjectPrefix = fmt.Sprintf("l%d.ledger", i)
		cfg.FencePrefix = fmt.Sprintf("l%d.fence", i)
		cfg.DLQSubject = fmt.Sprintf("l%d.dlq", i)
		b, err := bus.Open(context.Background(), cfg)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() {
			_ = b.JetStream().DeleteStream(context.Background(), cfg.Stream)
			_ = b.JetStream().DeleteStream(context.Background(), b.DLQStream())
			b.Close()
		})
		return b
	})
}
