package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/audit"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// BenchmarkReadAll reads one session of 150k entries (50k execs: started,
// output, completed) with ReadAll, against a raw baseline in the same run:
// the same rows and columns scanned into reused sql.RawBytes. Every entry
// carries an actor, as the SDK writes them.
// ratio = ReadAll time / raw time; ms = ReadAll's time.
func BenchmarkReadAll(b *testing.B) {
	const execs = 50_000
	ctx := context.Background()
	s, err := Open(filepath.Join(b.TempDir(), "l.db"), Config{Synchronous: "NORMAL"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	es := make([]events.Entry, 0, 3*execs)
	for i := 1; i <= execs; i++ {
		cmd := "echo step " + strconv.Itoa(i)
		ts := int64(1 + i)
		es = append(es,
			events.New(ts, "job", "S", i, events.ExecStarted, events.ExecStartedPayload{Seq: i, Kind: events.KindCommand, Cmd: cmd,
				Fingerprint: events.Fingerprint(events.KindCommand, cmd)}),
			events.New(ts, "job", "S", i, events.ExecOutput, events.NewOutput(i, events.Stdout, []byte("hi\n"))),
			events.New(ts, "job", "S", i, events.ExecCompleted, events.ExecCompletedPayload{Seq: i}))
	}
	for i := range es { // the SDK stamps every entry
		es[i].Actor = "alice via executor-3"
	}
	for part := es; len(part) > 0; {
		n := min(3000, len(part))
		if err := s.AppendBatch(ctx, part[:n]); err != nil {
			b.Fatal(err)
		}
		part = part[n:]
	}
	_, r, err := s.dbs(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var took, raw time.Duration
	for b.Loop() {
		start := time.Now()
		if err := rawRead(ctx, r); err != nil {
			b.Fatal(err)
		}
		raw += time.Since(start)
		start = time.Now()
		got, err := s.ReadAll(ctx, "job", "S")
		if err != nil || len(got) != len(es) {
			b.Fatalf("ReadAll = %d entries, %v; want %d", len(got), err, len(es))
		}
		took += time.Since(start)
	}
	b.ReportMetric(float64(took)/float64(b.N)/1e6, "ms")
	b.ReportMetric(float64(raw)/float64(b.N)/1e6, "raw-ms")
	b.ReportMetric(float64(took)/float64(raw), "ratio")
}

func rawRead(ctx context.Context, r *sql.DB) error {
	rows, err := r.QueryContext(ctx, `SELECT `+entryCols+` FROM alineo_events
		WHERE name = ? AND sandbox_id = ? ORDER BY ts, id`, "job", "S")
	if err != nil {
		return err
	}
	defer rows.Close()
	var seq, ts, step int64
	var branch sql.NullInt64
	var name, id, ev, payload, errText, actor, prev, hash sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&seq, &ts, &name, &id, &step, &branch, &ev, &payload, &errText, &actor, &prev, &hash); err != nil {
			return err
		}
	}
	return rows.Err()
}

// BenchmarkVerify measures audit.Verify over a SQLite ledger (the streaming
// scan, the canonical JSON and SHA-256 of every entry, the chain check)
// against a raw read of the same rows and columns in the same order.
// ratio = verify entries/s / raw entries/s (target >= 0.7).
func BenchmarkVerify(b *testing.B) {
	ctx := context.Background()
	const n = 200_000
	s, err := Open(filepath.Join(b.TempDir(), "verify.db"), Config{Synchronous: "NORMAL"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	es := outputEntries(n)
	for i := 0; i < n; i += 1000 {
		if err := s.AppendBatch(ctx, es[i:i+1000]); err != nil {
			b.Fatal(err)
		}
	}
	_, r, err := s.dbs(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var verifyDur, rawDur time.Duration
	var ratios []float64
	for range b.N {
		start := time.Now()
		rows, err := r.QueryContext(ctx, `SELECT `+entryCols+` FROM alineo_events ORDER BY id`)
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for rows.Next() {
			if _, err := scanRaw(rows); err != nil {
				b.Fatal(err)
			}
			got++
		}
		rows.Close()
		raw := time.Since(start)
		start = time.Now()
		res, err := audit.Verify(ctx, s, audit.Filter{}, audit.Options{})
		if err != nil || res.Entries != n || got != n {
			b.Fatalf("Verify = %d entries, %v; raw read %d; want %d", res.Entries, err, got, n)
		}
		v := time.Since(start)
		verifyDur, rawDur = verifyDur+v, rawDur+raw
		ratios = append(ratios, raw.Seconds()/v.Seconds())
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(b.N*n)/verifyDur.Seconds(), "verify-entries/s")
	b.ReportMetric(float64(b.N*n)/rawDur.Seconds(), "raw-entries/s")
	b.ReportMetric(ratios[len(ratios)/2], "ratio")
	testenv.Target(b, "ratio", ratios[len(ratios)/2], 0.7, false)
}
