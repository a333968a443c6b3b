package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// foreignInsert appends es as the TypeScript SDK's SQLite adapter does: its
// eight columns, so the rows are not marked summarised.
func foreignInsert(ctx context.Context, db *sql.DB, es []events.Entry) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for len(es) > 0 {
		k := min(chunk, len(es))
		a := make([]any, 0, 8*k)
		for _, e := range es[:k] {
			var payload any
			if e.Payload != nil {
				payload = string(e.Payload)
			}
			a = append(a, e.SandboxID, e.Name, e.StepIndex, nil, string(e.Event), payload, nil, e.Ts)
		}
		q := `INSERT INTO alineo_events (sandbox_id, name, step_idx, branch, event, payload, error, ts) VALUES ` +
			strings.TrimSuffix(strings.Repeat(`(?, ?, ?, ?, ?, ?, ?, ?), `, k), ", ")
		if _, err := tx.ExecContext(ctx, q, a...); err != nil {
			return err
		}
		es = es[k:]
	}
	return tx.Commit()
}

// tsSession returns a session of per entries as the TypeScript SDK writes it:
// sandbox_created, execs (exec_start, an exec_event stdout line,
// exec_complete), then sandbox_closed.
func tsSession(name, id string, ts int64, per int) []events.Entry {
	es := []events.Entry{{Ts: ts, Name: name, SandboxID: id, StepIndex: -1, Event: events.TSSandboxCreated,
		Payload: []byte(fmt.Sprintf(`{"sandboxId":%q,"resources":{"cpu":"500m","memory":"512Mi"},"runId":"run-%s"}`, id, id))}}
	line := strings.Repeat("x", 150)
	for j := 1; j < per-1; j++ {
		step := 1 + j/3
		var e events.Entry
		switch j % 3 {
		case 0:
			e = events.Entry{Event: events.TSExecStart, Payload: []byte(fmt.Sprintf(`{"cmd":"echo %d","seq":%d}`, step, step))}
		case 1:
			e = events.Entry{Event: events.TSExecEvent, Payload: []byte(fmt.Sprintf(`{"seq":%d,"type":"stdout","text":%q,"timestamp":%d}`, step, line, ts+int64(j)))}
		default:
			e = events.Entry{Event: events.TSExecComplete, Payload: []byte(fmt.Sprintf(`{"exitCode":0,"seq":%d}`, step))}
		}
		e.Ts, e.Name, e.SandboxID, e.StepIndex = ts+int64(j), name, id, step
		es = append(es, e)
	}
	return append(es, events.Entry{Ts: ts + int64(per), Name: name, SandboxID: id, StepIndex: -1, Event: events.TSSandboxClosed})
}

// BenchmarkMixedVocabularies compares a ledger where a tenth of the 100k
// sessions were written by the TypeScript SDK (its names, appended past the
// store after its first open) with the dotted-only ledger of the same shape:
// listing 20 and ReadAll of a session, alternating between the two (ratios
// dotted/mixed time, target >= 0.9). It also reports the first listing after
// the foreign rows landed (the summary catching up on 10k sessions at once),
// and listings while another process keeps appending a session between two
// listings (each listing folds the new rows first; target: under 5 ms).
func BenchmarkMixedVocabularies(b *testing.B) {
	ctx := context.Background()
	dotted, _ := loadDetailsDataset(b, detailsSessions, detailsPer)
	mixed, _ := loadDetailsDataset(b, detailsSessions, detailsPer, 10)
	foreign, err := sql.Open("sqlite", mixed.dsn(true, "synchronous(NORMAL)"))
	if err != nil {
		b.Fatal(err)
	}
	defer foreign.Close()
	foreign.SetMaxOpenConns(1)

	for range b.N {
		// The foreign sessions were loaded past the store: the first listing folds them.
		start := time.Now()
		ds, err := mixed.ListAllSandboxDetails(ctx, adapters.ListOptions{Limit: 20})
		catchUp := time.Since(start)
		if err != nil || len(ds) != 20 {
			b.Fatalf("first listing: %d, %v", len(ds), err)
		}
		all, err := mixed.ListAllSandboxDetails(ctx, adapters.ListOptions{RunID: "run-sbx-000010"})
		if err != nil || len(all) != 1 || all[0].ExecCount != (detailsPer-2)/3 || all[0].Status != adapters.StatusCompleted {
			b.Fatalf("a TypeScript session = %+v, %v", all, err)
		}
		b.ReportMetric(ms(catchUp), "first-catchup-ms")

		const calls = 200
		var listD, listM, readD, readM []time.Duration
		for i := range calls {
			for _, s := range []*Store{dotted, mixed} {
				start := time.Now()
				ds, err := s.ListAllSandboxDetails(ctx, adapters.ListOptions{Limit: 20})
				d := time.Since(start)
				if err != nil || len(ds) != 20 {
					b.Fatalf("list: %d, %v", len(ds), err)
				}
				id := fmt.Sprintf("sbx-%06d", (i*7919)%detailsSessions/10*10) // a TypeScript session of the mixed ledger
				start = time.Now()
				es, err := s.ReadAll(ctx, fmt.Sprintf("job-%d", ((i*7919)%detailsSessions/10*10)%50), id)
				r := time.Since(start)
				if err != nil || len(es) != detailsPer {
					b.Fatalf("read all %s: %d, %v", id, len(es), err)
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

		// Another process appends a session between two listings.
		var live []time.Duration
		for i := range calls {
			id := fmt.Sprintf("live-%d-%d", len(live), i)
			if err := foreignInsert(ctx, foreign, tsSession("live", id, 1796000000000+int64(i)*1000, detailsPer)); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			ds, err := mixed.ListAllSandboxDetails(ctx, adapters.ListOptions{Limit: 20})
			live = append(live, time.Since(start))
			if err != nil || len(ds) != 20 || ds[0].SandboxID != id {
				b.Fatalf("listing after a foreign append: %+v, %v; want %s first", ds[:min(1, len(ds))], err, id)
			}
		}
		slices.Sort(live)
		b.ReportMetric(ms(live[len(live)/2]), "live-catchup-p50-ms")
		b.ReportMetric(ms(live[len(live)*99/100]), "live-catchup-p99-ms")
	}
}
