// Command projector keeps the read model: it consumes the ledger stream
// (ALINEO_LEDGER) as a durable JetStream consumer and applies it to SQLite or
// Postgres tables, with Prometheus metrics.
//
//	projector [run]   [flags]   follow the stream (default)
//	projector rebuild [flags]   project the whole history into the store and exit
//	projector verify  [flags]   rebuild into memory and compare with the store
//
// Flags (variables in parentheses): --nats URL (NATS_URL; empty starts an
// embedded server storing under --nats-dir), --sqlite PATH (default
// ./alineo.db), --postgres DSN (DATABASE_URL or PG*; selects Postgres),
// --consumer NAME, --metrics ADDR (ALINEO_METRICS_ADDR; default
// 127.0.0.1:9464, "" for none).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/cmd/internal/cli"
	"github.com/alineo-labs/alineo/cmd/internal/usage"
	"github.com/alineo-labs/alineo/projections"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	usage.Exit("projector", run(ctx, os.Args[1:], os.Getenv, os.Stdout))
}

const help = `usage: projector [COMMAND] [flags]

Keeps the read model (SQLite or Postgres tables) from the ledger stream.

commands:
  run       follow the stream as a durable consumer (the default)
  rebuild   project the whole history into the store and exit
  verify    rebuild into memory and compare with the store row for row
  help      print this help

"projector COMMAND -h" lists the command's flags.`

type options struct {
	nats, natsDir, sqlitePath, postgres, consumer, metrics string
	progress                                               time.Duration
}

func parse(name string, args []string, getenv func(string) string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("projector "+name, flag.ContinueOnError)
	fs.StringVar(&o.nats, "nats", getenv("NATS_URL"), "NATS server URL (env NATS_URL); empty starts an embedded server")
	fs.StringVar(&o.natsDir, "nats-dir", cli.DefaultNATSDir, "JetStream directory of the embedded server")
	fs.StringVar(&o.sqlitePath, "sqlite", cli.DefaultSQLite, "SQLite database path (used unless Postgres is selected)")
	fs.StringVar(&o.postgres, "postgres", "", "Postgres DSN; default DATABASE_URL or the PG* variables when set")
	fs.StringVar(&o.consumer, "consumer", projections.DefaultConsumer, "durable consumer name and offset key")
	fs.StringVar(&o.metrics, "metrics", cli.Env(getenv, "ALINEO_METRICS_ADDR", "127.0.0.1:9464"), "address of /metrics and /healthz (env ALINEO_METRICS_ADDR); empty for none")
	fs.DurationVar(&o.progress, "progress", 10*time.Second, "interval of the progress line (run); 0 for none")
	head := "usage: projector " + name + " [flags]"
	if err := usage.Parse(fs, args, head, out); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usage.Errorf(usage.Text(fs, head), "unexpected argument %q", fs.Arg(0))
	}
	return o, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cmd, explicit := "run", false
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args, explicit = args[0], args[1:], true
	}
	switch cmd {
	case "run", "rebuild", "verify":
	case "help":
		return usage.Help(stdout, help)
	default:
		return usage.Errorf(help, "unknown command %q", cmd)
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") && cmd == "run" && !explicit {
		return usage.Help(stdout, help)
	}
	o, err := parse(cmd, args, getenv, stdout)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b, err := cli.OpenBus(ctx, o.nats, o.natsDir, log)
	if err != nil {
		return err
	}
	defer b.Close()
	store, desc, err := cli.OpenStore(o.sqlitePath, o.postgres, getenv)
	if err != nil {
		return err
	}
	defer store.Close()
	switch cmd {
	case "rebuild":
		st, err := projections.RebuildAs(ctx, b, store, o.consumer, stdout)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "rebuilt %s: %d entries up to sequence %d in %s\n", desc, st.Applied, st.LastSeq, st.Elapsed.Round(time.Millisecond))
		return nil
	case "verify":
		return verify(ctx, b, store, desc, stdout)
	}
	return follow(ctx, b, store, desc, o, stdout, log)
}

func follow(ctx context.Context, b *bus.Bus, store cli.Store, desc string, o options, stdout io.Writer, log *slog.Logger) error {
	reg := cli.NewRegistry()
	p := &projections.Projector{Bus: b, Store: store, Consumer: o.consumer, Registerer: reg, Logger: log}
	if o.metrics != "" {
		addr, _, err := cli.Serve(ctx, o.metrics, cli.MetricsHandler(reg))
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		fmt.Fprintf(stdout, "metrics on http://%s/metrics\n", addr)
	}
	fmt.Fprintf(stdout, "projector %s: %s -> %s\n", o.consumer, b.ClientURL(), desc)
	if o.nats == "" {
		fmt.Fprintf(stdout, "embedded NATS: NATS_URL=%s\n", b.ClientURL())
	}
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	var tick <-chan time.Time
	if o.progress > 0 {
		t := time.NewTicker(o.progress)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case err := <-errc:
			pr := p.Progress()
			fmt.Fprintf(stdout, "projector stopped at offset %d (%d applied, %d parked)\n", pr.Offset, pr.Applied, pr.Parked)
			return err
		case <-tick:
			pr := p.Progress()
			fmt.Fprintf(stdout, "offset %d  applied %d  lag %d  parked %d  errors %d\n", pr.Offset, pr.Applied, pr.Lag, pr.Parked, pr.Errors)
		}
	}
}

// verify rebuilds the stream into an in-memory store and compares it with
// the store row for row.
func verify(ctx context.Context, b *bus.Bus, store cli.Store, desc string, stdout io.Writer) error {
	fresh, err := sqlite.Open(sqlite.Memory, sqlite.Config{})
	if err != nil {
		return err
	}
	defer fresh.Close()
	st, err := projections.RebuildAs(ctx, b, fresh, "alineo-verify", io.Discard)
	if err != nil {
		return err
	}
	off, err := store.Offset(ctx, projections.DefaultConsumer)
	if err != nil {
		return err
	}
	if off < st.LastSeq {
		fmt.Fprintf(stdout, "note: %s is at offset %d, the stream at %d; differences may be lag\n", desc, off, st.LastSeq)
	}
	if err := projections.Verify(ctx, store, fresh); err != nil {
		var me *projections.MismatchError
		if errors.As(err, &me) {
			return fmt.Errorf("%s differs from a rebuild of the stream: %w", desc, err)
		}
		return err
	}
	fmt.Fprintf(stdout, "verified %s: equal to a rebuild of %d entries (up to sequence %d)\n", desc, st.Applied, st.LastSeq)
	return nil
}
