package projections_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the raw-insert baseline only

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/postgres"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/bus/bustest"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/validated"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/testenv"
)

// rounds is how many times a benchmark alternates its baseline and its
// subject; it reports the median of the per-round ratios, far less noisy on
// a shared machine than one long run of each.
const rounds = 5

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// loaded opens a bus holding sandboxes sessions of the realistic mix
// (created, execs × (started, 20 outputs, completed)) and returns the entries.
func loaded(b *testing.B, sandboxes, execs int) (*bus.Bus, []events.Entry) {
	bb := openBus(b, bus.Config{})
	l := newLedger(b, bb, bus.LedgerConfig{MaxPending: 4096})
	var es []events.Entry
	for i := range sandboxes {
		all := bustest.Entries("bench", bustest.ID(fmt.Sprintf("pb%d", i)), execs, 20)
		es = append(es, all[:len(all)-2]...)
	}
	ctx := context.Background()
	for _, e := range es {
		if err := l.Append(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	// The raw baselines store the rows as the ledger stored them, links of
	// the hash chain included.
	var chain events.Chain
	for i := range es {
		var err error
		if es[i], err = chain.Link(es[i]); err != nil {
			b.Fatal(err)
		}
	}
	return bb, es
}

// project runs a projector into store until the store has committed want
// entries, and returns how long that took.
func project(b *testing.B, bb *bus.Bus, store adapters.ProjectionStore, want int) time.Duration {
	cs := &countingStore{ProjectionStore: store, want: int64(want), done: make(chan struct{})}
	p := &projections.Projector{Bus: bb, Store: cs, Consumer: "bench"}
	start := time.Now()
	stop := run(b, p)
	select {
	case <-cs.done:
	case <-time.After(60 * time.Second):
		b.Fatalf("committed %d of %d entries in 60 s", cs.n.Load(), want)
	}
	d := time.Since(start)
	if err := stop(); err != nil {
		b.Fatal(err)
	}
	return d
}

// countingStore closes done once ApplyBatch has committed want entries: the
// end of a run as exactly as the raw baselines' last commit (polling the
// projector's Progress would add up to the polling interval, 100 ms).
type countingStore struct {
	adapters.ProjectionStore
	want int64
	n    atomic.Int64
	once sync.Once
	done chan struct{}
}

func (s *countingStore) ApplyBatch(ctx context.Context, c string, es []events.Entry, o uint64) error {
	if err := s.ProjectionStore.ApplyBatch(ctx, c, es, o); err != nil {
		return err
	}
	s.count(len(es))
	return nil
}

// ApplyValidated and ValidatedSelf pass the projector's validated batches on
// as the projector hands them to a store, so that the benchmarks measure the
// path a projector takes into a store (no second validation).
func (s *countingStore) ApplyValidated(ctx context.Context, c string, v validated.Entries, o uint64) error {
	if err := applyValidated(ctx, s.ProjectionStore, c, v, o); err != nil {
		return err
	}
	s.count(v.Len())
	return nil
}

func (s *countingStore) ValidatedSelf() any { return s }

func (s *countingStore) count(n int) {
	if s.n.Add(int64(n)) >= s.want {
		s.once.Do(func() { close(s.done) })
	}
}

// applyValidated hands v to inner as the projector would: through
// ApplyValidated when inner takes validated entries, else ApplyBatch.
func applyValidated(ctx context.Context, inner adapters.ProjectionStore, c string, v validated.Entries, o uint64) error {
	if a := validated.ApplierOf(inner); a != nil {
		return a.ApplyValidated(ctx, c, v, o)
	}
	return inner.ApplyBatch(ctx, c, v.Slice(), o)
}

const rawSQLiteSchema = `
CREATE TABLE alineo_events (id INTEGER PRIMARY KEY, sandbox_id TEXT NOT NULL, name TEXT NOT NULL,
  step_idx INTEGER NOT NULL, branch INTEGER, event TEXT NOT NULL, payload TEXT, error TEXT,
  ts INTEGER NOT NULL, ledger_seq INTEGER, actor TEXT, prev_hash TEXT, hash TEXT);
CREATE INDEX alineo_events_name_sandbox_ts ON alineo_events(name, sandbox_id, ts, id);
CREATE UNIQUE INDEX alineo_events_ledger_seq ON alineo_events(ledger_seq);`

// rawSQLite inserts es into a bare table of the same schema, in transactions
// of projections.DefaultBatchSize rows with one prepared statement. Like the
// store, it keeps each row's hash chain links (prev_hash, hash): they are the
// rows' content, not the projector's cost.
func rawSQLite(b *testing.B, es []events.Entry) time.Duration {
	path := testenv.SQLitePath(b)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(rawSQLiteSchema); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for lo := 0; lo < len(es); lo += projections.DefaultBatchSize {
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		st, err := tx.Prepare(`INSERT INTO alineo_events (sandbox_id, name, step_idx, branch, event, payload, error, ts, ledger_seq, actor, prev_hash, hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`)
		if err != nil {
			b.Fatal(err)
		}
		for i, e := range es[lo:min(lo+projections.DefaultBatchSize, len(es))] {
			if _, err := st.Exec(e.SandboxID, e.Name, e.StepIndex, nil, string(e.Event), string(e.Payload), nil, e.Ts, lo+i+1, nil, e.PrevHash, e.Hash); err != nil {
				b.Fatal(err)
			}
		}
		st.Close()
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// rawPostgres copies es into a bare table of the same schema with COPY, in
// chunks of projections.DefaultBatchSize rows, hash chain links included (see
// rawSQLite).
func rawPostgres(b *testing.B, dsn string, es []events.Entry) time.Duration {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE raw_events (id BIGSERIAL PRIMARY KEY, sandbox_id TEXT NOT NULL, name TEXT NOT NULL,
  step_idx INTEGER NOT NULL, branch INTEGER, event TEXT NOT NULL, payload JSONB, error TEXT, ts BIGINT NOT NULL, ledger_seq BIGINT,
  actor TEXT, prev_hash TEXT, hash TEXT);
CREATE INDEX raw_events_name_sandbox_ts ON raw_events(name, sandbox_id, ts, id);
CREATE UNIQUE INDEX raw_events_ledger_seq ON raw_events(ledger_seq);`); err != nil {
		b.Fatal(err)
	}
	cols := []string{"sandbox_id", "name", "step_idx", "event", "payload", "ts", "ledger_seq", "prev_hash", "hash"}
	start := time.Now()
	for lo := 0; lo < len(es); lo += projections.DefaultBatchSize {
		chunk := es[lo:min(lo+projections.DefaultBatchSize, len(es))]
		rows := make([][]any, len(chunk))
		for i, e := range chunk {
			rows[i] = []any{e.SandboxID, e.Name, e.StepIndex, string(e.Event), string(e.Payload), e.Ts, int64(lo + i + 1), e.PrevHash, e.Hash}
		}
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{"raw_events"}, cols, pgx.CopyFromRows(rows)); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// ready has store connect and create its tables before a timed run, as the
// raw baselines create theirs before their clocks start: the ratios compare
// throughput, not a fresh database's migration (tens of milliseconds on
// Postgres, a tenth of a round).
func ready(b *testing.B, store adapters.ProjectionStore) {
	if _, err := store.Offset(context.Background(), "bench"); err != nil {
		b.Fatal(err)
	}
}

// timedStore measures the time spent inside the store's ApplyBatch, so the
// benchmarks can tell the projector's own cost from the store's.
type timedStore struct {
	adapters.ProjectionStore
	ns atomic.Int64
}

func (s *timedStore) ApplyBatch(ctx context.Context, c string, es []events.Entry, o uint64) error {
	t := time.Now()
	err := s.ProjectionStore.ApplyBatch(ctx, c, es, o)
	s.ns.Add(int64(time.Since(t)))
	return err
}

func (s *timedStore) ApplyValidated(ctx context.Context, c string, v validated.Entries, o uint64) error {
	t := time.Now()
	err := applyValidated(ctx, s.ProjectionStore, c, v, o)
	s.ns.Add(int64(time.Since(t)))
	return err
}

func (s *timedStore) ValidatedSelf() any { return s }

// BenchmarkProjectorSQLite: projector throughput into SQLite vs a raw bulk
// insert of the same rows. store-ratio is the store's ApplyBatch alone vs the
// raw insert: the ceiling of ratio.
func BenchmarkProjectorSQLite(b *testing.B) {
	bb, es := loaded(b, 40, 20) // 40 × 441 = 17,640 events
	var projD, rawD, storeD time.Duration
	var ratios, storeRatios []float64
	for range b.N * rounds {
		roundRaw := rawSQLite(b, es)
		rawD += roundRaw
		// Synchronous NORMAL, as the raw insert and as cmd/projector opens
		// its store: a projection's rows and offset commit together, so
		// what a power loss takes back is projected again from the stream.
		s, err := sqlite.Open(testenv.SQLitePath(b), sqlite.Config{Synchronous: "NORMAL"})
		if err != nil {
			b.Fatal(err)
		}
		ready(b, s)
		ts := &timedStore{ProjectionStore: s}
		roundProj := project(b, bb, ts, len(es))
		projD += roundProj
		storeD += time.Duration(ts.ns.Load())
		ratios = append(ratios, roundRaw.Seconds()/roundProj.Seconds())
		storeRatios = append(storeRatios, roundRaw.Seconds()/time.Duration(ts.ns.Load()).Seconds())
		s.Close()
	}
	n := len(es) * b.N * rounds
	b.ReportMetric(median(storeRatios), "store-ratio")
	b.ReportMetric(float64(n)/projD.Seconds(), "proj-ev/s")
	b.ReportMetric(float64(n)/rawD.Seconds(), "raw-ev/s")
	b.ReportMetric(median(ratios), "ratio")
	testenv.Target(b, "projector-sqlite-ratio", median(ratios), 0.7, false)
}

// BenchmarkProjectorPostgres: projector throughput into Postgres vs COPY of
// the same rows.
func BenchmarkProjectorPostgres(b *testing.B) {
	bb, es := loaded(b, 40, 20)
	var projD, rawD, storeD time.Duration
	var ratios, storeRatios []float64
	for range b.N * rounds {
		roundRaw := rawPostgres(b, testenv.Postgres(b), es)
		rawD += roundRaw
		s, err := postgres.Open(testenv.Postgres(b), postgres.Config{})
		if err != nil {
			b.Fatal(err)
		}
		ready(b, s)
		ts := &timedStore{ProjectionStore: s}
		roundProj := project(b, bb, ts, len(es))
		projD += roundProj
		storeD += time.Duration(ts.ns.Load())
		ratios = append(ratios, roundRaw.Seconds()/roundProj.Seconds())
		storeRatios = append(storeRatios, roundRaw.Seconds()/time.Duration(ts.ns.Load()).Seconds())
		s.Close()
	}
	n := len(es) * b.N * rounds
	b.ReportMetric(median(storeRatios), "store-ratio")
	b.ReportMetric(float64(n)/projD.Seconds(), "proj-ev/s")
	b.ReportMetric(float64(n)/rawD.Seconds(), "raw-ev/s")
	b.ReportMetric(median(ratios), "ratio")
	testenv.Target(b, "projector-postgres-ratio", median(ratios), 0.7, false)
}

// lagStore records, for every applied entry, the time from its append (Ts is
// taken at append, in ms) to the commit of its batch.
type lagStore struct {
	adapters.ProjectionStore
	mu  sync.Mutex
	lag []time.Duration
}

func (s *lagStore) ApplyBatch(ctx context.Context, consumer string, es []events.Entry, offset uint64) error {
	if err := s.ProjectionStore.ApplyBatch(ctx, consumer, es, offset); err != nil {
		return err
	}
	s.record(es)
	return nil
}

func (s *lagStore) ApplyValidated(ctx context.Context, consumer string, v validated.Entries, offset uint64) error {
	if err := applyValidated(ctx, s.ProjectionStore, consumer, v, offset); err != nil {
		return err
	}
	s.record(v.Slice())
	return nil
}

func (s *lagStore) ValidatedSelf() any { return s }

func (s *lagStore) record(es []events.Entry) {
	now := time.Now().UnixMilli()
	s.mu.Lock()
	for _, e := range es {
		s.lag = append(s.lag, time.Duration(now-e.Ts)*time.Millisecond)
	}
	s.mu.Unlock()
}

// BenchmarkProjectorLag: projector lag (append to commit) under a steady
// 20k events/s for 3 s into SQLite, opened as cmd/projector opens it
// (synchronous NORMAL: see BenchmarkProjectorSQLite).
func BenchmarkProjectorLag(b *testing.B) {
	const rate, secs = 20_000, 3
	bb := openBus(b, bus.Config{})
	l := newLedger(b, bb, bus.LedgerConfig{MaxPending: 4096})
	s, err := sqlite.Open(testenv.SQLitePath(b), sqlite.Config{Synchronous: "NORMAL"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ls := &lagStore{ProjectionStore: s}
	p := &projections.Projector{Bus: bb, Store: ls, Consumer: "lag"}
	run(b, p)
	ctx := context.Background()
	// Four publishers (one executor's handles), each paced to rate/4.
	const publishers = 4
	var sentTotal atomic.Int64
	for range b.N {
		var wg sync.WaitGroup
		for range publishers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids := make([]string, 5)
				for i := range ids {
					ids[i] = bustest.ID("lag")
				}
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				start, sent := time.Now(), 0
				for time.Since(start) < secs*time.Second {
					<-tick.C
					due := int(time.Since(start).Seconds()*rate/publishers) - sent
					for range due {
						e := events.New(time.Now().UnixMilli(), "lag", ids[sent%len(ids)], 1, events.ExecOutput, events.NewOutput(1, events.Stdout, make([]byte, 200)))
						if err := l.Append(ctx, e); err != nil {
							b.Error(err)
							return
						}
						sent++
					}
				}
				sentTotal.Add(int64(sent))
			}()
		}
		wg.Wait()
	}
	sent := int(sentTotal.Load())
	testenv.Eventually(b, 60*time.Second, func() error {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if len(ls.lag) < sent {
			return fmt.Errorf("projected %d of %d", len(ls.lag), sent)
		}
		return nil
	})
	ls.mu.Lock()
	lag := slices.Clone(ls.lag)
	ls.mu.Unlock()
	slices.Sort(lag)
	b.ReportMetric(float64(sent)/float64(secs*b.N), "ev/s")
	b.ReportMetric(float64(lag[len(lag)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lag[len(lag)*99/100].Milliseconds()), "p99-ms")
	testenv.Target(b, "projector-lag-p99-ms", float64(lag[len(lag)*99/100].Milliseconds()), 100, true)
}
