package alineo_test

import (
	"context"
	"fmt"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/postgres"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/testenv"
)

// fleetLedgers are the ledgers BenchmarkExecFleet records into, each with
// its target (SDK execs/s over the raw client's, at least).
var fleetLedgers = []struct {
	name   string
	target float64
	open   func(b *testing.B) adapters.Ledger
}{
	{"memory", 0.97, func(b *testing.B) adapters.Ledger { return memory.New() }},
	{"sqlite-full", 0.95, func(b *testing.B) adapters.Ledger {
		s, err := sqlite.Open(testenv.SQLitePath(b), sqlite.Config{Synchronous: "FULL"})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}},
	{"postgres", 0.9, func(b *testing.B) adapters.Ledger {
		s, err := postgres.Open(testenv.Postgres(b), postgres.Config{})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}},
	{"bus", 0.9, func(b *testing.B) adapters.Ledger {
		bb, err := bus.Open(context.Background(), bus.Config{URL: testenv.NATS(b)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { bb.Close() })
		l, err := bus.NewLedger(bb, bus.LedgerConfig{})
		if err != nil {
			b.Fatal(err)
		}
		return l
	}},
}

// BenchmarkExecFleet runs `echo hi` on 16 and on 64 sandboxes at once, one
// goroutine per sandbox, through one SDK client recording into one ledger,
// and through the raw opensandbox client on the same sandboxes, the two in
// turn, rounds times; execs/s is the aggregate rate of a phase.
// ratio = median over the rounds of SDK execs/s / raw execs/s (targets:
// memory >= 0.97, SQLite FULL >= 0.95, Postgres and the bus >= 0.9). The
// Postgres of testenv runs with fsync off.
//
// The floor is the raw client plus the commits the guarantee needs, made
// through the same ledger by each sandbox's goroutine around each raw exec
// (exec.started before the request, exec.output with exec.completed once the
// stream ended), a third phase of every round: floor-ratio = median of its
// execs/s over the raw client's. It pays what any SDK keeping the guarantee
// pays here: the wait for each commit, and the commits' CPU on the cores the
// sandboxes keep busy (with this many sandboxes the raw client alone keeps
// every core busy: sandboxd, execd, the commands), which is what bounds the
// aggregate of the durable stores on this 2-core machine. The ratio is judged
// against it (vs-floor = ratio / floor-ratio shows what the SDK's own path
// costs beyond the commits).
//
// raw-cpu-us, floor-cpu-us and sdk-cpu-us are this process's CPU time per
// exec in each kind of phase (it runs sandboxd's server, SQLite and the NATS
// server too; execd and Postgres run in processes of their own);
// raw-machine-cpu-us and the others the machine's busy time per exec (every
// process and the kernel: testenv.MachineCPU). raw-allocs, raw-goroutines
// and the others are this process's heap allocations and goroutines started
// per exec: unlike the times, they do not vary with the machine's load, so
// they show a change of the SDK's own path that the rates cannot resolve.
// commit-p50-ms is the median of one-entry AppendBatch calls made every
// 10 ms while the raw client runs, commit-sdk-p50-ms the same while the SDK
// runs (queued with its commits).
func BenchmarkExecFleet(b *testing.B) {
	url := testenv.Sandboxd(b)
	for _, n := range []int{16, 64} {
		for _, fl := range fleetLedgers {
			b.Run(fmt.Sprintf("%s/%d", fl.name, n), func(b *testing.B) {
				ledger := fl.open(b)
				b.Cleanup(func() { ledger.Close() })
				client, err := alineo.New(alineo.Options{BaseURL: url, Adapter: ledger})
				if err != nil {
					b.Fatal(err)
				}
				ratio, floor := execFleet(b, client, ledger, n)
				testenv.TargetFloor(b, "ratio", ratio, fl.target, floor, false)
			})
		}
	}
}

// fleetSandbox is one sandbox of the fleet: its SDK handle and a raw execd
// client on it.
type fleetSandbox struct {
	sb  *alineo.Sandbox
	raw *opensandbox.Execd
	// floorStep is the last step the floor phases recorded for it; only
	// its goroutine of the running phase uses it.
	floorStep *int
}

// openFleet creates n sandboxes through client, a few at a time.
func openFleet(b *testing.B, ctx context.Context, client *alineo.Client, n int) []fleetSandbox {
	b.Helper()
	fleet := make([]fleetSandbox, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range fleet {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host"})
			if err != nil {
				errs <- err
				return
			}
			raw, err := client.OpenSandbox().Execd(ctx, sb.ID())
			if err != nil {
				errs <- err
				return
			}
			fleet[i] = fleetSandbox{sb: sb, raw: raw, floorStep: new(int)}
		})
	}
	wg.Wait()
	close(errs)
	b.Cleanup(func() {
		var wg sync.WaitGroup
		for _, f := range fleet {
			if f.sb != nil {
				wg.Go(func() {
					f.raw.Close()
					f.sb.Close(context.Background())
				})
			}
		}
		wg.Wait()
	})
	for err := range errs {
		b.Fatal(err)
	}
	return fleet
}

