package projectorcmd

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for projections into Postgres

	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/internal/cli"
	"github.com/alineo-labs/alineo/internal/usage"
	"github.com/alineo-labs/alineo/projections"
)

// Main runs the command line of os.Args with the registered projections until
// SIGINT or SIGTERM, and exits: 0 on success and for -h and --version, 2 on
// a usage error, 1 on any other error (printed on stderr).
func Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	usage.Exit("projector", err)
}

// Run runs the command line args (without the program name) with the
// registered projections, reading the environment through getenv and
// writing its output and logs to stdout, until it is done or ctx is (then
// run stops gracefully and Run returns nil). A usage error is an
// *usage.Error; -h and --version return flag.ErrHelp.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	// Flags may come before the command: usage.Command tells their values
	// from it by the flags.
	cmd, args := usage.Command(args, flagSet("run", getenv, &options{}))
	switch {
	case cmd == "" && slices.ContainsFunc(args, usage.IsVersion), usage.IsVersion(cmd):
		return usage.PrintVersion(stdout, "projector")
	case cmd == "" && slices.ContainsFunc(args, usage.IsHelp), usage.IsHelp(cmd):
		return usage.Help(stdout, help)
	case cmd == "":
		cmd = "run"
	case cmd == "list":
		return list(stdout)
	case cmd == "run", cmd == "rebuild", cmd == "verify", cmd == "partitions":
	default:
		return usage.Errorf(help, "unknown command %q", cmd)
	}
	o, err := parse(cmd, args, getenv, stdout)
	if err != nil {
		return err
	}
	def, err := projections.Lookup(o.projection)
	if err != nil {
		return usage.Errorf(help, "--projection: %w", err)
	}
	if cmd != "run" {
		if err := o.checkSource(cmd); err != nil {
			return err
		}
	}
	if cmd == "verify" || cmd == "partitions" {
		if err := o.checkTarget(def, getenv); err != nil {
			return err
		}
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
	if cmd == "rebuild" || cmd == "verify" {
		if err := nonEmpty(ctx, b, max(o.from, 1)); err != nil {
			return err
		}
	}
	target, closeTarget, err := openTarget(def, o, getenv)
	if err != nil {
		return err
	}
	defer closeTarget()
	h, err := def.Open(ctx, target)
	if err != nil {
		return fmt.Errorf("open projection %s: %w", def.Name, err)
	}
	if in, ok := h.(interface{ Init(context.Context) error }); ok {
		// A target that cannot hold the projection (an offset table of
		// another shape) fails here, at once.
		if err := in.Init(ctx); err != nil {
			return fmt.Errorf("open projection %s on %s: %w", def.Name, target.Desc, err)
		}
	}
	switch cmd {
	case "rebuild":
		return rebuild(ctx, b, def, h, target, o, stdout)
	case "verify":
		return verify(ctx, b, def, h, target, o, stdout)
	case "partitions":
		return partitions(ctx, b, def, h, target, o, stdout)
	}
	return follow(ctx, b, def, h, target, o, stdout, log)
}

const help = `usage: projector [COMMAND] [flags]

Keeps a read model (the product's tables, or any registered projection, in
SQLite or Postgres) from the ledger stream.

commands:
  run          follow the stream as a durable consumer (the default)
  rebuild      project the history into the target and exit
  verify       rebuild into memory and compare with the target row for row
  partitions   print each partition's offset, lag and the projector holding it
  list         print the registered projections
  help         print this help

rebuild, verify and partitions read an existing stream: give --nats (or
NATS_URL), or the --nats-dir of an embedded server's store. Flags go before
or after the command. "projector COMMAND -h" lists the command's flags;
"projector --version" prints the version.`

type options struct {
	nats, natsDir, sqlitePath, postgres, consumer, metrics, projection string
	progress                                                           time.Duration
	partitions, partition                                              int
	partitionSet, natsDirSet, sqliteSet                                bool
	from                                                               uint64
	natsFleet                                                          *cli.NATS
}

