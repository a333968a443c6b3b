// Command projector keeps read models: it consumes the ledger stream
// (ALINEO_LEDGER) as a durable JetStream consumer and applies it to a
// registered projection in SQLite or Postgres (the product's tables by
// default), with Prometheus metrics.
//
//	projector [run]   [flags]   follow the stream (default)
//	projector rebuild [flags]   project the history into the target and exit
//	projector verify  [flags]   rebuild into memory and compare with the target
//	projector list              print the registered projections
//
// Flags (variables in parentheses): --projection NAME (default tables),
// --nats URL (NATS_URL; empty starts an embedded server storing under
// --nats-dir), --sqlite PATH (default ./alineo.db), --postgres DSN
// (DATABASE_URL or PG*; selects Postgres), --consumer NAME (default
// alineo-projector for tables, else the projection's name), --partitions N
// and --partition I (run partition I of N; rebuild every partition unless
// --partition is given), --from SEQ (rebuild), --metrics ADDR
// (ALINEO_METRICS_ADDR; default 127.0.0.1:9464, "" for none).
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for projections into Postgres

	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/examples/audit"
	"github.com/alineo-labs/alineo/examples/execstats"
	"github.com/alineo-labs/alineo/internal/cli"
	"github.com/alineo-labs/alineo/internal/usage"
	"github.com/alineo-labs/alineo/projections"
)

// The projections this binary runs beside the product's tables (which
// package projections registers): the two examples. The binary that wants a
// projection registers it; importing a projection's package registers
// nothing.
func init() {
	projections.Register(execstats.Definition())
	projections.Register(audit.Definition())
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	usage.Exit("projector", run(ctx, os.Args[1:], os.Getenv, os.Stdout))
}

const help = `usage: projector [COMMAND] [flags]

Keeps a read model (the product's tables, or any registered projection, in
SQLite or Postgres) from the ledger stream.

commands:
  run       follow the stream as a durable consumer (the default)
  rebuild   project the history into the target and exit
  verify    rebuild into memory and compare with the target row for row
  list      print the registered projections
  help      print this help

"projector COMMAND -h" lists the command's flags.`

type options struct {
	nats, natsDir, sqlitePath, postgres, consumer, metrics, projection string
	progress                                                           time.Duration
	partitions, partition                                              int
	partitionSet                                                       bool
	from                                                               uint64
	natsFleet                                                          *cli.NATS
}

