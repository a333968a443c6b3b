package postgres

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/alineo-labs/alineo/adapters"
)

// loadMixed is loadEvents with every $3-th session (when $3 > 0) written as
// the TypeScript SDK's Postgres adapter writes it: its names, every payload a
// JSONB string holding the JSON text, and not marked summarised (another
// process appended it).
const loadMixed = `
INSERT INTO alineo_events (sandbox_id, name, step_idx, branch, event, payload, error, ts, summarised)
SELECT sbx, 'job-' || (i % 50), step, NULL,
  CASE WHEN foreign_ THEN CASE ev WHEN 'sandbox.created' THEN 'sandbox_created' WHEN 'sandbox.closed' THEN 'sandbox_closed'
       WHEN 'exec.started' THEN 'exec_start' WHEN 'exec.output' THEN 'exec_event' ELSE 'exec_complete' END ELSE ev END,
  CASE WHEN foreign_ AND p IS NOT NULL THEN to_jsonb(p::text) ELSE p END,
  NULL, ts, CASE WHEN foreign_ THEN NULL ELSE true END
FROM (
  SELECT i, 'sbx-' || lpad(i::text, 6, '0') AS sbx, ($3 > 0 AND i % $3 = 0) AS foreign_,
    CASE WHEN j = 0 OR (j = $2 - 1 AND i % 2 = 0) THEN -1 ELSE j / 3 + 1 END AS step,
    CASE WHEN j = 0 THEN 'sandbox.created'
         WHEN j = $2 - 1 AND i % 2 = 0 THEN 'sandbox.closed'
         WHEN j = $2 - 1 THEN 'exec.output'
         WHEN j % 3 = 0 THEN 'exec.started'
         WHEN j % 3 = 1 THEN 'exec.output'
         ELSE 'exec.completed' END AS ev,
    CASE WHEN j = 0 THEN jsonb_build_object('sandboxId', 'sbx-' || lpad(i::text, 6, '0'), 'resources', '{"cpu":"1"}'::jsonb, 'runId', 'run-' || i)
         WHEN j = $2 - 1 AND i % 2 = 0 THEN NULL
         WHEN j % 3 = 2 AND j <> $2 - 1 THEN jsonb_build_object('seq', j / 3 + 1, 'exitCode', 0)
         ELSE jsonb_build_object('seq', j / 3 + 1, 'type', 'stdout', 'text', repeat('x', 150)) END AS p,
    1764400000000 + i * 1000 + j AS ts
  FROM generate_series(0, $1 - 1) AS i, generate_series(0, $2 - 1) AS j) AS r`

// loadMixedDetails is loadDetails for the sessions loadMixed marked summarised.
var loadMixedDetails = loadDetails + ` WHERE NOT ($3 > 0 AND i % $3 = 0)`

