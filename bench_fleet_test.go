package alineo_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

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
// The floor: an exec of the SDK waits for two commits, exec.started before
// its request and its output with exec.completed before Wait returns, so each
// sandbox's loop takes at least the raw exec's time (n / raw execs/s) plus
// two commits; floor-ratio is raw time / (raw time + 2 commits), a commit
// taking the mean time of one-entry AppendBatch calls made every 10 ms while
// the raw client runs (commit-mean-ms, and its p50): what this machine's
// disk and load allow any SDK that keeps the guarantee (commit-sdk-p50-ms:
// the same calls while the SDK runs, queued with its commits).
// raw-cpu-us and sdk-cpu-us are this process's CPU time per exec in each
// phase (it runs sandboxd's server, SQLite and the NATS server too; execd
// and Postgres run in processes of their own).
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
				ratio := execFleet(b, client, ledger, n)
				testenv.Target(b, "ratio", ratio, fl.target, false)
			})
		}
	}
}

// fleetSandbox is one sandbox of the fleet: its SDK handle and a raw execd
// client on it.
type fleetSandbox struct {
	sb  *alineo.Sandbox
	raw *opensandbox.Execd
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
			fleet[i] = fleetSandbox{sb: sb, raw: raw}
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

// execFleet runs the rounds on n new sandboxes of client, recording into
// ledger, reports the rates and the floor, and returns the ratio.
func execFleet(b *testing.B, client *alineo.Client, ledger adapters.Ledger, n int) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fleet := openFleet(b, ctx, client, n)
	perSandbox := max(8, 640/n) // execs of each sandbox in a phase
	execs := [2]func(fleetSandbox) error{
		func(f fleetSandbox) error { // raw
			s, err := f.raw.RunCommand(ctx, opensandbox.CommandRequest{Command: "echo hi"})
			if err != nil {
				return err
			}
			defer s.Close()
			_, err = s.Wait()
			return err
		},
		func(f fleetSandbox) error { // SDK
			_, err := f.sb.Exec(ctx, "echo hi").Wait()
			return err
		},
	}
	var cpu [2]time.Duration // this process's CPU time: raw phases, SDK phases
	var commits [2][]time.Duration
	// phase runs k execs on each sandbox at once, the raw client's (which
	// 0) or the SDK's (1), and returns the aggregate execs/s.
	phase := func(k, which int) float64 {
		var wg sync.WaitGroup
		errs := make(chan error, n)
		stop := commitProbe(ctx, ledger, fmt.Sprint("probe-", which))
		cpu0 := processCPU(b)
		start := time.Now()
		for _, f := range fleet {
			wg.Go(func() {
				for range k {
					if err := execs[which](f); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		took := time.Since(start)
		cpu[which] += processCPU(b) - cpu0
		commits[which] = append(commits[which], stop()...)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		return float64(n*k) / took.Seconds()
	}
	phase(2, 0) // warm-up: connections, the ledger's statements
	phase(2, 1)
	cpu = [2]time.Duration{}
	commits = [2][]time.Duration{}
	const rounds = 7
	var rates [2][]float64
	var ratios []float64
	for b.Loop() {
		for i := range rounds {
			var r, s float64
			inTurn(i%2 == 0, func() { r = phase(perSandbox, 0) }, func() { s = phase(perSandbox, 1) })
			rates[0], rates[1], ratios = append(rates[0], r), append(rates[1], s), append(ratios, s/r)
		}
	}
	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	perExec := float64(n * perSandbox * len(ratios))
	b.ReportMetric(median(rates[0]), "raw-execs/s")
	b.ReportMetric(median(rates[1]), "sdk-execs/s")
	b.ReportMetric(float64(cpu[0].Microseconds())/perExec, "raw-cpu-us")
	b.ReportMetric(float64(cpu[1].Microseconds())/perExec, "sdk-cpu-us")
	b.ReportMetric(slices.Min(ratios), "ratio-min")
	b.ReportMetric(slices.Max(ratios), "ratio-max")
	ratio := median(ratios)
	b.ReportMetric(ratio, "ratio")
	commit := mean(commits[0])
	rawTime := time.Duration(float64(n) / median(rates[0]) * float64(time.Second))
	b.ReportMetric(ms(commit), "commit-mean-ms")
	b.ReportMetric(ms(percentile(commits[0], 0.5)), "commit-p50-ms")
	b.ReportMetric(ms(percentile(commits[1], 0.5)), "commit-sdk-p50-ms")
	b.ReportMetric(float64(rawTime)/float64(rawTime+2*commit), "floor-ratio")
	return ratio
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(max(1, len(ds)))
}

// processCPU returns the CPU time this process has used (user and system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
