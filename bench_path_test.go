package alineo

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
)

// BenchmarkExecPath measures the SDK's own path of an exec apart from any
// sandbox: `echo hi` answered by the in-process fake execd, with nothing but
// this process on the cores. raw is the opensandbox client's exec; floor
// the same with the two commits the guarantee needs (exec.started before
// the request, the output with exec.completed after it) made in a memory
// store by the caller; sdk is Sandbox.Exec(...).Wait() recording into a
// memory store. seq runs one exec at a time, par one on each of 16
// sandboxes at once; the three kinds take turns, rounds times, each round
// a fresh store for each kind. Per exec: {raw,floor,sdk}-us (wall time),
// -allocs and -bytes (heap); sdk-over-floor-* is what the SDK's own path
// adds. On sandboxd an exec costs far more than its path here, and the
// path's share is within the run-to-run noise of BenchmarkExecFleet's
// rates; the allocations do not vary.
func BenchmarkExecPath(b *testing.B) {
	for _, par := range []int{1, 16} {
		name := "seq"
		if par > 1 {
			name = "par"
		}
		b.Run(name, func(b *testing.B) { execPath(b, par) })
	}
}

// pathKinds are BenchmarkExecPath's kinds of exec.
var pathKinds = [...]string{"raw", "floor", "sdk"}

func execPath(b *testing.B, par int) {
	f := newFakeServer(b)
	ctx := context.Background()
	type lane struct {
		sb      *Sandbox
		raw     *opensandbox.Execd
		session string // the floor's
		step    int
	}
	var lanes []*lane
	// open makes a client recording into a fresh memory store, and its
	// sandboxes: the lanes of a phase.
	open := func() {
		c, err := New(Options{BaseURL: f.URL, Adapter: memory.New()})
		if err != nil {
			b.Fatal(err)
		}
		lanes = make([]*lane, par)
		for i := range lanes {
			sb, err := c.Sandbox(ctx, SandboxOptions{Image: "ubuntu"})
			if err != nil {
				b.Fatal(err)
			}
			raw, err := sb.execd()
			if err != nil {
				b.Fatal(err)
			}
			lanes[i] = &lane{sb: sb, raw: raw, session: fmt.Sprint("floor-", i)}
		}
	}
	raw := func(ex *opensandbox.Execd) error {
		s, err := ex.RunCommand(ctx, opensandbox.CommandRequest{Command: "echo hi"})
		if err != nil {
			return err
		}
		defer s.Close()
		_, err = s.Wait()
		return err
	}
	var floorStore adapters.Ledger
	execs := [len(pathKinds)]func(l *lane) error{
		func(l *lane) error { return raw(l.raw) },
		func(l *lane) error {
			l.step++
			started := events.New(time.Now().UnixMilli(), "path", l.session, l.step, events.ExecStarted,
				events.ExecStartedPayload{Seq: l.step, Kind: events.KindCommand, Cmd: "echo hi",
					Fingerprint: events.Fingerprint(events.KindCommand, "echo hi")})
			if err := floorStore.AppendBatch(ctx, []events.Entry{started}); err != nil {
				return err
			}
			if err := raw(l.raw); err != nil {
				return err
			}
			ts := time.Now().UnixMilli()
			return floorStore.AppendBatch(ctx, []events.Entry{
				events.New(ts, "path", l.session, l.step, events.ExecOutput, events.NewOutput(l.step, events.Stdout, []byte("hi\n"))),
				events.New(ts, "path", l.session, l.step, events.ExecCompleted, events.ExecCompletedPayload{Seq: l.step}),
			})
		},
		func(l *lane) error {
			_, err := l.sb.Exec(ctx, "echo hi").Wait()
			return err
		},
	}
	perLane := 2400 / par // execs of each lane in a phase
	var took [len(pathKinds)]time.Duration
	var allocs, bytes [len(pathKinds)]uint64
	phase := func(kind int, k int) {
		// Each phase starts from empty stores: a store grown by the phases
		// before makes the collector's cycles longer.
		floorStore = memory.New()
		open()
		defer func() {
			for _, l := range lanes {
				if err := l.sb.Close(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}()
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, par)
		for _, l := range lanes {
			wg.Go(func() {
				for range k {
					if err := execs[kind](l); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		took[kind] += time.Since(start)
		runtime.ReadMemStats(&m1)
		allocs[kind] += m1.Mallocs - m0.Mallocs
		bytes[kind] += m1.TotalAlloc - m0.TotalAlloc
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	for kind := range pathKinds { // warm-up: connections, buffers
		phase(kind, 20)
	}
	took, allocs, bytes = [len(pathKinds)]time.Duration{}, [len(pathKinds)]uint64{}, [len(pathKinds)]uint64{}
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
		al[kind] = float64(allocs[kind]) / n
		by[kind] = float64(bytes[kind]) / n
		b.ReportMetric(us[kind], name+"-us")
		b.ReportMetric(al[kind], name+"-allocs")
		b.ReportMetric(by[kind], name+"-bytes")
	}
	b.ReportMetric(us[2]-us[1], "sdk-over-floor-us")
	b.ReportMetric(al[2]-al[1], "sdk-over-floor-allocs")
	b.ReportMetric(by[2]-by[1], "sdk-over-floor-bytes")
}
