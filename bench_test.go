package alineo_test

import (
	"context"
	"io"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/testenv"
)

// benchStores are the ledgers the SDK's benchmarks record into: SQLite at
// its default synchronous FULL (a commit survives a power loss), and memory.
var benchStores = []struct {
	name string
	open func(b *testing.B) adapters.Store
}{
	{"sqlite-full", func(b *testing.B) adapters.Store {
		s, err := sqlite.Open(testenv.SQLitePath(b), sqlite.Config{Synchronous: "FULL"})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}},
	{"memory", func(b *testing.B) adapters.Store { return memory.New() }},
}

// benchClient is an SDK client on an embedded sandboxd, recording into store.
func benchClient(b *testing.B, store adapters.Store) (context.Context, *alineo.Client) {
	b.Helper()
	b.Cleanup(func() { store.Close() })
	url := testenv.Sandboxd(b)
	client, err := alineo.New(alineo.Options{BaseURL: url, Adapter: store})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	return ctx, client
}

// benchEnv is a sandbox on an embedded sandboxd with the given ledger, and a
// raw execd client on the same sandbox.
func benchEnv(b *testing.B, store adapters.Store) (context.Context, *alineo.Sandbox, *opensandbox.Execd) {
	b.Helper()
	ctx, client := benchClient(b, store)
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sb.Close(context.Background()) })
	raw, err := client.OpenSandbox().Execd(ctx, sb.ID())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { raw.Close() })
	return ctx, sb, raw
}

