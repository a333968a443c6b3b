package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// Benchmarks run a fixed workload per iteration (meaningful with -benchtime 1x)
// and report rates and ratios against a raw baseline measured in the same run.
// TestMain (postgres_test.go) stops the ephemeral server afterwards.

const (
	benchEntries = 100_000
	benchBatch   = 1000
)

// outputEntries returns n realistic exec.output entries of about 200 bytes
// (the JSON payload), spread over 10 sessions.
func outputEntries(n int) []events.Entry {
	line := strings.Repeat("npm WARN deprecated inflight@1.0.6: leaks memory ", 4)[:150]
	es := make([]events.Entry, n)
	for i := range es {
		es[i] = events.New(1764400000000+int64(i/10), "bench", fmt.Sprintf("sbx-%d", i%10), 1+i%50,
			events.ExecOutput, events.NewOutput(1+i%50, events.Stdout, []byte(fmt.Sprintf("%06d %s\n", i, line))))
	}
	return es
}

// migratedStore opens a store on a fresh database and migrates it.
func migratedStore(b testing.TB) *Store {
	b.Helper()
	s, err := Open(testenv.Postgres(b), Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	if _, err := s.ReadAll(context.Background(), "x", "y"); err != nil { // first use: migrate
		b.Fatal(err)
	}
	return s
}

// rawCopy writes es through the same pool with plain COPY, one transaction
// per batch: the fastest raw bulk path of pgx.
func rawCopy(ctx context.Context, s *Store, es []events.Entry, batch int) error {
	p, err := s.db(ctx)
	if err != nil {
		return err
	}
	for i := 0; i < len(es); i += batch {
		part := es[i:min(i+batch, len(es))]
		err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"alineo_events"}, columns, pgx.CopyFromSlice(len(part), func(j int) ([]any, error) {
				return row(part[j], 0), nil // the store's columns, as it writes them
			}))
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func BenchmarkAppendBatch(b *testing.B) {
	ctx := context.Background()
	es := outputEntries(benchEntries)
	var rawDur, storeDur time.Duration
	for range b.N {
		raw, s := migratedStore(b), migratedStore(b)
		// Raw and store batches alternate, so both see the same machine load.
		for i := 0; i < len(es); i += benchBatch {
			part := es[i : i+benchBatch]
			start := time.Now()
			if err := rawCopy(ctx, raw, part, benchBatch); err != nil {
				b.Fatal(err)
			}
			rawDur += time.Since(start)
			start = time.Now()
			if err := s.AppendBatch(ctx, part); err != nil {
				b.Fatal(err)
			}
			storeDur += time.Since(start)
		}
	}
	n := float64(b.N * benchEntries)
	b.ReportMetric(n/storeDur.Seconds(), "events/s")
	b.ReportMetric(n/rawDur.Seconds(), "raw-events/s")
	b.ReportMetric(rawDur.Seconds()/storeDur.Seconds(), "ratio")
}

func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	const single = 2000
	es := outputEntries(single + benchEntries/10)
	var oneDur, batchDur time.Duration
	for range b.N {
		s := migratedStore(b)
		start := time.Now()
		for _, e := range es[:single] {
			if err := s.Append(ctx, e); err != nil {
				b.Fatal(err)
			}
		}
		oneDur += time.Since(start)
		start = time.Now()
		for rest := es[single:]; len(rest) > 0; rest = rest[benchBatch:] {
			if err := s.AppendBatch(ctx, rest[:benchBatch]); err != nil {
				b.Fatal(err)
			}
		}
		batchDur += time.Since(start)
	}
	oneRate := float64(b.N*single) / oneDur.Seconds()
	batchRate := float64(b.N*(len(es)-single)) / batchDur.Seconds()
	b.ReportMetric(oneRate, "events/s")
	b.ReportMetric(oneRate/batchRate, "ratio-to-batch")
}

const (
	detailsSessions = 100_000
	detailsPer      = 20 // entries per session: 2M in all
)