// mixedDataset loads detailsSessions × detailsPer entries, every foreignEvery-th
// session in the TypeScript Postgres adapter's shape (0: none).
func mixedDataset(b *testing.B, foreignEvery int) *Store {
	b.Helper()
	ctx := context.Background()
	s := migratedStore(b)
	p, err := s.db(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.Exec(ctx, `DROP INDEX alineo_events_name_sandbox_ts; DROP INDEX alineo_events_ledger_seq`); err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{loadMixed, loadMixedDetails} {
		if _, err := p.Exec(ctx, q, detailsSessions, detailsPer, foreignEvery); err != nil {
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
	return s
}

// BenchmarkMixedVocabularies is the Postgres form of the SQLite benchmark of
// the same name: a tenth of 100k sessions in the TypeScript adapter's shape
// (its names, JSONB-string payloads, appended past the store) against the
// dotted-only ledger; listing 20 and ReadAll, alternating (ratios dotted/mixed
// time, target >= 0.9); the first listing, which folds the 10k foreign
// sessions; and listings while another process appends a session between two
// listings (target: under 5 ms).
func BenchmarkMixedVocabularies(b *testing.B) {
	ctx := context.Background()
	dotted, mixed := mixedDataset(b, 0), mixedDataset(b, 10)
	for range b.N {
		start := time.Now()
		ds, err := mixed.ListAllSandboxDetails(ctx, adapters.ListOptions{Limit: 20})
		catchUp := time.Since(start)
		if err != nil || len(ds) != 20 {
			b.Fatalf("first listing: %d, %v", len(ds), err)
		}
		want := adapters.SandboxDetails{Name: "job-0", SandboxID: "sbx-000050", Status: adapters.StatusCompleted,
			StartedAt: 1764400050000, CompletedAt: 1764400050000 + detailsPer - 1, ExecCount: 6, RunID: "run-50"}
		for _, s := range []*Store{dotted, mixed} {
			if got, err := s.GetSandboxDetails(ctx, "job-0", "sbx-000050"); err != nil || got == nil || *got != want {
				b.Fatalf("details = %+v, %v; want %+v", got, err, want)
			}
		}
		b.ReportMetric(ms(catchUp), "first-catchup-ms")

		const calls = 200
		var listD, listM, readD, readM []time.Duration
		for i := range calls {
			n := (i * 7919) % detailsSessions / 10 * 10 // a TypeScript session of the mixed ledger
			for _, s := range []*Store{dotted, mixed} {
				start := time.Now()
				ds, err := s.ListAllSandboxDetails(ctx, adapters.ListOptions{Limit: 20})
				d := time.Since(start)
				if err != nil || len(ds) != 20 {
					b.Fatalf("list: %d, %v", len(ds), err)
				}
				start = time.Now()
				es, err := s.ReadAll(ctx, fmt.Sprintf("job-%d", n%50), fmt.Sprintf("sbx-%06d", n))
				r := time.Since(start)
				if err != nil || len(es) != detailsPer || es[0].Payload[0] != '{' {
					b.Fatalf("read all sbx-%06d: %d, %v", n, len(es), err)
				}
				if s == dotted {
					listD, readD = append(listD, d), append(readD, r)
				} else {
					listM, readM = append(listM, d), append(readM, r)
				}
			}
		}
		p50 := func(l []time.Duration) time.Duration { slices.Sort(l); return l[len(l)/2] }
		ld, lm, rd, rm := p50(listD), p50(listM), p50(readD), p50(readM)
		b.ReportMetric(ms(ld), "list-dotted-p50-ms")
		b.ReportMetric(ms(lm), "list-mixed-p50-ms")
		b.ReportMetric(float64(ld)/float64(lm), "list-ratio")
		b.ReportMetric(ms(rd), "readall-dotted-p50-ms")
		b.ReportMetric(ms(rm), "readall-mixed-p50-ms")
		b.ReportMetric(float64(rd)/float64(rm), "readall-ratio")

		p, err := mixed.db(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var live []time.Duration
		for i := range calls {
			id := fmt.Sprintf("live-%d", i)
			ts := int64(1796000000000) + int64(i)*1000
			batch := &pgx.Batch{}
			ins := `INSERT INTO alineo_events (sandbox_id, name, step_idx, branch, event, payload, error, ts) VALUES ($1, 'live', $2, NULL, $3, to_jsonb($4::text), NULL, $5)`
			batch.Queue(ins, id, -1, "sandbox_created", fmt.Sprintf(`{"sandboxId":%q,"runId":"r"}`, id), ts)
			for j := 1; j <= 6; j++ {
				batch.Queue(ins, id, j, "exec_start", fmt.Sprintf(`{"cmd":"echo","seq":%d}`, j), ts+int64(j))
				batch.Queue(ins, id, j, "exec_event", fmt.Sprintf(`{"seq":%d,"type":"stdout","text":"x","timestamp":1}`, j), ts+int64(j))
				batch.Queue(ins, id, j, "exec_complete", fmt.Sprintf(`{"exitCode":0,"seq":%d}`, j), ts+int64(j))
			}
			if err := p.SendBatch(ctx, batch).Close(); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			ds, err := mixed.ListAllSandboxDetails(ctx, adapters.ListOptions{Limit: 20})
			live = append(live, time.Since(start))
			if err != nil || len(ds) != 20 || ds[0].SandboxID != id || ds[0].ExecCount != 6 {
				b.Fatalf("listing after a foreign append: %+v, %v; want %s first", ds[:min(1, len(ds))], err, id)
			}
		}
		slices.Sort(live)
		b.ReportMetric(ms(live[len(live)/2]), "live-catchup-p50-ms")
		b.ReportMetric(ms(live[len(live)*99/100]), "live-catchup-p99-ms")
	}
}
