package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
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
		l, _ := projectedLedger(t, openEmbedded(t, bus.Config{}), nil)
		return l
	})
}

// projectedLedger returns a ledger on b with a memory projection, kept by
// a projector running until the test ends, and the projector. The ledger
// reads the projection through reads, when given.
func projectedLedger(t *testing.T, b *bus.Bus, reads func(*memory.Store) adapters.Ledger) (*bus.Ledger, *projections.Projector) {
	t.Helper()
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
	var from adapters.Ledger = proj
	if reads != nil {
		from = reads(proj)
	}
	l, err := bus.NewLedger(b, bus.LedgerConfig{Projection: from, AwaitProjection: p.Await})
	if err != nil {
		t.Fatalf("NewLedger: %v", err)
	}
	return l, p
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

// logSink is a slog handler target that counts the lines holding a word.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, string(p))
	return len(p), nil
}

func (s *logSink) count(word string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.lines {
		if strings.Contains(l, word) {
			n++
		}
	}
	return n
}

// TestOpenWithoutQuorum: while two of three peers are down the cluster
// answers no stream creation; Open retries until they are back, and gives
// up after SetupTimeout with the last error.
func TestOpenWithoutQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster: not with -short")
	}
	c := testenv.StartNATSCluster(t, 3)
	url := c.URLs()[0]
	c.Stop(1)
	c.Stop(2)

	t.Run("gives up", func(t *testing.T) {
		start := time.Now()
		_, err := bus.Open(context.Background(), bus.Config{URL: url, Replicas: 3, Stream: "GIVEUP", SubjectPrefix: "g.ledger", FencePrefix: "g.fence", DLQSubject: "g.dlq", SetupTimeout: 2 * time.Second})
		if err == nil || !strings.Contains(err.Error(), "create or update stream GIVEUP") {
			t.Fatalf("Open without quorum = %v, want the stream's creation error", err)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("Open gave up after %s, want about SetupTimeout (2 s)", d)
		}
	})
	t.Run("retries until the peers are back", func(t *testing.T) {
		sink := &logSink{}
		type result struct {
			b   *bus.Bus
			err error
		}
		done := make(chan result, 1)
		go func() {
			b, err := bus.Open(context.Background(), bus.Config{URL: url, Replicas: 3, Stream: "RETRY", SubjectPrefix: "r.ledger", FencePrefix: "r.fence", DLQSubject: "r.dlq",
				SetupTimeout: 2 * time.Minute, Logger: slog.New(slog.NewTextHandler(sink, nil))})
			done <- result{b, err}
		}()
		testenv.Eventually(t, 30*time.Second, func() error {
			if sink.count("retrying") == 0 {
				return errors.New("Open has not retried yet")
			}
			return nil
		})
		c.Restart(1)
		c.Restart(2)
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatalf("Open after the peers came back: %v", r.err)
			}
			defer r.b.Close()
			si, err := r.b.Stream().Info(context.Background())
			if err != nil || si.Config.Replicas != 3 {
				t.Fatalf("stream info = %+v, %v; want 3 replicas", si, err)
			}
		case <-time.After(100 * time.Second):
			t.Fatal("Open did not return within 100 s of the peers' restart")
		}
	})
}