// The fastest raw path: the server generates the rows itself. Each session has
// sandbox.created, six execs (started, output, completed) and then
// sandbox.closed (even sessions) or one more output (odd ones, still running).
const loadEvents = `
INSERT INTO alineo_events (sandbox_id, name, step_idx, branch, event, payload, error, ts, summarised)
SELECT 'sbx-' || lpad(i::text, 6, '0'), 'job-' || (i % 50),
  CASE WHEN j = 0 OR (j = $2 - 1 AND i % 2 = 0) THEN -1 ELSE j / 3 + 1 END,
  NULL,
  CASE WHEN j = 0 THEN 'sandbox.created'
       WHEN j = $2 - 1 AND i % 2 = 0 THEN 'sandbox.closed'
       WHEN j = $2 - 1 THEN 'exec.output'
       WHEN j % 3 = 0 THEN 'exec.started'
       WHEN j % 3 = 1 THEN 'exec.output'
       ELSE 'exec.completed' END,
  CASE WHEN j = 0 THEN jsonb_build_object('sandboxId', 'sbx-' || lpad(i::text, 6, '0'), 'resources', '{"cpu":"1"}'::jsonb, 'runId', 'run-' || i)
       WHEN j = $2 - 1 AND i % 2 = 0 THEN NULL
       ELSE jsonb_build_object('seq', j / 3 + 1, 'type', 'stdout', 'text', repeat('x', 150)) END,
  NULL,
  1764400000000 + i * 1000 + j,
  true
FROM generate_series(0, $1 - 1) AS i, generate_series(0, $2 - 1) AS j`

const loadDetails = `
INSERT INTO alineo_sandbox_details (name, sandbox_id, status, started_at, completed_at, exec_count, run_id)
SELECT 'job-' || (i % 50), 'sbx-' || lpad(i::text, 6, '0'),
  CASE WHEN i % 2 = 0 THEN 'completed' ELSE 'running' END,
  1764400000000 + i * 1000,
  CASE WHEN i % 2 = 0 THEN 1764400000000 + i * 1000 + $2 - 1 END,
  (SELECT count(*) FROM generate_series(1, $2 - 2) AS j WHERE j % 3 = 2),
  'run-' || i
FROM generate_series(0, $1 - 1) AS i`

func BenchmarkListAllSandboxDetails(b *testing.B) {
	ctx := context.Background()
	s := migratedStore(b)
	p, err := s.db(ctx)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	// Bulk-load practice: drop the entry indexes, load, build them again.
	if _, err := p.Exec(ctx, `DROP INDEX alineo_events_name_sandbox_ts; DROP INDEX alineo_events_ledger_seq`); err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{loadEvents, loadDetails} {
		if _, err := p.Exec(ctx, q, detailsSessions, detailsPer); err != nil {
			b.Fatal(err)
		}
	}
	conn, err := p.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	_, err = conn.Exec(ctx, `SET maintenance_work_mem = '256MB';
		CREATE INDEX alineo_events_name_sandbox_ts ON alineo_events(name, sandbox_id, ts, id);
		CREATE UNIQUE INDEX alineo_events_ledger_seq ON alineo_events(ledger_seq);
		ANALYZE alineo_events; ANALYZE alineo_sandbox_details; RESET maintenance_work_mem`)
	conn.Release()
	if err != nil {
		b.Fatal(err)
	}
	load := time.Since(start)
	// The summary loaded raw must be what the ledger says.
	got, err := s.GetSandboxDetails(ctx, "job-0", "sbx-000050")
	want := adapters.SandboxDetails{Name: "job-0", SandboxID: "sbx-000050", Status: adapters.StatusCompleted,
		StartedAt: 1764400050000, CompletedAt: 1764400050000 + detailsPer - 1, ExecCount: 6, RunID: "run-50"}
	if err != nil || got == nil || *got != want {
		b.Fatalf("details = %+v, %v; want %+v", got, err, want)
	}
	mid := int64(1764400000000) + int64(detailsSessions/2)*1000
	queries := []struct {
		name string
		run  func() ([]adapters.SandboxDetails, error)
	}{
		{"all", func() ([]adapters.SandboxDetails, error) {
			return s.ListAllSandboxDetails(ctx, adapters.ListOptions{Limit: 20})
		}},
		{"running", func() ([]adapters.SandboxDetails, error) {
			return s.ListAllSandboxDetails(ctx, adapters.ListOptions{Limit: 20, Status: adapters.StatusRunning})
		}},
		{"before", func() ([]adapters.SandboxDetails, error) {
			return s.ListAllSandboxDetails(ctx, adapters.ListOptions{Limit: 20, Before: mid})
		}},
		{"by-name", func() ([]adapters.SandboxDetails, error) {
			return s.ListSandboxDetails(ctx, "job-7", adapters.ListOptions{Limit: 20})
		}},
	}
	const calls = 200
	b.ResetTimer()
	for range b.N {
		for _, q := range queries {
			lat := make([]time.Duration, 0, calls)
			for range calls {
				start := time.Now()
				ds, err := q.run()
				lat = append(lat, time.Since(start))
				if err != nil || len(ds) != 20 {
					b.Fatalf("%s: %d details, %v; want 20", q.name, len(ds), err)
				}
				if q.name == "all" && ds[0].SandboxID != fmt.Sprintf("sbx-%06d", detailsSessions-1) {
					b.Fatalf("newest session = %s, want the last one loaded", ds[0].SandboxID)
				}
			}
			slices.Sort(lat)
			if q.name == "all" {
				b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
				b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
			} else {
				b.ReportMetric(ms(lat[len(lat)/2]), q.name+"-p50-ms")
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(detailsSessions*detailsPer), "entries")
	b.ReportMetric(load.Seconds(), "load-s")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// projectedMix returns n entries as a projector receives them, with ledger
// sequences 1..n: sessions of sandbox.created, execs of exec.started, 20
// exec.output of ~200 B and exec.completed, then sandbox.closed, with active
// sessions at a time interleaved (so a batch of 1000 touches each of them).
func projectedMix(n, active int) []events.Entry {
	line := strings.Repeat("npm WARN deprecated inflight@1.0.6: leaks memory ", 4)[:180]
	session := func(k int) []events.Entry {
		id, name := fmt.Sprintf("sbx-%06d", k), fmt.Sprintf("job-%d", k%20)
		ts := int64(1764400000000) + int64(k)*1000
		es := []events.Entry{events.New(ts, name, id, events.SandboxLevel, events.SandboxCreated,
			events.SandboxCreatedPayload{SandboxID: id, RunID: fmt.Sprintf("run-%d", k)})}
		for x := 1; x <= 10; x++ {
			es = append(es, events.New(ts+int64(x), name, id, x, events.ExecStarted,
				events.ExecStartedPayload{Seq: x, Kind: events.KindCommand, Cmd: "npm test"}))
			for o := range 20 {
				es = append(es, events.New(ts+int64(x), name, id, x, events.ExecOutput,
					events.NewOutput(x, events.Stdout, []byte(fmt.Sprintf("%04d %s\n", o, line)))))
			}
			es = append(es, events.New(ts+int64(x), name, id, x, events.ExecCompleted, events.ExecCompletedPayload{Seq: x}))
		}
		return append(es, events.New(ts+11, name, id, events.SandboxLevel, events.SandboxClosed, nil))
	}
	out := make([]events.Entry, 0, n)
	var live [][]events.Entry
	for k := 0; len(out) < n; {
		for len(live) < active {
			live = append(live, session(k))
			k++
		}
		for i := 0; i < len(live) && len(out) < n; i++ {
			out = append(out, live[i][0])
			if live[i] = live[i][1:]; len(live[i]) == 0 {
				live = slices.Delete(live, i, i+1)
				i--
			}
		}
	}
	for i := range out {
		out[i].Seq = uint64(i + 1)
	}
	return out
}

// rawProjected writes the rows ApplyBatch writes for es (every column,
// ledger_seq and summarised included) with plain COPY in one transaction: the
// fastest bulk path of pgx. It keeps no summary and no offset: those are the
// store's work to be measured.
func rawProjected(ctx context.Context, s *Store, es []events.Entry) error {
	p, err := s.db(ctx)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"alineo_events"}, columns, pgx.CopyFromSlice(len(es), func(j int) ([]any, error) {
			return row(es[j], es[j].Seq), nil
		}))
		return err
	})
}

