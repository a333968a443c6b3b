// Command executor runs alineo jobs (package jobs): one job in one process,
// or as a fleet worker on the ALINEO_JOBS stream.
//
//	executor run JOB.json      run one job here, on embedded defaults
//	executor submit JOB.json   publish a job to ALINEO_JOBS and print its id
//	executor status JOB_ID     print a job's status
//	executor work              pull jobs until SIGTERM, then drain
//	executor demo              the takeover demo (make demo)
//
// Configuration (flags, with the variables they default to): --nats
// (NATS_URL; empty starts an embedded server under --nats-dir), --sandbox
// (OPEN_SANDBOX_URL; empty starts sandboxd in-process), --sandbox-key
// (OPEN_SANDBOX_API_KEY), --sqlite (./alineo.db) or --postgres (DATABASE_URL
// or PG*) for the read model the in-process projector of run and demo keeps;
// work --metrics ADDR (ALINEO_METRICS_ADDR) serves the worker's Prometheus
// metrics and /healthz. Flags go before or after the command.
//
// In a fleet every executor uses its own host's sandbox server: embedded, or
// --sandbox pointing at a local one. work creates each job's sandbox with an
// expiration and renews it while the job runs (--sandbox-ttl, default twice
// --ack-wait; --sandbox-renew, default a third of it), so the sandbox of an
// executor that died expires on its own; and at start it ends the sandboxes
// of its server whose job moved on while it was away (see package jobs).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/internal/cli"
	"github.com/alineo-labs/alineo/internal/usage"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/projections"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	usage.Exit("executor", run(ctx, os.Args[1:], os.Getenv, os.Stdout))
}

const help = `usage: executor COMMAND [flags] [ARG]

Runs alineo jobs, in this process or as a fleet worker on ALINEO_JOBS.

commands:
  run JOB.json      run one job in this process
  submit JOB.json   publish a job to the ALINEO_JOBS stream and print its id
  status JOB_ID     print a job's status (-o json for JSON)
  work              run jobs from the stream until SIGTERM (then drain)
  demo              kill an executor mid-job and watch another take over
  help              print this help

Flags go before or after the command and its argument. "executor COMMAND -h"
lists the command's flags; "executor --version" prints the version.`

// heads are the first lines of each command's -h.
var heads = map[string]string{
	"run":    "usage: executor run [flags] JOB.json\n\nRuns one job in this process, on embedded defaults.",
	"submit": "usage: executor submit [flags] JOB.json\n\nPublishes a job to ALINEO_JOBS and prints its id.",
	"status": "usage: executor status [flags] JOB_ID\n\nPrints a job's status.",
	"work":   "usage: executor work [flags]\n\nRuns jobs from ALINEO_JOBS until SIGTERM, then drains: the current step ends, is checkpointed and handed back.\nWith --metrics, serves Prometheus metrics (alineo_executor_*) at /metrics and its health at /healthz.",
	"demo": "usage: executor demo [flags]\n\nThe takeover demo: an executor killed mid-job, another taking over.\n" +
		"On a terminal the dashboard stays up until Enter or Ctrl-C (--hold D: for D).",
}

// commandNames are the subcommands that take flags.
var commandNames = []string{"run", "submit", "status", "work", "demo"}

// config is what every subcommand reads.
type config struct {
	nats, natsDir, sandbox, sandboxKey, sqlite, postgres, logLevel string
	sandboxProxy                                                   bool
	ackWait, drainTimeout                                          time.Duration
	sandboxTTL, sandboxRenew                                       time.Duration
	concurrency, maxDeliver                                        int
	id                                                             string
	output, project                                                bool
	deprecatedOutput                                               bool // --output was used
	format                                                         string
	apiListen, demoDir, metrics                                    string
	hold                                                           time.Duration
	natsFleet                                                      *cli.NATS
}

// outputFlag is --print-output, and --output, its deprecated alias (the
// name clashed with the usual -o/--output FORMAT).
type outputFlag struct {
	c     *config
	alias bool
}