func parse(name string, args []string, getenv func(string) string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("projector "+name, flag.ContinueOnError)
	fs.StringVar(&o.projection, "projection", projections.TablesProjection, "registered projection to run (projector list)")
	fs.StringVar(&o.nats, "nats", getenv("NATS_URL"), "NATS server URL (env NATS_URL); empty starts an embedded server")
	fs.StringVar(&o.natsDir, "nats-dir", cli.DefaultNATSDir, "JetStream directory of the embedded server")
	o.natsFleet = cli.NATSFlags(fs, getenv)
	fs.StringVar(&o.sqlitePath, "sqlite", cli.DefaultSQLite, "SQLite database path (used unless Postgres is selected)")
	fs.StringVar(&o.postgres, "postgres", "", "Postgres DSN; default DATABASE_URL or the PG* variables when set")
	fs.StringVar(&o.consumer, "consumer", "", "durable consumer name and offset key (default alineo-projector for tables, else the projection's name)")
	fs.IntVar(&o.partitions, "partitions", 1, "partitions the stream is split into by sandbox (workers sharing the load)")
	fs.IntVar(&o.partition, "partition", 0, "this worker's partition, 0..partitions-1 (rebuild: every partition unless given)")
	fs.Uint64Var(&o.from, "from", 1, "rebuild: first stream sequence read")
	fs.StringVar(&o.metrics, "metrics", cli.Env(getenv, "ALINEO_METRICS_ADDR", "127.0.0.1:9464"), "address of /metrics and /healthz (env ALINEO_METRICS_ADDR); empty for none")
	fs.DurationVar(&o.progress, "progress", 10*time.Second, "interval of the progress line (run); 0 for none")
	head := "usage: projector " + name + " [flags]"
	if err := usage.Parse(fs, args, head, out); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usage.Errorf(usage.Text(fs, head), "unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) { o.partitionSet = o.partitionSet || f.Name == "partition" })
	if o.partitions < 1 || o.partition < 0 || o.partition >= o.partitions {
		return o, usage.Errorf(usage.Text(fs, head), "--partition %d is not in 0..%d", o.partition, o.partitions-1)
	}
	if o.consumer == "" {
		o.consumer = o.projection
		if o.projection == projections.TablesProjection {
			o.consumer = projections.DefaultConsumer
		}
	}
	return o, nil
}

func (o options) partitioning() projections.Partitioning {
	if o.partitions <= 1 {
		return projections.Partitioning{}
	}
	return projections.Partitioning{N: o.partitions, Index: o.partition}
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
	case "list":
		return list(stdout)
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
	def, err := projections.Lookup(o.projection)
	if err != nil {
		return usage.Errorf(help, "--projection: %v", err)
	}
	log := slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	stopTracing, err := cli.Tracing(ctx, "alineo-projector", getenv, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	b, err := cli.OpenBus(ctx, o.nats, o.natsDir, o.natsFleet, log)
	if err != nil {
		return err
	}
	defer b.Close()
	target, closeTarget, err := openTarget(def, o, getenv)
	if err != nil {
		return err
	}
	defer closeTarget()
	h, err := def.Open(ctx, target)
	if err != nil {
		return fmt.Errorf("open projection %s: %w", def.Name, err)
	}
	switch cmd {
	case "rebuild":
		return rebuild(ctx, b, def, h, target, o, stdout)
	case "verify":
		return verify(ctx, b, def, h, target, o, stdout)
	}
	return follow(ctx, b, def, h, target, o, stdout, log)
}

func list(stdout io.Writer) error {
	for _, n := range projections.Names() {
		d, err := projections.Lookup(n)
		if err != nil {
			return err
		}
		verify := ""
		if d.Verify != nil {
			verify = " (verifiable)"
		}
		fmt.Fprintf(stdout, "%-12s %s%s\n", n, d.Help, verify)
	}
	return nil
}

// openTarget opens where def writes: the product's store for the tables, a
// database/sql database otherwise (Postgres when selected, else SQLite).
func openTarget(def projections.Definition, o options, getenv func(string) string) (projections.Target, func(), error) {
	if def.UsesStore {
		store, desc, err := cli.OpenStore(o.sqlitePath, o.postgres, getenv)
		if err != nil {
			return projections.Target{}, nil, err
		}
		return projections.Target{Store: store, Desc: desc}, func() { store.Close() }, nil
	}
	if o.postgres != "" || cli.UsePostgres(getenv) {
		dsn := o.postgres
		if dsn == "" {
			dsn = getenv("DATABASE_URL") // empty: pgx reads the PG* variables
		}
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return projections.Target{}, nil, fmt.Errorf("postgres: %w", err)
		}
		return projections.Target{DB: db, Dialect: projections.Postgres, Desc: "postgres"}, func() { db.Close() }, nil
	}
	db, err := openSQLite(o.sqlitePath)
	if err != nil {
		return projections.Target{}, nil, err
	}
	return projections.Target{DB: db, Dialect: projections.SQLite, Desc: "sqlite " + o.sqlitePath}, func() { db.Close() }, nil
}

// openSQLite opens path for one writer (the projection), waiting out other
// writers of the same file (the product's projector) rather than failing.
func openSQLite(path string) (*sql.DB, error) {
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	if path == sqlite.Memory {
		dsn = "file::memory:?_txlock=immediate"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	return db, nil
}

func rebuild(ctx context.Context, b *bus.Bus, def projections.Definition, h projections.Handler, t projections.Target, o options, stdout io.Writer) error {
	ro := projections.RebuildOptions{Key: o.consumer, Filter: def.Filter, From: o.from, Partition: o.partitioning(),
		AllPartitions: !o.partitionSet, Progress: stdout}
	st, err := projections.RebuildHandler(ctx, b, h, ro)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rebuilt %s (%s): %d entries up to sequence %d in %s\n", t.Desc, def.Name, st.Applied, st.LastSeq, st.Elapsed.Round(time.Millisecond))
	return nil
}

func follow(ctx context.Context, b *bus.Bus, def projections.Definition, h projections.Handler, t projections.Target, o options, stdout io.Writer, log *slog.Logger) error {
	reg := cli.NewRegistry()
	r := &projections.Runtime{Bus: b, Handler: h, Name: def.Name, Consumer: o.consumer, Filter: def.Filter,
		Partition: o.partitioning(), Registerer: reg, Logger: log}
	if err := r.Init(); err != nil {
		return err
	}
	if o.metrics != "" {
		addr, _, err := cli.Serve(ctx, o.metrics, cli.MetricsHandler(reg))
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		fmt.Fprintf(stdout, "metrics on http://%s/metrics\n", addr)
	}
	fmt.Fprintf(stdout, "projector %s (%s): %s -> %s\n", r.Key(), def.Name, b.ClientURL(), t.Desc)
	if o.nats == "" {
		fmt.Fprintf(stdout, "embedded NATS: NATS_URL is in %s (mode 0600: it holds the server's token)\n", filepath.Join(o.natsDir, "nats.url"))
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	var tick <-chan time.Time
	if o.progress > 0 {
		t := time.NewTicker(o.progress)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case err := <-errc:
			pr := r.Progress()
			fmt.Fprintf(stdout, "projector stopped at offset %d (%d applied, %d parked)\n", pr.Offset, pr.Applied, pr.Parked)
			return err
		case <-tick:
			pr := r.Progress()
			fmt.Fprintf(stdout, "offset %d  applied %d  lag %d  parked %d  skipped %d  errors %d\n", pr.Offset, pr.Applied, pr.Lag, pr.Parked, pr.Skipped, pr.Errors)
		}
	}
}

// verify rebuilds the stream into an in-memory target and compares it with
// the target row for row. The target's offsets are read under --consumer
// (every partition's with --partitions).
func verify(ctx context.Context, b *bus.Bus, def projections.Definition, h projections.Handler, t projections.Target, o options, stdout io.Writer) error {
	if def.Verify == nil {
		return fmt.Errorf("%w: projection %s cannot be verified", projections.ErrInvalidConfig, def.Name)
	}
	fresh, closeFresh, err := memoryTarget(def)
	if err != nil {
		return err
	}
	defer closeFresh()
	fh, err := def.Open(ctx, fresh)
	if err != nil {
		return err
	}
	st, err := projections.RebuildHandler(ctx, b, fh, projections.RebuildOptions{Key: "alineo-verify", Filter: def.Filter})
	if err != nil {
		return err
	}
	off, err := minOffset(ctx, h, o)
	if err != nil {
		return err
	}
	if off < st.LastSeq {
		fmt.Fprintf(stdout, "note: %s (%s) is at offset %d, the stream at %d; differences may be lag\n", t.Desc, o.consumer, off, st.LastSeq)
	}
	if err := def.Verify(ctx, t, fresh); err != nil {
		if errors.Is(err, projections.ErrMismatch) {
			return fmt.Errorf("%s differs from a rebuild of the stream: %w", t.Desc, err)
		}
		return err
	}
	fmt.Fprintf(stdout, "verified %s: equal to a rebuild of %d entries (up to sequence %d, projection %s)\n", t.Desc, st.Applied, st.LastSeq, def.Name)
	return nil
}

// minOffset is the lowest offset among the consumer's partitions.
func minOffset(ctx context.Context, h projections.Handler, o options) (uint64, error) {
	var keys []string
	for i := range o.partitions {
		keys = append(keys, projections.PartitionKey(o.consumer, i, o.partitions))
	}
	var low uint64
	for i, k := range keys {
		off, err := h.Offset(ctx, k)
		if err != nil {
			return 0, fmt.Errorf("offset %s: %w", k, err)
		}
		if i == 0 || off < low {
			low = off
		}
	}
	return low, nil
}

func memoryTarget(def projections.Definition) (projections.Target, func(), error) {
	if def.UsesStore {
		s, err := sqlite.Open(sqlite.Memory, sqlite.Config{})
		if err != nil {
			return projections.Target{}, nil, err
		}
		return projections.Target{Store: s, Desc: "memory"}, func() { s.Close() }, nil
	}
	db, err := openSQLite(sqlite.Memory)
	if err != nil {
		return projections.Target{}, nil, err
	}
	return projections.Target{DB: db, Dialect: projections.SQLite, Desc: "memory"}, func() { db.Close() }, nil
}
