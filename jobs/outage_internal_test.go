package jobs

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startNATS starts a JetStream server on port (RANDOM_PORT for any) with its
// store in dir.
func startNATS(t *testing.T, port int, dir string) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	return s
}

// A status write made while the server is away (a node restarting) is
// retried until it is back, not lost: a worker that gave up there failed a
// job for good, or acknowledged a finished job whose status stayed running
// (both found by the soak).
func TestStatusUpdateRidesOutAnOutage(t *testing.T) {
	dir := t.TempDir()
	s := startNATS(t, server.RANDOM_PORT, dir)
	port := s.Addr().(*net.TCPAddr).Port // read before Shutdown, which clears it
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q, err := OpenQueue(ctx, js, QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := q.Submit(ctx, Spec{Name: "outage", Image: "i", Steps: []Step{{Exec: &ExecStep{Command: "true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	done := make(chan error, 1)
	go func() {
		_, err := q.update(ctx, st.ID, func(s *Status) { s.State = StateSucceeded })
		done <- err
	}()
	time.Sleep(time.Second) // the update is retrying against no server
	select {
	case err := <-done:
		t.Fatalf("update returned %v while the server was down, want it to wait", err)
	default:
	}
	s2 := startNATS(t, port, dir)
	defer s2.Shutdown()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("update after the server came back: %v", err)
		}
	case <-time.After(statusRetryFor):
		t.Fatal("update did not finish after the server came back")
	}
	got, err := q.Status(ctx, st.ID)
	if err != nil || got.State != StateSucceeded {
		t.Fatalf("status = %+v, %v; want succeeded", got, err)
	}
}
