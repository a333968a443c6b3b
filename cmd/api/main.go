// Command api serves the alineo HTTP API, the live audit stream and the
// dashboard (package api) from the read model and the bus.
//
//	api [--listen 127.0.0.1:8090] [--token T] [--nats URL] [--sqlite PATH | --postgres DSN]
//	    [--projector] [--insecure]
//
// Variables: ALINEO_API_TOKEN (--token), ALINEO_API_LISTEN (--listen),
// NATS_URL (--nats; empty starts an embedded server under --nats-dir),
// DATABASE_URL or PG* (select Postgres). --projector (default on when NATS is
// embedded) runs a projector in-process so the read model follows the stream.
// Without a token the API and dashboard are open; that is refused on a
// non-loopback address unless --insecure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/alineo-labs/alineo/api"
	"github.com/alineo-labs/alineo/internal/cli"
	"github.com/alineo-labs/alineo/internal/usage"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/projections"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	usage.Exit("api", run(ctx, os.Args[1:], os.Getenv, os.Stdout))
}

const help = `usage: api [flags]

Serves the HTTP API (/v1), the live audit stream (/v1/events/stream), job
submission, /metrics and the dashboard (/) from the read model and the bus.
Reads need the token (bearer header or the dashboard's cookie); writes
(POST, DELETE) need "Authorization: Bearer" and a JSON body.`

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	listen := fs.String("listen", cli.Env(getenv, "ALINEO_API_LISTEN", "127.0.0.1:8090"), "HTTP listen address (env ALINEO_API_LISTEN)")
	token := fs.String("token", getenv("ALINEO_API_TOKEN"), "bearer token required on /v1 and the dashboard (env ALINEO_API_TOKEN); empty = open")
	natsURL := fs.String("nats", getenv("NATS_URL"), "NATS server URL (env NATS_URL); empty starts an embedded server")
	natsDir := fs.String("nats-dir", cli.DefaultNATSDir, "JetStream directory of the embedded server")
	natsFleet := cli.NATSFlags(fs, getenv)
	sqlitePath := fs.String("sqlite", cli.DefaultSQLite, "SQLite read model (used unless Postgres is selected)")
	pg := fs.String("postgres", "", "Postgres DSN; default DATABASE_URL or the PG* variables when set")
	project := fs.Bool("projector", getenv("NATS_URL") == "", "run a projector in-process (default on with embedded NATS)")
	insecure := fs.Bool("insecure", false, "allow serving without a token on a non-loopback address")
	if err := usage.Parse(fs, args, help, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usage.Errorf(usage.Text(fs, help), "unexpected argument %q", fs.Arg(0))
	}
	if *token == "" && !loopback(*listen) && !*insecure {
		return fmt.Errorf("refusing to serve %s without a token: set ALINEO_API_TOKEN (or pass --insecure)", *listen)
	}
	log := slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	stopTracing, err := cli.Tracing(ctx, "alineo-api", getenv, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	b, err := cli.OpenBus(ctx, *natsURL, *natsDir, natsFleet, log)
	if err != nil {
		return err
	}
	defer b.Close()
	store, desc, err := cli.OpenStore(*sqlitePath, *pg, getenv)
	if err != nil {
		return err
	}
	defer store.Close()
	var qc jobs.QueueConfig
	qc.Replicas, qc.UpdateStreams = natsFleet.Replicas()
	q, err := jobs.OpenQueue(ctx, b.JetStream(), qc)
	if err != nil {
		return err
	}
	reg := cli.NewRegistry()
	srv, err := api.New(api.Config{Store: store, Bus: b, Queue: q, Token: *token, Registry: reg, Logger: log})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	projDone := make(chan error, 1)
	if *project {
		p := &projections.Projector{Bus: b, Store: store, Registerer: reg, Logger: log}
		go func() { projDone <- p.Run(ctx) }()
	} else {
		projDone <- nil
	}
	addr, served, err := cli.Serve(ctx, *listen, srv)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "api listening on http://%s (read model %s, NATS %s)\n", addr, desc, b.ClientURL())
	if *token == "" {
		fmt.Fprintln(stdout, "WARNING: no ALINEO_API_TOKEN: the API and the dashboard are open to anyone who can reach them")
		fmt.Fprintf(stdout, "dashboard: http://%s/\n", addr)
	} else {
		fmt.Fprintf(stdout, "dashboard: http://%s/login?token=<ALINEO_API_TOKEN>\n", addr)
	}
	select {
	case err = <-served:
	case <-ctx.Done():
		err = <-served
	}
	cancel()
	return errors.Join(err, <-projDone)
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