func (f outputFlag) String() string {
	if f.c == nil {
		return "false"
	}
	return strconv.FormatBool(f.c.output)
}

func (f outputFlag) Set(v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return err
	}
	f.c.output = b
	if f.alias {
		f.c.deprecatedOutput = true
	}
	return nil
}

func (f outputFlag) IsBoolFlag() bool { return true }

func flags(name string, getenv func(string) string, out io.Writer) (*flag.FlagSet, *config) {
	c := &config{}
	fs := flag.NewFlagSet("executor "+name, flag.ContinueOnError)
	fs.StringVar(&c.nats, "nats", getenv("NATS_URL"), "NATS server URL (env NATS_URL); empty starts an embedded server")
	fs.StringVar(&c.natsDir, "nats-dir", cli.DefaultNATSDir, "JetStream directory of the embedded server")
	c.natsFleet = cli.NATSFlags(fs, getenv)
	fs.StringVar(&c.sandbox, "sandbox", getenv("OPEN_SANDBOX_URL"), "OpenSandbox server URL (env OPEN_SANDBOX_URL); empty starts sandboxd in-process")
	fs.StringVar(&c.sandboxKey, "sandbox-key", getenv("OPEN_SANDBOX_API_KEY"), "OpenSandbox API key (env OPEN_SANDBOX_API_KEY)")
	fs.BoolVar(&c.sandboxProxy, "sandbox-proxy", getenv("OPEN_SANDBOX_USE_SERVER_PROXY") == "true", "reach each sandbox's execd through the OpenSandbox server's proxy, for servers whose sandboxes the executor cannot reach (Kubernetes; env OPEN_SANDBOX_USE_SERVER_PROXY=true)")
	fs.StringVar(&c.logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	fs.DurationVar(&c.ackWait, "ack-wait", jobs.DefaultAckWait, "job lease: redelivered to another worker after this long without a heartbeat")
	fs.IntVar(&c.maxDeliver, "max-deliver", jobs.DefaultMaxDeliver, "deliveries of one job before it fails")
	switch name {
	case "run", "demo":
		fs.StringVar(&c.sqlite, "sqlite", cli.DefaultSQLite, "SQLite read model the in-process projector keeps")
		fs.StringVar(&c.postgres, "postgres", "", "Postgres DSN for the read model; default DATABASE_URL or PG* when set")
		fs.BoolVar(&c.project, "projector", getenv("NATS_URL") == "" || name == "demo", "run a projector in-process (default on with embedded NATS)")
		c.output = name == "run"
		fs.Var(outputFlag{c: c}, "print-output", "print the commands' stdout and stderr (default true for run)")
		fs.Var(outputFlag{c: c, alias: true}, "output", "deprecated alias of --print-output")
	case "status":
		fs.StringVar(&c.format, "o", "text", "output format: text or json")
	case "work":
		fs.StringVar(&c.metrics, "metrics", getenv("ALINEO_METRICS_ADDR"), "address of /metrics and /healthz (env ALINEO_METRICS_ADDR; e.g. 127.0.0.1:9465); empty for none")
		fs.IntVar(&c.concurrency, "concurrency", 1, "jobs run at once")
		fs.StringVar(&c.id, "id", getenv("HOSTNAME"), "worker id shown in job statuses (default $HOSTNAME or random)")
		fs.DurationVar(&c.drainTimeout, "drain-timeout", time.Minute, "on SIGTERM, how long the current step may take before the job is handed back anyway")
		fs.DurationVar(&c.sandboxTTL, "sandbox-ttl", 0, "how long a job's sandbox outlives the last renewal of its expiration, so a dead executor's sandbox ends on its own (default twice --ack-wait; created with at least 1m, the protocol's minimum)")
		fs.DurationVar(&c.sandboxRenew, "sandbox-renew", 0, "how often a running job's sandbox expiration is renewed; less than --sandbox-ttl (default a third of it)")
		fs.Var(outputFlag{c: c}, "print-output", "print the commands' stdout and stderr")
		fs.Var(outputFlag{c: c, alias: true}, "output", "deprecated alias of --print-output")
	}
	if name == "demo" {
		fs.StringVar(&c.apiListen, "api", "127.0.0.1:0", "address of the demo's API and dashboard")
		fs.StringVar(&c.demoDir, "dir", "./.alineo/demo", "where the demo keeps its NATS store and read model (emptied first), so the dashboard can be reopened on them")
		fs.DurationVar(&c.hold, "hold", 0, "keep the API and dashboard up this long after the demo (default: until Enter or Ctrl-C on a terminal, not at all otherwise)")
	}
	return fs, c
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	// The command is the first argument that is not a flag or a flag's
	// value: flags may come before it ("executor --nats U status ID").
	var sets []*flag.FlagSet
	for _, name := range commandNames {
		fs, _ := flags(name, getenv, stdout)
		sets = append(sets, fs)
	}
	cmd, args := usage.Command(args, sets...)
	var wantArgs int
	switch {
	case cmd == "" && slices.ContainsFunc(args, usage.IsVersion), usage.IsVersion(cmd):
		return usage.PrintVersion(stdout, "executor")
	case cmd == "" && slices.ContainsFunc(args, usage.IsHelp), usage.IsHelp(cmd):
		return usage.Help(stdout, help)
	case cmd == "":
		return usage.Errorf(help, "no command")
	case cmd == "run", cmd == "submit", cmd == "status":
		wantArgs = 1
	case cmd == "work", cmd == "demo":
	default:
		return usage.Errorf(help, "unknown command %q", cmd)
	}
	fs, c := flags(cmd, getenv, stdout)
	if err := usage.Parse(fs, args, heads[cmd], stdout); err != nil {
		return err
	}
	if fs.NArg() != wantArgs {
		return usage.Errorf(usage.Text(fs, heads[cmd]), "executor %s: want %d argument(s), got %d", cmd, wantArgs, fs.NArg())
	}
	if c.deprecatedOutput {
		fmt.Fprintln(stdout, "warning: --output is deprecated and will be removed in the next release; use --print-output")
	}
	if ttl := cmp.Or(c.sandboxTTL, 2*c.ackWait); c.sandboxTTL < 0 || c.sandboxRenew < 0 || c.sandboxRenew >= ttl {
		return usage.Errorf(usage.Text(fs, heads[cmd]), "--sandbox-ttl %v, --sandbox-renew %v: want the renewal period less than the TTL, neither negative", ttl, c.sandboxRenew)
	}
	if c.format != "" && c.format != "text" && c.format != "json" {
		return usage.Errorf(usage.Text(fs, heads[cmd]), "-o: want text or json, got %q", c.format)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.logLevel)); err != nil {
		return usage.Errorf(usage.Text(fs, heads[cmd]), "--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	stopTracing, err := cli.Tracing(ctx, "alineo-executor", getenv, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	switch cmd {
	case "run":
		return runJob(ctx, c, fs.Arg(0), getenv, stdout, log)
	case "submit":
		return submit(ctx, c, fs.Arg(0), stdout, log)
	case "status":
		return status(ctx, c, fs.Arg(0), stdout, log)
	case "work":
		return work(ctx, c, getenv, stdout, log)
	}
	return demo(ctx, c, getenv, stdout, log)
}

func readSpec(path string) (jobs.Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return jobs.Spec{}, err
	}
	spec, err := jobs.Parse(data)
	if err != nil {
		return jobs.Spec{}, fmt.Errorf("%s: %w", path, err)
	}
	return spec, nil
}