// defaultStore is the ledger of the benchmarks that use one: SQLite FULL, or
// memory with BENCH_MEMORY=1.
func defaultStore(b *testing.B) adapters.Store {
	if os.Getenv("BENCH_MEMORY") == "1" {
		return memory.New()
	}
	return benchStores[0].open(b)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// inTurn runs a then b, or b then a when aFirst is false.
func inTurn(aFirst bool, a, b func()) {
	if !aFirst {
		a, b = b, a
	}
	a()
	b()
}

// ratioOf is a / b held in a Duration (scaled by 1e6), so that percentile
// takes ratios too.
func ratioOf(a, b time.Duration) time.Duration { return time.Duration(float64(a) / float64(b) * 1e6) }

// BenchmarkExecRoundTrip compares `echo hi` through the SDK (recorded in the
// ledger: exec.started in one commit before the request is sent, the output
// and exec.completed in a second once the stream ends) with the same command
// through the raw opensandbox client, alternating, on one sandbox, per
// ledger. ratio = median over the pairs of SDK time / raw time (target
// <= 1.05 on memory); p50-ratio = SDK p50 / raw p50. On SQLite FULL the SDK
// is judged against its floor: the raw exec plus the two commits the
// guarantee needs, each timed alone in the same run (floor-ms = raw p50 +
// started-commit p50 + completed-commit p50); vs-floor = SDK p50 / floor
// (target <= 1.05). Each round also times the raw exec with those two
// commits made around it in one flow, as the SDK makes them
// (committed-p50-ms): no SDK keeping the guarantee takes less, so
// committed-p50 / floor is the best vs-floor this machine allows (the
// target line's floor), and vs-committed = SDK p50 / committed p50 is what
// the SDK's own path adds.
func BenchmarkExecRoundTrip(b *testing.B) {
	for _, st := range benchStores {
		b.Run(st.name, func(b *testing.B) {
			store := st.open(b)
			ctx, sb, raw := benchEnv(b, store)
			var committed adapters.Ledger // the raw exec with the commits, in one flow
			if st.name == "sqlite-full" {
				committed = store
			}
			rawP50, sdkP50, committedP50, ratio := execRoundTrip(b, ctx, sb, raw, committed)
			if st.name != "sqlite-full" {
				testenv.Target(b, "ratio", ratio, 1.05, true)
				return
			}
			// Each commit is made a raw exec's time after the one before,
			// as in an exec (a disk idle that long can take twice as long
			// to flush).
			started, completed := commitP50s(b, ctx, st.open(b), rawP50)
			floor := rawP50 + started + completed
			b.ReportMetric(ms(started), "started-commit-p50-ms")
			b.ReportMetric(ms(completed), "completed-commit-p50-ms")
			b.ReportMetric(ms(floor), "floor-ms")
			b.ReportMetric(float64(floor)/float64(rawP50), "floor-ratio")
			// The best vs-floor any SDK keeping the guarantee can reach
			// here: the raw exec with the two commits made in one flow,
			// which the medians of its parts, added up, understate.
			testenv.TargetFloor(b, "vs-floor", float64(sdkP50)/float64(floor), 1.05,
				float64(committedP50)/float64(floor), true)
		})
	}
}

// commitP50s returns the median time of the two commits an exec makes in
// store, each made idle after the one before: exec.started alone, and an
// output row with exec.completed in one AppendBatch.
func commitP50s(b *testing.B, ctx context.Context, store adapters.Store, idle time.Duration) (started, completed time.Duration) {
	defer store.Close()
	var ss, cs []time.Duration
	for i := range 105 {
		step := i + 1
		e := events.New(int64(step), "floor", "S", step, events.ExecStarted, events.ExecStartedPayload{Seq: step, Cmd: "echo hi"})
		time.Sleep(idle)
		start := time.Now()
		if err := store.Append(ctx, e); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		es := []events.Entry{
			events.New(int64(step), "floor", "S", step, events.ExecOutput, events.NewOutput(step, events.Stdout, []byte("hi\n"))),
			events.New(int64(step), "floor", "S", step, events.ExecCompleted, events.ExecCompletedPayload{Seq: step}),
		}
		time.Sleep(idle)
		start = time.Now()
		if err := store.AppendBatch(ctx, es); err != nil {
			b.Fatal(err)
		}
		if i >= 5 { // warm-up
			ss, cs = append(ss, took), append(cs, time.Since(start))
		}
	}
	return percentile(ss, 0.5), percentile(cs, 0.5)
}

// withCommitsAround runs exec, a raw `echo hi`, between the two commits the
// guarantee needs, made in ledger as the SDK makes them: step's
// exec.started before it, its output with exec.completed after it. Both go
// through AppendBatch, which returns once its entries are durable in every
// store; the bus's Append returns once the message is published, before the
// stream acknowledges it (Sync waits for that), which would send the request
// before exec.started is stored.
func withCommitsAround(ctx context.Context, ledger adapters.Ledger, name, session string, step int, exec func() error) error {
	started := events.New(time.Now().UnixMilli(), name, session, step, events.ExecStarted,
		events.ExecStartedPayload{Seq: step, Kind: events.KindCommand, Cmd: "echo hi",
			Fingerprint: events.Fingerprint(events.KindCommand, "echo hi")})
	if err := ledger.AppendBatch(ctx, []events.Entry{started}); err != nil {
		return err
	}
	if err := exec(); err != nil {
		return err
	}
	ts := time.Now().UnixMilli()
	return ledger.AppendBatch(ctx, []events.Entry{
		events.New(ts, name, session, step, events.ExecOutput, events.NewOutput(step, events.Stdout, []byte("hi\n"))),
		events.New(ts, name, session, step, events.ExecCompleted, events.ExecCompletedPayload{Seq: step}),
	})
}

// execRoundTrip runs the pairs and reports their metrics; it returns the raw
// client's p50, the SDK's and the ratio. With committed, each round also
// times the raw exec with the commits the guarantee needs made around it in
// committed, in one flow (exec.started, the raw exec, exec.output with
// exec.completed): committed-p50-ms, and vs-committed = SDK p50 / its p50,
// which shows what the SDK's own path adds to the raw client and the
// commits made in the same order as it makes them.
func execRoundTrip(b *testing.B, ctx context.Context, sb *alineo.Sandbox, raw *opensandbox.Execd, committed adapters.Ledger) (rawP50, sdkP50, committedP50 time.Duration, ratio float64) {
	const rounds = 100
	var sdk, base, withCommits []time.Duration
	runRaw := func() time.Duration {
		start := time.Now()
		s, err := raw.RunCommand(ctx, opensandbox.CommandRequest{Command: "echo hi"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Wait(); err != nil {
			b.Fatal(err)
		}
		s.Close()
		return time.Since(start)
	}
	runSDK := func() time.Duration {
		start := time.Now()
		if _, err := sb.Exec(ctx, "echo hi").Wait(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	step := 0
	runCommitted := func() time.Duration {
		step++
		start := time.Now()
		if err := withCommitsAround(ctx, committed, "committed", "S", step, func() error { runRaw(); return nil }); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for b.Loop() {
		sdk, base, withCommits = sdk[:0], base[:0], withCommits[:0]
		for i := range rounds + 5 {
			// The pairs start with either client in turn: a command sent as
			// soon as the last one's stream ended finds execd still reaping
			// that one (its process, its pipes) and starts some 60 µs later.
			// The SDK's own work after the end (the record) gives execd that
			// time, so in one fixed order (raw, SDK) the raw command always
			// found execd idle and the SDK's never did.
			var rawTook, sdkTook, committedTook time.Duration
			if i%2 == 0 {
				rawTook = runRaw()
				sdkTook = runSDK()
			} else {
				sdkTook = runSDK()
				rawTook = runRaw()
			}
			if committed != nil {
				committedTook = runCommitted()
			}
			if i >= 5 { // warm-up
				base = append(base, rawTook)
				sdk = append(sdk, sdkTook)
				withCommits = append(withCommits, committedTook)
			}
		}
	}
	b.ReportMetric(ms(percentile(base, 0.5)), "raw-p50-ms")
	b.ReportMetric(ms(percentile(base, 0.99)), "raw-p99-ms")
	b.ReportMetric(ms(percentile(sdk, 0.5)), "sdk-p50-ms")
	b.ReportMetric(ms(percentile(sdk, 0.99)), "sdk-p99-ms")
	if committed != nil {
		committedP50 = percentile(withCommits, 0.5)
		b.ReportMetric(ms(committedP50), "committed-p50-ms")
		b.ReportMetric(float64(percentile(sdk, 0.5))/float64(committedP50), "vs-committed")
	}
	// The ratio is the median of the per-pair ratios: each pair ran back to
	// back, under the same load, which this shared machine varies a lot.
	ratios := make([]time.Duration, len(sdk))
	for i := range sdk {
		ratios[i] = ratioOf(sdk[i], base[i])
	}
	ratio = float64(percentile(ratios, 0.5)) / 1e6
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(float64(percentile(sdk, 0.5))/float64(percentile(base, 0.5)), "p50-ratio")
	return percentile(base, 0.5), percentile(sdk, 0.5), committedP50, ratio
}

// BenchmarkOutputThroughput compares a command printing 200 MB (1000-byte
// lines) through the SDK, every chunk recorded in a SQLite ledger before it is
// delivered, with the raw client reading the same stream.
// ratio = SDK MB/s / raw MB/s (target >= 0.8). The raw client's own gain
// (frames decoded in one pass) is opensandbox's BenchmarkFrameDecode.
func BenchmarkOutputThroughput(b *testing.B) {
	ctx, sb, raw := benchEnv(b, defaultStore(b))
	size := 200_000_000 // whole 1000-byte lines
	if testing.Short() {
		size = 20_000_000
	}
	cmd := `yes "$(head -c 999 /dev/zero | tr '\0' x)" | head -c ` + strconv.Itoa(size)
	var rawTook, sdkTook time.Duration
	for b.Loop() {
		start := time.Now()
		s, err := raw.RunCommand(ctx, opensandbox.CommandRequest{Command: cmd})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for s.Next() {
			if ev := s.Event(); ev.Kind == opensandbox.EventStdout {
				n += len(ev.Text) + 1
			}
		}
		if s.Err() != nil || n != size {
			b.Fatalf("raw read %d bytes, %v; want %d", n, s.Err(), size)
		}
		s.Close()
		rawTook = time.Since(start)

		start = time.Now()
		cw := &countWriter{}
		if err := sb.Exec(ctx, cmd).Pipe(cw); err != nil || cw.n != size {
			b.Fatalf("SDK piped %d bytes, %v; want %d", cw.n, err, size)
		}
		sdkTook = time.Since(start)
	}
	mb := float64(size) / 1e6
	b.ReportMetric(mb/rawTook.Seconds(), "raw-MB/s")
	b.ReportMetric(mb/sdkTook.Seconds(), "sdk-MB/s")
	b.ReportMetric(rawTook.Seconds()/sdkTook.Seconds(), "ratio")
	testenv.Target(b, "ratio", rawTook.Seconds()/sdkTook.Seconds(), 0.8, false)
}

type countWriter struct{ n int }

func (w *countWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

var _ io.Writer = (*countWriter)(nil)

// BenchmarkExactOutput compares recording 200 MB of output (1000-byte lines)
// as exact chunks (sandboxd's extension, the default) with recording execd's
// line format, both through the SDK into a SQLite ledger, on one sandbox.
// ratio = exact MB/s / line-format MB/s (target >= 0.9).
func BenchmarkExactOutput(b *testing.B) {
	ctx, sb, _ := benchEnv(b, defaultStore(b))
	size := 200_000_000
	if testing.Short() {
		size = 20_000_000
	}
	cmd := `yes "$(head -c 999 /dev/zero | tr '\0' x)" | head -c ` + strconv.Itoa(size)
	run := func(lines bool) time.Duration {
		alineo.SetLineOutput(sb, lines)
		start := time.Now()
		cw := &countWriter{}
		if err := sb.Exec(ctx, cmd).Pipe(cw); err != nil || cw.n != size {
			b.Fatalf("lines=%v: piped %d bytes, %v; want %d", lines, cw.n, err, size)
		}
		return time.Since(start)
	}
	var exact, line time.Duration
	for b.Loop() {
		line += run(true)
		exact += run(false)
	}
	alineo.SetLineOutput(sb, false)
	mb := float64(size) * float64(b.N) / 1e6
	b.ReportMetric(mb/exact.Seconds(), "exact-MB/s")
	b.ReportMetric(mb/line.Seconds(), "line-MB/s")
	b.ReportMetric(line.Seconds()/exact.Seconds(), "ratio")
	testenv.Target(b, "ratio", line.Seconds()/exact.Seconds(), 0.9, false)
}

// BenchmarkStateWait times the SDK's calls that wait for a state (create
// until Running, checkpoint until the snapshot is Ready, pause, resume,
// restore, fork) against the time sandboxd records for the transition (its
// lastTransitionAt, less the call's start), rounds times each.
// <op>-ratio = median of SDK time / sandboxd's time (target <= 1.2);
// fork-vs-new = median fork time / median create time (target <= 1.3);
// <op>-vs-raw = median of SDK time / the raw client's (CreateSnapshotAndWait,
// PauseAndWait, ResumeAndWait) on the same sandbox, for checkpoint, pause and
// resume, the two going first in turn; <op>-ratio-floor = the raw client's
// <op>-ratio, for pause and resume, which they are judged against:
// sandboxd pauses and resumes in a quarter of a millisecond, within its
// answer to the call, so an HTTP round trip around it (the call, answered
// with the sandbox in its new state) is most of <op>-ratio there, and no
// client makes fewer.
func BenchmarkStateWait(b *testing.B) {
	ctx, client := benchClient(b, memory.New())
	osc := client.OpenSandbox()
	const rounds = 20
	ops := []string{"create", "checkpoint", "pause", "resume", "restore", "fork"}
	ratios, server := map[string][]time.Duration{}, map[string][]time.Duration{}
	var creates, forks []time.Duration
	vsRaw := map[string][]time.Duration{}     // SDK time / the raw client's, per op
	rawRatios := map[string][]time.Duration{} // the raw client's time / sandboxd's
	record := func(op string, start time.Time, took time.Duration, at *time.Time) {
		if at == nil || !at.After(start) {
			b.Fatalf("%s: sandboxd recorded the transition at %v, before the call started at %v", op, at, start)
		}
		ratios[op] = append(ratios[op], ratioOf(took, at.Sub(start)))
		server[op] = append(server[op], at.Sub(start))
	}
	sandboxAt := func(id string) *time.Time {
		info, err := osc.GetSandbox(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		return info.Status.LastTransitionAt
	}
	for b.Loop() {
		for i := range rounds {
			start := time.Now()
			sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host"})
			took := time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			record("create", start, took, sandboxAt(sb.ID()))
			creates = append(creates, took)

			// The SDK and the raw client take turns going first, so that
			// neither always takes the sandbox's first snapshot (it
			// captures all of the upper layer, the second one nothing) or
			// follows the other's work.
			sdkFirst := i%2 == 0
			var snap string
			var sdkCkpt, rawCkpt time.Duration
			sdkCheckpoint := func() {
				start := time.Now()
				var err error
				snap, err = sb.Checkpoint(ctx, "")
				sdkCkpt = time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				s, err := osc.GetSnapshot(ctx, snap)
				if err != nil {
					b.Fatal(err)
				}
				record("checkpoint", start, sdkCkpt, s.Status.LastTransitionAt)
			}
			rawCheckpoint := func() {
				start := time.Now()
				if _, err := osc.CreateSnapshotAndWait(ctx, sb.ID(), ""); err != nil {
					b.Fatal(err)
				}
				rawCkpt = time.Since(start)
			}
			inTurn(sdkFirst, sdkCheckpoint, rawCheckpoint)
			vsRaw["checkpoint"] = append(vsRaw["checkpoint"], ratioOf(sdkCkpt, rawCkpt))

			// Pause and resume by the SDK, and by the raw client on the same
			// sandbox, each one call answered once the transition is done:
			// what an HTTP round trip around sandboxd's transition costs any
			// client (ratio-floor: its time / the transition's, as ratio for
			// the SDK).
			var sdkPause, sdkResume, rawPause, rawResume time.Duration
			sdkPauseResume := func() {
				start := time.Now()
				if err := sb.Pause(ctx); err != nil {
					b.Fatal(err)
				}
				sdkPause = time.Since(start)
				record("pause", start, sdkPause, sandboxAt(sb.ID()))
				start = time.Now()
				if err := sb.Resume(ctx); err != nil {
					b.Fatal(err)
				}
				sdkResume = time.Since(start)
				record("resume", start, sdkResume, sandboxAt(sb.ID()))
			}
			rawPauseResume := func() {
				start := time.Now()
				if _, err := osc.PauseAndWait(ctx, sb.ID()); err != nil {
					b.Fatal(err)
				}
				rawPause = time.Since(start)
				rawRatios["pause"] = append(rawRatios["pause"], ratioOf(rawPause, sandboxAt(sb.ID()).Sub(start)))
				start = time.Now()
				if _, err := osc.ResumeAndWait(ctx, sb.ID()); err != nil {
					b.Fatal(err)
				}
				rawResume = time.Since(start)
				rawRatios["resume"] = append(rawRatios["resume"], ratioOf(rawResume, sandboxAt(sb.ID()).Sub(start)))
			}
			inTurn(sdkFirst, sdkPauseResume, rawPauseResume)
			vsRaw["pause"] = append(vsRaw["pause"], ratioOf(sdkPause, rawPause))
			vsRaw["resume"] = append(vsRaw["resume"], ratioOf(sdkResume, rawResume))

			start = time.Now()
			r, err := client.RestoreSnapshot(ctx, snap, "", alineo.Resources{})
			took = time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			record("restore", start, took, sandboxAt(r.ID()))
			r.Close(ctx)

			start = time.Now()
			f, err := sb.Fork(ctx, "")
			took = time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			record("fork", start, took, sandboxAt(f.ID()))
			forks = append(forks, took)
			f.Close(ctx)
			sb.Close(ctx)
		}
	}
	for _, op := range ops {
		r := float64(percentile(ratios[op], 0.5)) / 1e6
		b.ReportMetric(r, op+"-ratio")
		b.ReportMetric(ms(percentile(server[op], 0.5)), op+"-sandboxd-ms")
		if rs, ok := rawRatios[op]; ok {
			// The raw client's ratio is the floor: one HTTP round trip
			// around the transition, which any client pays.
			testenv.TargetFloor(b, op+"-ratio", r, 1.2, float64(percentile(rs, 0.5))/1e6, true)
			continue
		}
		testenv.Verdict(b, op+"-ratio", r, 1.2, true)
	}
	b.ReportMetric(1.2, "target-ratio")
	// SDK time / the raw client's (Resume also reconnects execd).
	for op, rs := range vsRaw {
		b.ReportMetric(float64(percentile(rs, 0.5))/1e6, op+"-vs-raw")
	}
	b.ReportMetric(ms(percentile(creates, 0.5)), "create-ms")
	b.ReportMetric(ms(percentile(forks, 0.5)), "fork-ms")
	forkVsNew := float64(percentile(forks, 0.5)) / float64(percentile(creates, 0.5))
	b.ReportMetric(forkVsNew, "fork-vs-new")
	testenv.Target(b, "fork-vs-new", forkVsNew, 1.3, true)
}