// commitProbe appends a one-entry batch to ledger every 10 ms until stop is
// called, and returns the time each took.
func commitProbe(ctx context.Context, ledger adapters.Ledger, session string) (stop func() []time.Duration) {
	done := make(chan struct{})
	out := make(chan []time.Duration, 1)
	go func() {
		var ds []time.Duration
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-done:
				out <- ds
				return
			case <-tick.C:
			}
			e := events.New(int64(i), "commit-probe", session, i, events.ExecStarted, events.ExecStartedPayload{Seq: i, Cmd: "probe"})
			start := time.Now()
			if err := ledger.AppendBatch(ctx, []events.Entry{e}); err != nil {
				out <- ds
				return
			}
			ds = append(ds, time.Since(start))
		}
	}()
	return func() []time.Duration { close(done); return <-out }
}

// The kinds of phases of execFleet.
const (
	rawPhase   = iota // the raw client
	sdkPhase          // the SDK, recording into the ledger
	floorPhase        // the raw client with the commits the guarantee needs
	phaseKinds
)

// phaseNames name the kinds of phases in the metrics and in the pprof
// label "phase".
var phaseNames = [phaseKinds]string{"raw", "sdk", "floor"}

// execFleet runs the rounds on n new sandboxes of client, recording into
// ledger, reports the rates and the floor, and returns the ratio and the
// floor it is judged against.
func execFleet(b *testing.B, client *alineo.Client, ledger adapters.Ledger, n int) (ratio, floor float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fleet := openFleet(b, ctx, client, n)
	perSandbox := max(8, 640/n) // execs of each sandbox in a phase
	// Each takes the phase's context, which carries its profiler label.
	raw := func(ctx context.Context, f fleetSandbox) error { return rawEcho(ctx, f.raw) }
	execs := [phaseKinds]func(context.Context, fleetSandbox) error{
		rawPhase: raw,
		sdkPhase: func(ctx context.Context, f fleetSandbox) error {
			_, err := f.sb.Exec(ctx, "echo hi").Wait()
			return err
		},
		floorPhase: func(ctx context.Context, f fleetSandbox) error {
			*f.floorStep++
			return withCommitsAround(ctx, ledger, "fleet-floor", "floor-"+f.sb.ID(), *f.floorStep, func() error { return raw(ctx, f) })
		},
	}
	var cpu, machine [phaseKinds]time.Duration // this process's CPU time and the machine's busy time, per kind
	var counts [phaseKinds]runtimeCounts
	var commits [phaseKinds][]time.Duration
	// phase runs k execs of the given kind on each sandbox at once and
	// returns the aggregate execs/s.
	phase := func(k, kind int) float64 {
		stop := commitProbe(ctx, ledger, fmt.Sprint("probe-", kind))
		cpu0, m0, c0 := processCPU(b), machineCPU(b), readRuntimeCounts()
		start := time.Now()
		var err error
		// Labelled, so that a CPU profile (-cpuprofile) tells the phases
		// apart: goroutines started under the label inherit it, and the
		// SDK's workers take it from the context.
		pprof.Do(ctx, pprof.Labels("phase", phaseNames[kind]), func(ctx context.Context) {
			err = atOnce(fleet, k, func(f fleetSandbox) error { return execs[kind](ctx, f) })
		})
		took := time.Since(start)
		counts[kind] = counts[kind].add(readRuntimeCounts().sub(c0))
		cpu[kind] += processCPU(b) - cpu0
		machine[kind] += machineCPU(b) - m0
		commits[kind] = append(commits[kind], stop()...)
		if err != nil {
			b.Fatal(err)
		}
		return float64(n*k) / took.Seconds()
	}
	for kind := range phaseKinds { // warm-up: connections, the ledger's statements
		phase(2, kind)
	}
	cpu, machine, commits = [phaseKinds]time.Duration{}, [phaseKinds]time.Duration{}, [phaseKinds][]time.Duration{}
	counts = [phaseKinds]runtimeCounts{}
	const rounds = 7
	var rates [phaseKinds][]float64
	var ratios, floors []float64
	for b.Loop() {
		for i := range rounds {
			// Each kind goes first, second and third in turn.
			var r [phaseKinds]float64
			for j := range phaseKinds {
				kind := (i + j) % phaseKinds
				r[kind] = phase(perSandbox, kind)
			}
			for kind := range phaseKinds {
				rates[kind] = append(rates[kind], r[kind])
			}
			ratios = append(ratios, r[sdkPhase]/r[rawPhase])
			floors = append(floors, r[floorPhase]/r[rawPhase])
		}
	}
	perExec := float64(n * perSandbox * len(ratios)) // each kind's execs, over every b.Loop
	perExecUs := func(d time.Duration) float64 { return float64(d.Microseconds()) / perExec }
	for kind, name := range phaseNames {
		b.ReportMetric(median(rates[kind]), name+"-execs/s")
		b.ReportMetric(perExecUs(cpu[kind]), name+"-cpu-us")
		b.ReportMetric(perExecUs(machine[kind]), name+"-machine-cpu-us")
		b.ReportMetric(float64(counts[kind].allocs)/perExec, name+"-allocs")
		b.ReportMetric(float64(counts[kind].goroutines)/perExec, name+"-goroutines")
	}
	b.ReportMetric(slices.Min(ratios), "ratio-min")
	b.ReportMetric(slices.Max(ratios), "ratio-max")
	ratio, floor = median(ratios), median(floors)
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(floor, "floor-ratio")
	b.ReportMetric(ratio/floor, "vs-floor")
	b.ReportMetric(ms(percentile(commits[rawPhase], 0.5)), "commit-p50-ms")
	b.ReportMetric(ms(percentile(commits[sdkPhase], 0.5)), "commit-sdk-p50-ms")
	return ratio, floor
}

