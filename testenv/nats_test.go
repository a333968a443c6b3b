package testenv_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/alineo-labs/alineo/testenv"
)

func TestNATS(t *testing.T) {
	nc, err := nats.Connect(testenv.NATS(t))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer nc.Close()
	if !nc.IsConnected() {
		t.Fatalf("not connected")
	}
}

func TestNATSClusterStopRestart(t *testing.T) {
	c := testenv.StartNATSCluster(t, 3)
	if got := len(c.URLs()); got != 3 {
		t.Fatalf("URLs = %d, want 3", got)
	}
	c.Stop(1)
	if c.Server(1) != nil {
		t.Fatalf("node 1 still running after Stop")
	}
	if _, err := nats.Connect(c.URLs()[1], nats.Timeout(500*time.Millisecond)); err == nil {
		t.Fatalf("connected to a stopped node")
	}
	c.Restart(1)
	testenv.Eventually(t, 20*time.Second, func() error {
		s := c.Server(1)
		if s == nil || !s.JetStreamIsCurrent() {
			return errors.New("restarted node's JetStream not current")
		}
		return nil
	})
	nc, err := nats.Connect(c.URLs()[1])
	if err != nil {
		t.Fatalf("connect to restarted node: %v", err)
	}
	nc.Close()
}
