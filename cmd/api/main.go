// Command api serves the alineo HTTP API, the live audit stream and the
// dashboard (package api) from the read model and the bus.
//
//	api [--listen 127.0.0.1:8090] [--token T] [--tokens FILE] [--nats URL]
//	    [--sqlite PATH | --postgres DSN] [--projector] [--insecure]
//	api hash-token < token
//
// Variables: ALINEO_API_TOKEN (--token), ALINEO_API_TOKENS (--tokens),
// ALINEO_API_LISTEN (--listen), NATS_URL (--nats; empty starts an embedded
// server under --nats-dir), DATABASE_URL or PG* (select Postgres).
// --projector (default on when NATS is embedded) runs a projector in-process
// so the read model follows the stream.
//
// --tokens names a token file (api.ParseTokens: "name role sha256:<hex>" per
// line, roles read, write, admin); SIGHUP reads it again, and a file that
// does not parse leaves the tokens as they were. --token is one more admin,
// named "admin". hash-token prints the hash of the token read from stdin,
// for the file. Without any token the API and dashboard are open; that is
// refused on a non-loopback address unless --insecure.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
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
       api hash-token < token

Serves the HTTP API (/v1), the live audit stream (/v1/events/stream), job
submission, /metrics and the dashboard (/) from the read model and the bus.
Reads need a token (bearer header or the dashboard's cookie); writes
(POST, DELETE) need "Authorization: Bearer" and a JSON body.

Users: --tokens FILE holds one user a line, "name role sha256:<hex>", role
read (dashboard, listings, SSE), write (also submit, cancel, retry, delete)
or admin (also the executors view); the hash is what "api hash-token"
prints for the token on its stdin. kill -HUP reloads the file. --token is
one admin named "admin".`

// stdin is what hash-token reads.
var stdin io.Reader = os.Stdin

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "hash-token" {
		return hashToken(args[1:], stdout)
	}
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	listen := fs.String("listen", cli.Env(getenv, "ALINEO_API_LISTEN", "127.0.0.1:8090"), "HTTP listen address (env ALINEO_API_LISTEN)")
	token := fs.String("token", getenv("ALINEO_API_TOKEN"), "one admin's bearer token, user \"admin\" (env ALINEO_API_TOKEN)")
	tokensFile := fs.String("tokens", getenv("ALINEO_API_TOKENS"), "token file: \"name role sha256:<hex>\" a line; SIGHUP reloads it (env ALINEO_API_TOKENS)")
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
	if *token == "" && *tokensFile == "" && !loopback(*listen) && !*insecure {
		return fmt.Errorf("refusing to serve %s without a token: set ALINEO_API_TOKEN or ALINEO_API_TOKENS (or pass --insecure)", *listen)
	}
	var users *api.Users
	if *tokensFile != "" {
		ts, err := readTokens(*tokensFile)
		if err != nil {
			return err
		}
		users = api.NewUsers(ts)
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
	srv, err := api.New(api.Config{Store: store, Bus: b, Queue: q, Token: *token, Users: users, Registry: reg, Logger: log})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if users != nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		reloaded := make(chan struct{})
		defer func() { cancel(); <-reloaded }()
		go func() {
			defer close(reloaded)
			reloadOnHangup(ctx, hup, *tokensFile, users, log)
		}()
		log.Info("api: tokens loaded", "file", *tokensFile, "users", users.Len())
	}
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
	if *token == "" && users == nil {
		fmt.Fprintln(stdout, "WARNING: no ALINEO_API_TOKEN nor ALINEO_API_TOKENS: the API and the dashboard are open to anyone who can reach them")
		fmt.Fprintf(stdout, "dashboard: http://%s/\n", addr)
	} else {
		fmt.Fprintf(stdout, "dashboard: http://%s/login?token=<your token>\n", addr)
	}
	select {
	case err = <-served:
	case <-ctx.Done():
		err = <-served
	}
	cancel()
	return errors.Join(err, <-projDone)
}

// readTokens parses the token file at path.
func readTokens(path string) ([]api.Token, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	defer f.Close()
	ts, err := api.ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("read tokens %s: %w", path, err)
	}
	return ts, nil
}

// reloadOnHangup reads the token file again on each signal of hup, until ctx
// is done. A file that cannot be read or parsed leaves the tokens as they
// were (the error is logged: it names a line, never a token).
func reloadOnHangup(ctx context.Context, hup <-chan os.Signal, path string, users *api.Users, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			ts, err := readTokens(path)
			if err != nil {
				log.Error("api: reload tokens; keeping the previous ones", "err", err)
				continue
			}
			users.Replace(ts)
			log.Info("api: tokens reloaded", "file", path, "users", len(ts))
		}
	}
}

// hashToken prints the hash of the token on stdin's first line, for a token
// file (api.HashToken). The token is read from stdin rather than an argument
// so that it shows in no process listing nor shell history.
func hashToken(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("api hash-token", flag.ContinueOnError)
	if err := usage.Parse(fs, args, "usage: api hash-token < token\n\nPrints sha256:<hex> of the token read from stdin (its first line), for a --tokens file.", stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usage.Errorf(usage.Text(fs, "usage: api hash-token < token"), "the token is read from stdin, not from the argument %q", "…")
	}
	line, err := bufio.NewReader(io.LimitReader(stdin, 64<<10)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read the token: %w", err)
	}
	tok := strings.TrimRight(line, "\r\n")
	if tok == "" {
		return errors.New("hash-token: no token on stdin")
	}
	_, err = fmt.Fprintln(stdout, api.HashToken(tok))
	return err
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