// flagSet returns the flags of cmd, parsed into p.
func flagSet(cmd string, getenv func(string) string, p *options) *flag.FlagSet {
	fs := flag.NewFlagSet("projector "+cmd, flag.ContinueOnError)
	fs.StringVar(&p.projection, "projection", projections.TablesProjection, "registered projection (projector list)")
	fs.StringVar(&p.nats, "nats", getenv("NATS_URL"), "NATS server URL (env NATS_URL); empty: run starts an embedded server on --nats-dir")
	fs.StringVar(&p.natsDir, "nats-dir", cli.DefaultNATSDir, "JetStream directory of the embedded server")
	p.natsFleet = cli.NATSFlags(fs, getenv)
	fs.StringVar(&p.sqlitePath, "sqlite", cli.DefaultSQLite, "SQLite database path (used unless Postgres is selected)")
	fs.StringVar(&p.postgres, "postgres", "", "Postgres DSN; default DATABASE_URL or the PG* variables when set")
	fs.StringVar(&p.consumer, "consumer", "", "durable consumer name and offset key (default alineo-projector for tables, else the projection's name)")
	fs.IntVar(&p.partitions, "partitions", 1, "partitions the stream is split into by sandbox (workers sharing the load)")
	fs.IntVar(&p.partition, "partition", 0, "this worker's partition, 0..partitions-1 (rebuild: every partition unless given)")
	// Every command takes every flag (a script passes the same ones to run
	// and verify); each says which command reads it.
	fs.Uint64Var(&p.from, "from", 1, "rebuild: first stream sequence read")
	fs.StringVar(&p.metrics, "metrics", cli.Env(getenv, "ALINEO_METRICS_ADDR", "127.0.0.1:9464"), "run: address of /metrics and /healthz (env ALINEO_METRICS_ADDR); empty for none")
	fs.DurationVar(&p.progress, "progress", 10*time.Second, "run: interval of the progress line; 0 for none")
	return fs
}

func parse(cmd string, args []string, getenv func(string) string, out io.Writer) (options, error) {
	var o options
	fs := flagSet(cmd, getenv, &o)
	head := "usage: projector " + cmd + " [flags]"
	if err := usage.Parse(fs, args, head, out); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usage.Errorf(usage.Text(fs, head), "unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "partition":
			o.partitionSet = true
		case "nats-dir":
			o.natsDirSet = true
		case "sqlite":
			o.sqliteSet = true
		}
	})
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

// checkSource refuses to read nothing: the stream must be named, by URL or
// by the directory of an existing embedded server's store (nothing is
// created in the working directory).
func (o options) checkSource(cmd string) error {
	switch {
	case o.nats != "":
		return nil
	case !o.natsDirSet:
		return usage.Errorf(help, "%s reads the ledger stream: give --nats URL (or NATS_URL), or the --nats-dir of an embedded server's store: %w", cmd, ErrNoSource)
	}
	if fi, err := os.Stat(o.natsDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("--nats-dir %s: no NATS store there: %w", o.natsDir, ErrNoSource)
	}
	return nil
}

// checkTarget refuses to compare or read a database that does not exist.
func (o options) checkTarget(def projections.Definition, getenv func(string) string) error {
	if o.postgres != "" || cli.UsePostgres(getenv) || o.sqlitePath == sqlite.Memory {
		return nil
	}
	if _, err := os.Stat(o.sqlitePath); err != nil {
		return fmt.Errorf("%s of projection %s: no SQLite database at %s (--sqlite): %w", "target", def.Name, o.sqlitePath, ErrNoTarget)
	}
	return nil
}

func (o options) partitioning() projections.Partitioning {
	if o.partitions <= 1 {
		return projections.Partitioning{}
	}
	return projections.Partitioning{N: o.partitions, Index: o.partition}
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

// nonEmpty returns an error wrapping ErrEmptyStream when the stream holds
// no entries from sequence from on: a rebuild or verify of nothing is a
// mistake (the wrong server or store), not a success.
func nonEmpty(ctx context.Context, b *bus.Bus, from uint64) error {
	si, err := b.Stream().Info(ctx)
	if err != nil {
		return fmt.Errorf("stream info: %w", err)
	}
	switch st := si.State; {
	case st.Msgs == 0:
		return fmt.Errorf("stream %s on %s: %w: is it the fleet's server (or store)?", b.Config().Stream, b.ClientURL(), ErrEmptyStream)
	case st.LastSeq < from:
		return fmt.Errorf("stream %s on %s ends at sequence %d, before --from %d: %w", b.Config().Stream, b.ClientURL(), st.LastSeq, from, ErrEmptyStream)
	}
	return nil
}
