package bus_test

import (
	"context"
	"testing"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/bus/bustest"
	"github.com/alineo-labs/alineo/testenv"
)

// openEmbedded opens a bus on a fresh embedded server.
func openEmbedded(t *testing.T, cfg bus.Config) *bus.Bus {
	t.Helper()
	cfg.URL = testenv.NATS(t)
	b, err := bus.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestBus(t *testing.T) { bustest.Run(t, openEmbedded) }
