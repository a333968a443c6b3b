package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// Benchmarks run a fixed workload per iteration (meaningful with -benchtime 1x)
// and report rates and ratios against a raw baseline measured in the same run.

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

// migrated returns a new, migrated database file and a raw handle on it with
// the store's own connection settings.
func migrated(b testing.TB) (path string, raw *sql.DB) {
	b.Helper()
	path = filepath.Join(b.TempDir(), "raw.db")
	s, err := Open(path, Config{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.ReadAll(context.Background(), "x", "y"); err != nil { // first use: migrate
		b.Fatal(err)
	}
	raw, err = sql.Open("sqlite", s.dsn(true, "synchronous("+s.cfg.Synchronous+")"))
	if err != nil {
		b.Fatal(err)
	}
	raw.SetMaxOpenConns(1)
	_ = s.Close()
	b.Cleanup(func() { _ = raw.Close() })
	return path, raw
}

// rawInsert writes es with the fastest plain path through the same driver:
// multi-row INSERTs of chunk rows, one transaction per batch.
func rawInsert(ctx context.Context, db *sql.DB, es []events.Entry, batch int) error {
	for len(es) > 0 {
		n := min(batch, len(es))
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		stmt, err := tx.PrepareContext(ctx, insertChunk)
		if err != nil {
			return err
		}
		a := make([]any, 0, cols*chunk)
		for part := es[:n]; len(part) > 0; {
			k := min(chunk, len(part))
			a = a[:0]
			for _, e := range part[:k] {
				a = args(a, e, 0) // the store's columns, as it writes them
			}
			if k == chunk {
				_, err = stmt.ExecContext(ctx, a...)
			} else {
				_, err = tx.ExecContext(ctx, insertRows(k), a...)
			}
			if err != nil {
				return err
			}
			part = part[k:]
		}
		stmt.Close()
		if err := tx.Commit(); err != nil {
			return err
		}
		es = es[n:]
	}
	return nil
}

func BenchmarkAppendBatch(b *testing.B) {
	ctx := context.Background()
	es := outputEntries(benchEntries)
	var rawDur, storeDur time.Duration
	for range b.N {
		_, raw := migrated(b)
		s, err := Open(filepath.Join(b.TempDir(), "store.db"), Config{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.ReadAll(ctx, "x", "y"); err != nil {
			b.Fatal(err)
		}
		// Raw and store batches alternate, so both see the same machine load.
		for i := 0; i < len(es); i += benchBatch {
			part := es[i : i+benchBatch]
			start := time.Now()
			if err := rawInsert(ctx, raw, part, benchBatch); err != nil {
				b.Fatal(err)
			}
			rawDur += time.Since(start)
			start = time.Now()
			if err := s.AppendBatch(ctx, part); err != nil {
				b.Fatal(err)
			}
			storeDur += time.Since(start)
		}
		_ = s.Close()
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
		s, err := Open(filepath.Join(b.TempDir(), "store.db"), Config{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.ReadAll(ctx, "x", "y"); err != nil {
			b.Fatal(err)
		}
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
		_ = s.Close()
	}
	// The same appends with Synchronous NORMAL (no fsync per commit in WAL mode).
	var normalDur time.Duration
	for range b.N {
		s, err := Open(filepath.Join(b.TempDir(), "normal.db"), Config{Synchronous: "NORMAL"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.ReadAll(ctx, "x", "y"); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for _, e := range es[:single] {
			if err := s.Append(ctx, e); err != nil {
				b.Fatal(err)
			}
		}
		normalDur += time.Since(start)
		_ = s.Close()
	}
	oneRate := float64(b.N*single) / oneDur.Seconds()
	batchRate := float64(b.N*(len(es)-single)) / batchDur.Seconds()
	b.ReportMetric(oneRate, "events/s")
	b.ReportMetric(oneRate/batchRate, "ratio-to-batch")
	b.ReportMetric(float64(b.N*single)/normalDur.Seconds(), "normal-events/s")
}

const (
	detailsSessions = 100_000
	detailsPer      = 20 // entries per session: 2M in all
)

// loadDetailsDataset writes sessions × per entries and their summary rows
// straight into a migrated database, with multi-row INSERTs in large
// transactions (synchronous off): the fastest raw path of this driver.
//
// With foreignEvery > 0, every foreignEvery-th session is written as the
// TypeScript SDK writes it (its names, its columns: not marked summarised, and
// no summary row), as if another process had appended it after the store's
// first open.
func loadDetailsDataset(b *testing.B, sessions, per int, foreignEvery ...int) (*Store, time.Duration) {
	b.Helper()
	ctx := context.Background()
	path, _ := migrated(b)
	s, err := Open(path, Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	raw, err := sql.Open("sqlite", s.dsn(true, "synchronous(OFF)"))
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	raw.SetMaxOpenConns(1)
	start := time.Now()
	created := `{"sandboxId":"%s","resources":{"cpu":"1"},"runId":"run-%d"}`
	out := `{"seq":%d,"type":"stdout","text":"` + strings.Repeat("x", 150) + `"}`
	batch := make([]events.Entry, 0, 10_000)
	var summary []any
	flush := func() {
		if err := rawInsert(ctx, raw, batch, len(batch)); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
		q := `INSERT INTO alineo_sandbox_details (name, sandbox_id, status, started_at, completed_at, exec_count, run_id) VALUES ` +
			strings.TrimSuffix(strings.Repeat(`(?, ?, ?, ?, ?, ?, ?), `, len(summary)/7), ", ")
		if _, err := raw.ExecContext(ctx, q, summary...); err != nil {
			b.Fatal(err)
		}
		summary = summary[:0]
	}
	var foreign []events.Entry
	for i := range sessions {
		id, name := fmt.Sprintf("sbx-%06d", i), fmt.Sprintf("job-%d", i%50)
		ts := int64(1764400000000) + int64(i)*1000
		if len(foreignEvery) > 0 && i%foreignEvery[0] == 0 {
			foreign = append(foreign, tsSession(name, id, ts, per)...)
			if len(foreign) >= 10_000 {
				if err := foreignInsert(ctx, raw, foreign); err != nil {
					b.Fatal(err)
				}
				foreign = foreign[:0]
			}
			continue
		}
		batch = append(batch, events.Entry{Ts: ts, Name: name, SandboxID: id, StepIndex: -1, Event: events.SandboxCreated,
			Payload: []byte(fmt.Sprintf(created, id, i))})
		execs := 0
		for j := 1; j < per-1; j++ {
			ev := []events.Event{events.ExecStarted, events.ExecOutput, events.ExecCompleted}[j%3]
			if ev == events.ExecCompleted {
				execs++
			}
			batch = append(batch, events.Entry{Ts: ts + int64(j), Name: name, SandboxID: id, StepIndex: 1 + j/3, Event: ev,
				Payload: []byte(fmt.Sprintf(out, 1+j/3))})
		}
		last := events.Entry{Ts: ts + int64(per), Name: name, SandboxID: id, StepIndex: -1, Event: events.SandboxClosed}
		status, completed := "completed", any(last.Ts)
		if i%2 == 1 { // every other session still running
			last.Event, last.StepIndex, last.Payload = events.ExecOutput, 9, []byte(fmt.Sprintf(out, 9))
			status, completed = "running", nil
		}
		batch = append(batch, last)
		summary = append(summary, name, id, status, ts, completed, execs, fmt.Sprintf("run-%d", i))
		if len(batch) >= 10_000 {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	if err := foreignInsert(ctx, raw, foreign); err != nil {
		b.Fatal(err)
	}
	return s, time.Since(start)
}

func BenchmarkListAllSandboxDetails(b *testing.B) {
	ctx := context.Background()
	s, load := loadDetailsDataset(b, detailsSessions, detailsPer)
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
// ledger_seq and summarised included) with the fastest plain path of this
// driver: one transaction, prepared multi-row INSERTs of chunk rows. It keeps
// no summary and no offset: those are the store's work to be measured.
func rawProjected(ctx context.Context, db *sql.DB, es []events.Entry) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	stmt, err := tx.PrepareContext(ctx, insertChunk)
	if err != nil {
		return err
	}
	defer stmt.Close()
	a := make([]any, 0, cols*chunk)
	for len(es) > 0 {
		k := min(chunk, len(es))
		a = a[:0]
		for _, e := range es[:k] {
			a = args(a, e, e.Seq)
		}
		if k == chunk {
			_, err = stmt.ExecContext(ctx, a...)
		} else {
			_, err = tx.ExecContext(ctx, insertRows(k), a...)
		}
		if err != nil {
			return err
		}
		es = es[k:]
	}
	return tx.Commit()
}

// BenchmarkApplyBatch measures the projector's write path (ledger_seq kept
// unique, the summary and the offset kept in the same transaction) against a
// raw bulk insert of the same rows into the same tables, batch by batch in
// turn. ratio = ApplyBatch events/s / raw events/s (target >= 0.7); the
// median of the per-round ratios.
func BenchmarkApplyBatch(b *testing.B) {
	ctx := context.Background()
	es := projectedMix(benchEntries/2, 50)
	var applyDur, rawDur time.Duration
	var ratios []float64
	for range b.N {
		for range 3 {
			_, raw := migrated(b)
			s, err := Open(filepath.Join(b.TempDir(), "store.db"), Config{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.ReadAll(ctx, "x", "y"); err != nil {
				b.Fatal(err)
			}
			var roundApply, roundRaw time.Duration
			for i := 0; i < len(es); i += benchBatch {
				part := es[i:min(i+benchBatch, len(es))]
				start := time.Now()
				if err := rawProjected(ctx, raw, part); err != nil {
					b.Fatal(err)
				}
				roundRaw += time.Since(start)
				start = time.Now()
				if err := s.ApplyBatch(ctx, "bench", part, part[len(part)-1].Seq); err != nil {
					b.Fatal(err)
				}
				roundApply += time.Since(start)
			}
			_ = s.Close()
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

// BenchmarkAppendChain measures what the hash chain costs an exec's appends
// on SQLite FULL: exec.started alone, then a batch of its output and its
// exec.completed, the SDK's commits, into a chained store and an unchained
// one in turn (same machine load). ratio = chained time / unchained time
// (target <= 1.05); the median of 9 rounds (of 3, it moved by ±3% between
// runs of the same code, as much as the chain costs).
func BenchmarkAppendChain(b *testing.B) {
	ctx := context.Background()
	const execs = 200
	line := strings.Repeat("npm WARN deprecated inflight@1.0.6: leaks memory ", 25)[:1000]
	var ratios []float64
	var chainDur, plainDur time.Duration
	for range b.N {
		for range 9 {
			stores := [2]*Store{}
			for i := range stores {
				s, err := Open(filepath.Join(b.TempDir(), fmt.Sprintf("s%d.db", i)), Config{})
				if err != nil {
					b.Fatal(err)
				}
				s.unchained = i == 1
				if _, err := s.ReadAll(ctx, "x", "y"); err != nil {
					b.Fatal(err)
				}
				stores[i] = s
			}
			var durs [2]time.Duration
			for x := 1; x <= execs; x++ {
				for j := range stores {
					i := (j + x) % 2 // each goes first every other exec
					s := stores[i]
					start := time.Now()
					id := fmt.Sprintf("sbx-%d", x%4)
					if err := s.Append(ctx, events.New(int64(x), "bench", id, x, events.ExecStarted,
						events.ExecStartedPayload{Seq: x, Kind: events.KindCommand, Cmd: "npm ci"})); err != nil {
						b.Fatal(err)
					}
					batch := make([]events.Entry, 0, 5)
					for c := range 4 {
						batch = append(batch, events.New(int64(x), "bench", id, x, events.ExecOutput,
							events.NewOutput(c+1, events.Stdout, []byte(line))))
					}
					batch = append(batch, events.New(int64(x), "bench", id, x, events.ExecCompleted, events.ExecCompletedPayload{Seq: x}))
					if err := s.AppendBatch(ctx, batch); err != nil {
						b.Fatal(err)
					}
					durs[i] += time.Since(start)
				}
			}
			for _, s := range stores {
				_ = s.Close()
			}
			chainDur, plainDur = chainDur+durs[0], plainDur+durs[1]
			ratios = append(ratios, durs[0].Seconds()/durs[1].Seconds())
		}
	}
	slices.Sort(ratios)
	n := float64(len(ratios) * execs * 6)
	b.ReportMetric(n/chainDur.Seconds(), "events/s")
	b.ReportMetric(n/plainDur.Seconds(), "unchained-events/s")
	b.ReportMetric(ratios[len(ratios)/2], "ratio")
	testenv.Target(b, "ratio", ratios[len(ratios)/2], 1.05, true)
}