// rawEcho runs `echo hi` through the raw client ex and waits for its end.
func rawEcho(ctx context.Context, ex *opensandbox.Execd) error {
	s, err := ex.RunCommand(ctx, opensandbox.CommandRequest{Command: "echo hi"})
	if err != nil {
		return err
	}
	defer s.Close()
	_, err = s.Wait()
	return err
}

// atOnce runs exec k times in a row on each of xs, all of xs at once, each
// in a goroutine of its own, and returns the first error of those that
// failed (each stops at its first).
func atOnce[T any](xs []T, k int, exec func(T) error) error {
	var g errgroup.Group
	for _, x := range xs {
		g.Go(func() error {
			for range k {
				if err := exec(x); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// runtimeCounts are counters of this process's runtime.
type runtimeCounts struct{ allocs, bytes, goroutines uint64 }

// readRuntimeCounts reads the heap objects and bytes allocated (tiny
// objects, combined into 16-byte blocks, not counted) and the goroutines
// started so far.
func readRuntimeCounts() runtimeCounts {
	ss := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}, {Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(ss)
	return runtimeCounts{allocs: ss[0].Value.Uint64(), bytes: ss[1].Value.Uint64(), goroutines: ss[2].Value.Uint64()}
}

func (c runtimeCounts) add(d runtimeCounts) runtimeCounts {
	return runtimeCounts{c.allocs + d.allocs, c.bytes + d.bytes, c.goroutines + d.goroutines}
}

func (c runtimeCounts) sub(d runtimeCounts) runtimeCounts {
	return runtimeCounts{c.allocs - d.allocs, c.bytes - d.bytes, c.goroutines - d.goroutines}
}

// median returns the median of xs.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// processCPU returns the CPU time this process has used (user and system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU returns the machine's busy time (testenv.MachineCPU).
func machineCPU(b *testing.B) time.Duration {
	d, err := testenv.MachineCPU()
	if err != nil {
		b.Fatal(err)
	}
	return d
}