// BenchmarkApplyBatch measures the projector's write path (ledger_seq kept
// unique, the summary and the offset kept in the same transaction) against a
// raw bulk insert (COPY) of the same rows into the same tables, batch by
// batch in turn. ratio = ApplyBatch events/s / raw events/s (target >= 0.7);
// the median of the per-round ratios.
func BenchmarkApplyBatch(b *testing.B) {
	ctx := context.Background()
	es := projectedMix(benchEntries/2, 50)
	var applyDur, rawDur time.Duration
	var ratios []float64
	for range b.N {
		for range 3 {
			raw, apply := migratedStore(b), migratedStore(b)
			var roundApply, roundRaw time.Duration
			for i := 0; i < len(es); i += benchBatch {
				part := es[i:min(i+benchBatch, len(es))]
				start := time.Now()
				if err := rawProjected(ctx, raw, part); err != nil {
					b.Fatal(err)
				}
				roundRaw += time.Since(start)
				start = time.Now()
				if err := apply.ApplyBatch(ctx, "bench", part, part[len(part)-1].Seq); err != nil {
					b.Fatal(err)
				}
				roundApply += time.Since(start)
			}
			applyDur, rawDur = applyDur+roundApply, rawDur+roundRaw
			ratios = append(ratios, roundRaw.Seconds()/roundApply.Seconds())
		}
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(len(ratios)*len(es))/applyDur.Seconds(), "events/s")
	b.ReportMetric(float64(len(ratios)*len(es))/rawDur.Seconds(), "raw-events/s")
	b.ReportMetric(ratios[len(ratios)/2], "ratio")
	testenv.Target(b, "ratio", ratios[len(ratios)/2], 0.7, false)
}
