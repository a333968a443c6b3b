package testenv

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/alineo-labs/alineo/internal/testutil"
)

// NATS starts a fresh embedded NATS server with JetStream on a loopback port,
// storing into a temp directory, and returns its client URL. The server is
// shut down by t.Cleanup.
func NATS(t testing.TB) string {
	t.Helper()
	opts := &server.Options{
		ServerName: "alineo-test",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: 8 << 20, // entries with 1 MiB of output fit
	}
	s, err := startServer(opts)
	if err != nil {
		SkipOrFail(t, "start embedded nats: "+err.Error())
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// NATSCore starts a fresh embedded NATS server without JetStream and returns
// its client URL: for a test that plays JetStream's API itself (nothing else
// answers $JS.API requests there). It is shut down by t.Cleanup.
func NATSCore(t testing.TB) string {
	t.Helper()
	s, err := startServer(&server.Options{
		ServerName: "alineo-test-core",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		SkipOrFail(t, "start embedded nats: "+err.Error())
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// Cluster is an embedded NATS cluster on loopback with JetStream on every
// node, able to host R3 streams. Nodes can be stopped and restarted (same
// ports, same store directory) for fault tests.
type Cluster struct {
	t     testing.TB
	mu    sync.Mutex
	opts  []*server.Options
	nodes []*server.Server // nil while stopped
}

// NATSCluster starts an n-node cluster and returns the client URLs of its
// nodes. It is stopped by t.Cleanup.
func NATSCluster(t testing.TB, n int) []string {
	t.Helper()
	return StartNATSCluster(t, n).URLs()
}

// StartNATSCluster starts an n-node cluster (n >= 1) and waits until its
// JetStream meta layer has a leader. It is stopped by t.Cleanup.
func StartNATSCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("NATSCluster: n = %d, want >= 1", n)
	}
	ports, err := testutil.FreePorts(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	var routes string
	for i := range n {
		if i > 0 {
			routes += ","
		}
		routes += fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i])
	}
	c := &Cluster{t: t}
	for i := range n {
		c.opts = append(c.opts, &server.Options{
			ServerName: "alineo-n" + strconv.Itoa(i+1),
			Host:       "127.0.0.1",
			Port:       ports[i],
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoSigs:     true,
			NoLog:      true,
			MaxPayload: 8 << 20,
			Cluster: server.ClusterOpts{
				Name: "alineo-test",
				Host: "127.0.0.1",
				Port: ports[n+i],
			},
			Routes: server.RoutesFromStr(routes),
		})
	}
	c.nodes = make([]*server.Server, n)
	t.Cleanup(c.shutdown)
	for i := range n {
		s, err := server.NewServer(cloneOpts(c.opts[i]))
		if err != nil {
			SkipOrFail(t, "start nats cluster node: "+err.Error())
		}
		go s.Start()
		c.nodes[i] = s
	}
	for i, s := range c.nodes {
		if !s.ReadyForConnections(10 * time.Second) {
			SkipOrFail(t, fmt.Sprintf("nats cluster node %d not ready", i))
		}
	}
	c.waitMeta()
	return c
}

// URLs returns the client URL of every node, stopped or not.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.opts))
	for i, o := range c.opts {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", o.Port)
	}
	return urls
}

// Server returns node i, or nil while it is stopped.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Stop shuts node i down. Its store directory is kept for Restart.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts node i again on the same ports and store directory.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.mu.Lock()
	if c.nodes[i] != nil {
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	s, err := startServer(cloneOpts(c.opts[i]))
	if err != nil {
		c.t.Fatalf("restart nats node %d: %v", i, err)
	}
	c.mu.Lock()
	c.nodes[i] = s
	c.mu.Unlock()
}

func (c *Cluster) waitMeta() {
	c.t.Helper()
	Eventually(c.t, 30*time.Second, func() error {
		for i, s := range c.nodes {
			if s == nil {
				continue
			}
			if !s.JetStreamIsClustered() || !s.JetStreamIsCurrent() {
				return fmt.Errorf("node %d: jetstream not current", i)
			}
		}
		for _, s := range c.nodes {
			if s == nil || !s.JetStreamIsLeader() {
				continue
			}
			// The leader must see every other running node online, or R3
			// placement fails with "no suitable peers".
			jsz, err := s.Jsz(nil)
			if err != nil {
				return fmt.Errorf("meta leader info: %w", err)
			}
			if jsz.Meta == nil {
				return errors.New("meta leader info: none")
			}
			want := 0
			for _, o := range c.nodes {
				if o != nil && o != s {
					want++
				}
			}
			online := 0
			for _, p := range jsz.Meta.Replicas {
				if p.Current && !p.Offline {
					online++
				}
			}
			if online < want {
				return fmt.Errorf("meta leader sees %d of %d peers online", online, want)
			}
			return nil
		}
		return fmt.Errorf("no jetstream meta leader yet")
	})
}

func (c *Cluster) shutdown() {
	for i := range c.nodes {
		c.Stop(i)
	}
}

func startServer(opts *server.Options) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("nats server not ready after 10s")
	}
	return s, nil
}

func cloneOpts(o *server.Options) *server.Options {
	c := *o
	c.Routes = server.RoutesFromStr(routesString(o))
	return &c
}

func routesString(o *server.Options) string {
	var s string
	for i, u := range o.Routes {
		if i > 0 {
			s += ","
		}
		s += u.String()
	}
	return s
}
