package alineo

import (
	"context"
	"fmt"
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
// memory store. The par- variants run 16 of them at once on 16 sandboxes.
// What sdk costs beyond floor (time, allocations and bytes per exec) is
// what the SDK adds to an exec; on sandboxd that is a few percent of an
// exec, which BenchmarkExecFleet's rates cannot resolve run to run, while
// the allocations here do not vary.
func BenchmarkExecPath(b *testing.B) {
	f := newFakeServer(b)
	ctx := context.Background()
	const n = 16
	open := func(b *testing.B) ([]*Sandbox, []*opensandbox.Execd) {
		c, err := New(Options{BaseURL: f.URL, Adapter: memory.New()})
		if err != nil {
			b.Fatal(err)
		}
		sbs := make([]*Sandbox, n)
		raws := make([]*opensandbox.Execd, n)
		for i := range n {
			if sbs[i], err = c.Sandbox(ctx, SandboxOptions{Image: "ubuntu"}); err != nil {
				b.Fatal(err)
			}
			if raws[i], err = sbs[i].execd(); err != nil {
				b.Fatal(err)
			}
		}
		return sbs, raws
	}
	raw := func(b *testing.B, ex *opensandbox.Execd) {
		s, err := ex.RunCommand(ctx, opensandbox.CommandRequest{Command: "echo hi"})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	floor := func(b *testing.B, store adapters.Ledger, ex *opensandbox.Execd, session string, step int) {
		started := events.New(time.Now().UnixMilli(), "path", session, step, events.ExecStarted,
			events.ExecStartedPayload{Seq: step, Kind: events.KindCommand, Cmd: "echo hi",
				Fingerprint: events.Fingerprint(events.KindCommand, "echo hi")})
		if err := store.AppendBatch(ctx, []events.Entry{started}); err != nil {
			b.Fatal(err)
		}
		raw(b, ex)
		ts := time.Now().UnixMilli()
		if err := store.AppendBatch(ctx, []events.Entry{
			events.New(ts, "path", session, step, events.ExecOutput, events.NewOutput(step, events.Stdout, []byte("hi\n"))),
			events.New(ts, "path", session, step, events.ExecCompleted, events.ExecCompletedPayload{Seq: step}),
		}); err != nil {
			b.Fatal(err)
		}
	}
	sessions := make([]string, n) // the floor's, one per sandbox
	for i := range sessions {
		sessions[i] = fmt.Sprint("floor-", i)
	}
	sdk := func(b *testing.B, sb *Sandbox) {
		if _, err := sb.Exec(ctx, "echo hi").Wait(); err != nil {
			b.Fatal(err)
		}
	}
	kinds := []struct {
		name string
		exec func(b *testing.B, i, step int, store adapters.Ledger, sbs []*Sandbox, raws []*opensandbox.Execd)
	}{
		{"raw", func(b *testing.B, i, _ int, _ adapters.Ledger, _ []*Sandbox, raws []*opensandbox.Execd) {
			raw(b, raws[i])
		}},
		{"floor", func(b *testing.B, i, step int, store adapters.Ledger, _ []*Sandbox, raws []*opensandbox.Execd) {
			floor(b, store, raws[i], sessions[i], step)
		}},
		{"sdk", func(b *testing.B, i, _ int, _ adapters.Ledger, sbs []*Sandbox, _ []*opensandbox.Execd) {
			sdk(b, sbs[i])
		}},
	}
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			sbs, raws := open(b)
			store := memory.New()
			b.ReportAllocs()
			step := 0
			for b.Loop() {
				step++
				k.exec(b, 0, step, store, sbs, raws)
			}
		})
	}
	for _, k := range kinds {
		b.Run("par-"+k.name, func(b *testing.B) {
			sbs, raws := open(b)
			store := memory.New()
			next := make(chan int, n)
			for i := range n {
				next <- i
			}
			b.ReportAllocs()
			b.SetParallelism((n + 1) / 2) // GOMAXPROCS is 2 here: n goroutines
			b.RunParallel(func(pb *testing.PB) {
				i := <-next
				step := 0
				for pb.Next() {
					step++
					k.exec(b, i, step, store, sbs, raws)
				}
			})
		})
	}
}