func openQueue(ctx context.Context, b *bus.Bus, c *config) (*jobs.Queue, error) {
	cfg := jobs.QueueConfig{AckWait: c.ackWait, MaxDeliver: c.maxDeliver}
	cfg.Replicas, cfg.UpdateStreams = c.natsFleet.Replicas()
	return jobs.OpenQueue(ctx, b.JetStream(), cfg)
}

// fleet is what a process that runs jobs holds: the bus, its ledger, a
// sandbox server and an SDK client writing to the ledger.
type fleet struct {
	bus         *bus.Bus
	ledger      *bus.Ledger
	client      *alineo.Client
	sandboxURL  string
	stopSandbox func()
}

func openFleet(ctx context.Context, c *config, getenv func(string) string, log *slog.Logger) (*fleet, error) {
	b, err := cli.OpenBus(ctx, c.nats, c.natsDir, c.natsFleet, log)
	if err != nil {
		return nil, err
	}
	// The ledger is all a worker needs: jobs resume by session name, which
	// the SDK reads from the stream.
	l, err := bus.NewLedger(b, bus.LedgerConfig{Logger: log})
	if err != nil {
		b.Close()
		return nil, err
	}
	url, stop, err := startSandboxd(ctx, c.sandbox, getenv, log)
	if err != nil {
		l.Close()
		b.Close()
		return nil, err
	}
	client, err := alineo.New(alineo.Options{BaseURL: url, APIKey: c.sandboxKey, UseServerProxy: c.sandboxProxy, Adapter: l, Logger: log})
	if err != nil {
		stop()
		l.Close()
		b.Close()
		return nil, err
	}
	return &fleet{bus: b, ledger: l, client: client, sandboxURL: url, stopSandbox: stop}, nil
}

