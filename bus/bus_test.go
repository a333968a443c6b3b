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

// TestAdapterConformance runs the storage suite against the bus ledger, with a
// memory read model kept by a projector running in the test.
func TestAdapterConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T) adapters.Store {
		b := openEmbedded(t, bus.Config{})
		rm := memory.New()
		p := &projections.Projector{Bus: b, Store: rm, BatchWait: 5 * time.Millisecond}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("projector: %v", err)
			}
		})
		l, err := bus.NewLedger(b, bus.LedgerConfig{
			ReadModel: rm,
			AwaitReadModel: func(ctx context.Context, seq uint64) error {
				for p.Progress().Offset < seq {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(2 * time.Millisecond):
					}
				}
				return nil
			},
		})
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
