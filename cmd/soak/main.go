// Command soak runs the chaos soak (package cmd/soak/internal/soak) on real
// processes: a 3-node NATS cluster with R3 streams, Postgres, sandboxd, 4
// executors, the projector in 2 partitions, the API and 20 SSE auditors,
// under a job load and a seeded fault schedule, then prints the checks
// table. It exits 1 when a check fails (the table names the seed that
// repeats the schedule).
//
//	soak [-jobs 200] [-duration D] [-seed N] [-dir DIR] [-keep] ...
//	soak -hosts 3 [-shared-storage=false] [-host-down D] [-partition D] ...
//	soak recheck [-timeout D] DIR
//
// With -hosts N the fleet runs across N hosts, each a network namespace on
// a bridge with its own sandboxd and executors (make soak and soak-ci run 3);
// the soak binary then also enters namespaces for the processes it starts
// (in-netns) and runs the network's janitor (net-janitor).
//
// make soak-ci runs 150 jobs over 3 hosts spread over 3 minutes (CI); make
// soak SOAK_DURATION=30m submits jobs for 30 minutes; make soak-1host and
// soak-1host-ci run the fleet on one host. SIGINT or SIGTERM stops it at once, in any
// phase: every child is killed and reaped, what sandboxd left mounted is
// unmounted, and the figures so far are printed; it exits 1. A second
// signal kills the soak itself (its children die with it). soak recheck
// reruns, on the NATS stores a failed run kept in DIR, the checks that read
// only the stream and the jobs' statuses, and prints every problem found. It must run from the module's root (it builds
// ./cmd/...) as root (sandboxd, and Postgres as the postgres user).
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alineo-labs/alineo/cmd/soak/internal/soak"
	"github.com/alineo-labs/alineo/internal/usage"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == soak.NATSNodeCommand {
		if err := soak.RunNATSNode(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == soak.NetnsExecCommand {
		err := soak.RunInNetns(os.Args[2:]) // returns only on an error
		fmt.Fprintln(os.Stderr, err)
		os.Exit(127)
	}
	if len(os.Args) > 1 && os.Args[1] == soak.NetJanitorCommand {
		if err := soak.RunNetJanitor(os.Args[2:], os.Stdin, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == soak.RecheckCommand {
		os.Exit(recheck(os.Args[2:]))
	}
	if len(os.Args) > 1 && usage.IsVersion(os.Args[1]) {
		fmt.Println(usage.Version("soak"))
		return
	}
	os.Exit(run(os.Args[1:]))
}

// recheck runs soak.Recheck on a kept run's directory and prints every
// problem each check finds; it exits 1 when one fails.
func recheck(args []string) int {
	fs := flag.NewFlagSet("soak recheck", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 2*time.Minute, "bound of each wait: the cluster's restart, each read")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: soak recheck [-timeout D] DIR\n\nReruns the checks that read only the ledger stream and the jobs' statuses on what a soak kept in DIR.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	ctx, stop := stopOnSignal()
	defer stop()
	rs, err := soak.Recheck(ctx, fs.Arg(0), *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	code := 0
	for _, r := range rs {
		res := "pass"
		if !r.Pass {
			res, code = "FAIL", 1
		}
		fmt.Printf("%-4s %s: %s\n", res, r.Check, r.Detail)
		for _, p := range r.Problems {
			fmt.Printf("       %s\n", p)
		}
	}
	return code
}

func run(args []string) int {
	var c soak.Config
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.IntVar(&c.Jobs, "jobs", 0, "jobs to run (default 200 without -duration)")
	fs.DurationVar(&c.Duration, "duration", 0, "submit jobs for this long, e.g. 30m (with -jobs: spread them over it)")
	fs.Int64Var(&c.Seed, "seed", 0, "seed of the fault schedule (default: drawn and printed)")
	fs.StringVar(&c.Dir, "dir", "", "directory of the processes' data and logs (default a temporary one, removed after a pass)")
	fs.BoolVar(&c.Keep, "keep", false, "keep -dir after a pass")
	fs.StringVar(&c.BinDir, "bin", "", "prebuilt sandboxd, executor, projector and api (default: built from ./cmd)")
	fs.IntVar(&c.Executors, "executors", 4, "executor processes (the single-host soak's; with -hosts see -executors-per-host)")
	fs.IntVar(&c.Concurrency, "concurrency", 2, "jobs each executor runs at once")
	fs.IntVar(&c.Projectors, "projectors", 2, "projector partitions, each a process (--partitions N --partition I)")
	fs.IntVar(&c.Auditors, "auditors", 20, "SSE auditors")
	fs.IntVar(&c.Inflight, "inflight", 8, "jobs submitted and not finished at most")
	fs.DurationVar(&c.FaultEvery, "fault-every", 0, "pause between faults (default 5s)")
	fs.DurationVar(&c.AckWait, "ack-wait", 0, "the executors' job lease (default 6s)")
	fs.BoolVar(&c.NoIsolation, "no-isolation", false, "run sandboxd with --no-isolation (no runc)")
	fs.IntVar(&c.Hosts, "hosts", 0, "run the multi-host soak: this many hosts, each a network namespace with its own sandboxd and executors (0: the single-host soak on loopback)")
	fs.IntVar(&c.ExecutorsPerHost, "executors-per-host", 2, "executors on each host (with -hosts)")
	shared := fs.Bool("shared-storage", true, "give every host's sandboxd the shared checkpoint store and bucket (--checkpoints postgres://, --blobs s3://), so a checkpoint restores on any host (with -hosts)")
	fs.DurationVar(&c.HostDown, "host-down", 0, "how long a killed host stays down (default 30s)")
	fs.DurationVar(&c.Partition, "partition", 0, "how long a partitioned host's or NATS node's link stays down (default ack-wait + 10s)")
	fs.DurationVar(&c.S3Down, "s3-down", 0, "how long the S3 server stays stopped (default 10s)")
	fs.StringVar(&c.NetPrefix, "net-prefix", "", "prefix of the network's namespaces, link and lock (default "+soak.DefaultNetPrefix+")")
	subnet := fs.String("subnet", soak.DefaultSubnet.String(), "the network's subnet, inside "+soak.TestRange.String())
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "soak: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	c.LocalStorage = !*shared
	var err error
	if c.Subnet, err = netip.ParsePrefix(*subnet); err != nil {
		fmt.Fprintf(os.Stderr, "soak: -subnet: %v\n", err)
		return 2
	}
	ctx, stop := stopOnSignal()
	defer stop()
	rep, err := soak.Run(ctx, c)
	if rep != nil {
		rep.Print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	if !rep.Passed() {
		return 1
	}
	return 0
}

// stopOnSignal returns a context cancelled, with the signal as its cause, by
// the first SIGINT or SIGTERM; the next one gets the default action.
func stopOnSignal() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-sigs:
			signal.Stop(sigs)
			fmt.Fprintf(os.Stderr, "soak: %v: stopping (again to kill at once)\n", sig)
			cancel(fmt.Errorf("signal %v", sig))
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(sigs); cancel(nil) }
}