func (f *fleet) close() {
	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = f.ledger.Flush(fctx)
	f.stopSandbox()
	f.ledger.Close()
	f.bus.Close()
}

// projector runs a projector into the configured store until ctx is done;
// wait blocks until it has applied everything the ledger published.
type projector struct {
	p     *projections.Projector
	store cli.Store
	desc  string
	done  chan error
}

func startProjector(ctx context.Context, c *config, b *bus.Bus, getenv func(string) string, log *slog.Logger) (*projector, error) {
	store, desc, err := cli.OpenStore(c.sqlite, c.postgres, getenv)
	if err != nil {
		return nil, err
	}
	pr := &projector{p: &projections.Projector{Bus: b, Store: store, BatchWait: 10 * time.Millisecond, Logger: log}, store: store, desc: desc, done: make(chan error, 1)}
	go func() { pr.done <- pr.p.Run(ctx) }()
	return pr, nil
}

func (pr *projector) wait(ctx context.Context, seq uint64) error {
	for pr.p.Progress().Offset < seq {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-pr.done:
			pr.done <- err
			if err == nil {
				return errors.New("projector stopped")
			}
			return fmt.Errorf("projector stopped: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func runJob(ctx context.Context, c *config, path string, getenv func(string) string, stdout io.Writer, log *slog.Logger) error {
	spec, err := readSpec(path)
	if err != nil {
		return err
	}
	f, err := openFleet(ctx, c, getenv, log)
	if err != nil {
		return err
	}
	defer f.close()
	pctx, stopProj := context.WithCancel(context.WithoutCancel(ctx))
	defer stopProj()
	var pr *projector
	if c.project {
		if pr, err = startProjector(pctx, c, f.bus, getenv, log); err != nil {
			return err
		}
		defer pr.store.Close()
	}
	r := &jobs.Runner{Client: f.client, Progress: jobs.Printer(stdout)}
	if c.output {
		r.Output = prefixWriter(stdout, "  | ")
	}
	res, runErr := r.Run(ctx, spec, nil)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := f.ledger.Flush(wctx); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if pr != nil {
		if err := pr.wait(wctx, f.ledger.LastSeq()); err != nil {
			runErr = errors.Join(runErr, err)
		} else {
			fmt.Fprintf(stdout, "ledger projected into %s (session %s / %s)\n", pr.desc, res.Name, res.SandboxID)
		}
	}
	if runErr != nil {
		return runErr
	}
	fmt.Fprintf(stdout, "job %s succeeded: %d steps in %s\n", spec.Name, res.Live+res.Replayed, res.Elapsed.Round(time.Millisecond))
	return nil
}

func submit(ctx context.Context, c *config, path string, stdout io.Writer, log *slog.Logger) error {
	spec, err := readSpec(path)
	if err != nil {
		return err
	}
	b, err := cli.OpenBus(ctx, c.nats, c.natsDir, c.natsFleet, log)
	if err != nil {
		return err
	}
	defer b.Close()
	q, err := openQueue(ctx, b, c)
	if err != nil {
		return err
	}
	st, err := q.Submit(ctx, spec)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, st.ID)
	return nil
}

func status(ctx context.Context, c *config, id string, stdout io.Writer, log *slog.Logger) error {
	b, err := cli.OpenBus(ctx, c.nats, c.natsDir, c.natsFleet, log)
	if err != nil {
		return err
	}
	defer b.Close()
	q, err := openQueue(ctx, b, c)
	if err != nil {
		return err
	}
	st, err := q.Status(ctx, id)
	if err != nil {
		return err
	}
	if c.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	fmt.Fprintf(stdout, "%s %s: %s (attempt %d, %d/%d steps, sandbox %s)", st.ID, st.Name, st.State, st.Attempt, st.Done, st.Steps, st.SandboxID)
	if st.Error != "" {
		fmt.Fprintf(stdout, ": %s", st.Error)
	}
	fmt.Fprintln(stdout)
	return nil
}

func work(ctx context.Context, c *config, getenv func(string) string, stdout io.Writer, log *slog.Logger) error {
	f, err := openFleet(context.WithoutCancel(ctx), c, getenv, log)
	if err != nil {
		return err
	}
	defer f.close()
	q, err := openQueue(ctx, f.bus, c)
	if err != nil {
		return err
	}
	print := jobs.Printer(stdout)
	step := func(jobs.Event) {}
	w := &jobs.Worker{
		Queue: q, Client: f.client, Ledger: f.ledger, ID: c.id, Concurrency: c.concurrency,
		DrainTimeout: c.drainTimeout, SandboxTTL: c.sandboxTTL, RenewEvery: c.sandboxRenew, Logger: log,
		Progress: func(id string, ev jobs.Event) {
			step(ev)
			ev.Job = id[:8] + " " + ev.Job
			print(ev)
		},
	}
	if c.output {
		w.Output = prefixWriter(stdout, "  | ")
	}
	if c.metrics != "" {
		reg := cli.NewRegistry()
		step = workerMetrics(reg, w)
		// Served until work returns: through the drain too.
		mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		defer stop()
		addr, _, err := cli.Serve(mctx, c.metrics, cli.MetricsHandler(reg, cli.NATSConnected(f.bus)))
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		fmt.Fprintf(stdout, "metrics on http://%s/metrics\n", addr)
	}
	fmt.Fprintf(stdout, "executor %s: pulling %s from %s (lease %s)\n", workerID(c), q.Config().Stream, f.bus.ClientURL(), q.Config().AckWait)
	if err := w.Run(ctx); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "executor drained")
	return nil
}

func workerID(c *config) string {
	if c.id != "" {
		return c.id
	}
	return "(random id)"
}

// prefixWriter prefixes every line written to w.
func prefixWriter(w io.Writer, prefix string) io.Writer {
	return &prefixed{w: w, prefix: prefix, bol: true}
}

type prefixed struct {
	w      io.Writer
	prefix string
	bol    bool
}

func (p *prefixed) Write(b []byte) (int, error) {
	var sb strings.Builder
	for _, c := range string(b) {
		if p.bol {
			sb.WriteString(p.prefix)
			p.bol = false
		}
		sb.WriteRune(c)
		if c == '\n' {
			p.bol = true
		}
	}
	if _, err := io.WriteString(p.w, sb.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}
