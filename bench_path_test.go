package alineo_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/opensandbox"
)

// BenchmarkExecPath measures the SDK's own path of an exec apart from any
// sandbox: `echo hi` answered by the in-process fake execd, with nothing but
// this process on the cores. raw is the opensandbox client's exec; floor
// the same with the two commits the guarantee needs made around it in a
// store (withCommitsAround, as BenchmarkExecFleet's floor); sdk is
// Sandbox.Exec(...).Wait() recording into the same kind of store (memory;
// SQLite on SYNCHRONOUS=NORMAL under ".../sqlite-normal"). seq runs one exec
// at a time, par one on each of 16 sandboxes at once; the three kinds take
// turns, rounds times, each phase on fresh stores. Per exec:
// {raw,floor,sdk}-us (wall time), -allocs and -bytes (heap, counted as
// BenchmarkExecFleet counts them: tiny objects apart); sdk-over-floor-* is
// what the SDK's own path adds. On sandboxd an exec costs far more than its
// path here, and the path's share is within the run-to-run noise of
// BenchmarkExecFleet's rates; the allocations do not vary.
func BenchmarkExecPath(b *testing.B) {
	for _, store := range pathStores {
		for _, par := range []int{1, 16} {
			name := "seq"
			if par > 1 {
				name = "par"
			}
			if store.name != "memory" {
				name += "/" + store.name
			}
			b.Run(name, func(b *testing.B) { execPath(b, par, store.open) })
		}
	}
}

// pathStores are the stores BenchmarkExecPath records into: memory, and
// SQLite on SYNCHRONOUS=NORMAL, a durable store's commit (its transaction,
// its chain hash: deep calls) without an fsync's wait.
var pathStores = []struct {
	name string
	open func(b *testing.B) adapters.Ledger
}{
	{"memory", func(*testing.B) adapters.Ledger { return memory.New() }},
	{"sqlite-normal", func(b *testing.B) adapters.Ledger {
		s, err := sqlite.Open(filepath.Join(b.TempDir(), "path.db"), sqlite.Config{Synchronous: "NORMAL"})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}},
}

// pathKinds are BenchmarkExecPath's kinds of exec.
var pathKinds = [...]string{"raw", "floor", "sdk"}

func execPath(b *testing.B, par int, openStore func(*testing.B) adapters.Ledger) {
	url := alineo.FakeServerURL(b)
	ctx := context.Background()
	type lane struct {
		sb      *alineo.Sandbox
		raw     *opensandbox.Execd
		session string // the floor's
		step    int
	}
	var lanes []*lane
	// open makes a client recording into a fresh store, and its
	// sandboxes: the lanes of a phase.
	var stores []adapters.Ledger // the phase's, closed at its end
	store := func() adapters.Ledger {
		s := openStore(b)
		stores = append(stores, s)
		return s
	}
	open := func() {
		c, err := alineo.New(alineo.Options{BaseURL: url, Adapter: store()})
		if err != nil {
			b.Fatal(err)
		}
		lanes = make([]*lane, par)
		for i := range lanes {
			sb, err := c.Sandbox(ctx, alineo.SandboxOptions{Image: "ubuntu"})
			if err != nil {
				b.Fatal(err)
			}
			raw, err := c.OpenSandbox().Execd(ctx, sb.ID())
			if err != nil {
				b.Fatal(err)
			}
			lanes[i] = &lane{sb: sb, raw: raw, session: fmt.Sprint("floor-", i)}
		}
	}
	raw := func(l *lane) error { return rawEcho(ctx, l.raw) }
	var floorStore adapters.Ledger
	execs := [len(pathKinds)]func(l *lane) error{
		raw,
		func(l *lane) error {
			l.step++
			return withCommitsAround(ctx, floorStore, "path", l.session, l.step, func() error { return raw(l) })
		},
		func(l *lane) error {
			_, err := l.sb.Exec(ctx, "echo hi").Wait()
			return err
		},
	}
	perLane := 2400 / par // execs of each lane in a phase
	var took [len(pathKinds)]time.Duration
	var counts [len(pathKinds)]runtimeCounts
	phase := func(kind int, k int) {
		// Each phase starts from empty stores: a store grown by the phases
		// before makes the collector's cycles longer.
		floorStore = store()
		open()
		defer func() {
			for _, l := range lanes {
				l.raw.Close()
				if err := l.sb.Close(ctx); err != nil {
					b.Fatal(err)
				}
			}
			for _, s := range stores {
				s.Close()
			}
			stores = stores[:0]
		}()
		runtime.GC()
		c0, start := readRuntimeCounts(), time.Now()
		err := atOnce(lanes, k, execs[kind])
		took[kind] += time.Since(start)
		counts[kind] = counts[kind].add(readRuntimeCounts().sub(c0))
		if err != nil {
			b.Fatal(err)
		}
	}
	for kind := range pathKinds { // warm-up: connections, buffers
		phase(kind, 20)
	}
	took, counts = [len(pathKinds)]time.Duration{}, [len(pathKinds)]runtimeCounts{}
	const rounds = 5
	for b.Loop() {
		for i := range rounds {
			for j := range pathKinds {
				phase((i+j)%len(pathKinds), perLane)
			}
		}
	}
	n := float64(rounds * perLane * par * b.N)
	var us, al, by [len(pathKinds)]float64
	for kind, name := range pathKinds {
		us[kind] = float64(took[kind].Nanoseconds()) / 1e3 / n
		al[kind] = float64(counts[kind].allocs) / n
		by[kind] = float64(counts[kind].bytes) / n
		b.ReportMetric(us[kind], name+"-us")
		b.ReportMetric(al[kind], name+"-allocs")
		b.ReportMetric(by[kind], name+"-bytes")
	}
	b.ReportMetric(us[2]-us[1], "sdk-over-floor-us")
	b.ReportMetric(al[2]-al[1], "sdk-over-floor-allocs")
	b.ReportMetric(by[2]-by[1], "sdk-over-floor-bytes")
}
