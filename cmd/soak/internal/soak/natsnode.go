package soak

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSNodeCommand is the argument that makes the soak binary run one NATS
// cluster node (RunNATSNode) instead of the soak: each node is a process of
// its own, so it can be killed with SIGKILL and restarted on its store.
const NATSNodeCommand = "nats-node"

// RunNATSNode runs one JetStream cluster node of nats-server (the module's
// own) until SIGTERM or SIGINT. Flags: --name, --host (the address it
// listens on for clients and routes, default 127.0.0.1), --port,
// --cluster-port, --routes (comma-separated nats-route:// URLs of every
// node), --store.
func RunNATSNode(args []string) error {
	fs := flag.NewFlagSet(NATSNodeCommand, flag.ContinueOnError)
	name := fs.String("name", "soak-n1", "server name")
	host := fs.String("host", "127.0.0.1", "address of the client and route listeners")
	port := fs.Int("port", 4222, "client port")
	cport := fs.Int("cluster-port", 6222, "route port")
	routes := fs.String("routes", "", "routes of the cluster's nodes")
	store := fs.String("store", "", "JetStream directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *store == "" {
		return fmt.Errorf("%s: --store is required", NATSNodeCommand)
	}
	s, err := server.NewServer(nodeOptions(*name, *host, *port, *cport, *routes, *store))
	if err != nil {
		return err
	}
	s.ConfigureLogger()
	go s.Start()
	if !s.ReadyForConnections(60 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("%s: not ready after 60s", *name)
	}
	fmt.Fprintf(os.Stdout, "nats node %s: clients nats://%s:%d, routes %d\n", *name, *host, *port, *cport)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}

// nodeOptions are the options of the soak's cluster node name.
func nodeOptions(name, host string, port, clusterPort int, routes, store string) *server.Options {
	return &server.Options{
		ServerName: name, Host: host, Port: port,
		JetStream: true, StoreDir: store, NoSigs: true, MaxPayload: 8 << 20,
		Cluster: server.ClusterOpts{Name: "alineo-soak", Host: host, Port: clusterPort},
		Routes:  server.RoutesFromStr(routes),
	}
}
