package projections_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/bus/bustest"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/projections/projectiontest"
	"github.com/alineo-labs/alineo/testenv"
)

const countUpsert = `INSERT INTO bench_counts (event, n) VALUES (?, 1) ON CONFLICT (event) DO UPDATE SET n = n + 1`

func benchDB(b *testing.B) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "counts.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE bench_counts (event TEXT PRIMARY KEY, n BIGINT NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	return db
}

// countHandler is the minimal projection: a count per event name, one upsert
// per entry, exactly once through SQLHandler. Its statements run without
// ctx's cancellation, as SQLHandler.ApplyTx's doc suggests for many small
// statements on SQLite (the transaction still ends with ctx).
func countHandler(db *sql.DB) *projections.SQLHandler {
	h := &projections.SQLHandler{DB: db, Dialect: projections.SQLite, Name: "count"}
	h.ApplyTx = func(ctx context.Context, tx *sql.Tx, es []events.Entry) error {
		st, err := tx.PrepareContext(ctx, countUpsert)
		if err != nil {
			return err
		}
		defer st.Close()
		sctx := context.WithoutCancel(ctx)
		for _, e := range es {
			if _, err := st.ExecContext(sctx, string(e.Event)); err != nil {
				return err
			}
		}
		return nil
	}
	return h
}

// doneHandler closes done once want entries are committed (the end of a
// run as exact as the raw baseline's last commit).
type doneHandler struct {
	*projections.SQLHandler
	n    *atomic.Int64
	want int64
	once *sync.Once
	done chan struct{}
}

func (d doneHandler) Apply(ctx context.Context, b projections.Batch) error {
	if err := d.SQLHandler.Apply(ctx, b); err != nil {
		return err
	}
	if d.n.Add(int64(len(b.Entries))) >= d.want {
		d.once.Do(func() { close(d.done) })
	}
	return nil
}

// rawCounts applies the same upserts to db directly, in transactions of
// DefaultBatchSize entries: the baseline.
func rawCounts(b *testing.B, db *sql.DB, es []events.Entry) time.Duration {
	start := time.Now()
	for lo := 0; lo < len(es); lo += projections.DefaultBatchSize {
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		st, err := tx.Prepare(countUpsert)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range es[lo:min(lo+projections.DefaultBatchSize, len(es))] {
			if _, err := st.Exec(string(e.Event)); err != nil {
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

// BenchmarkCountProjectionSQLite: the minimal projection (count per event
// name into SQLite, through Runtime and SQLHandler) against a raw bulk
// application of the same upserts in the same batch size. ratio = raw time /
// projection time (target ≥ 0.7), median of rounds. read+insert-ratio
// compares with reading the stream raw (an ordered consumer, no decoding)
// and then inserting: what is left is the runtime's own cost, since on a
// loaded machine the JetStream read alone is slower than these upserts.
// cpu-floor-ratio is the best ratio any projection could reach here: the
// raw read and the raw upserts each take their CPU time (this process runs
// the NATS server too), and the two cannot finish before that CPU time over
// the cores nor before the slower of them alone; the target's line names it
// as the floor the ratio is judged against. cpu-ratio = the CPU time
// of the raw read and upserts / the projection's: what the runtime itself
// costs.
func BenchmarkCountProjectionSQLite(b *testing.B) {
	bb := projectiontest.Bus(b)
	es := projectiontest.History(21, 400, 12) // ~25k events
	projectiontest.Publish(b, bb, es)
	var ratios, pipe, floor, cpu []float64
	var projD, rawD, readD time.Duration
	for i := range b.N * rounds {
		before := cpuTime(b)
		rawD = rawCounts(b, benchDB(b), es)
		readD = rawRead(b, bb, len(es))
		rawCPU := cpuTime(b) - before // the raw upserts' and read's
		best := max(rawD, readD, rawCPU/time.Duration(runtime.GOMAXPROCS(0)))
		floor = append(floor, rawD.Seconds()/best.Seconds())
		done := make(chan struct{})
		h := doneHandler{SQLHandler: countHandler(benchDB(b)), n: new(atomic.Int64), want: int64(len(es)), once: new(sync.Once), done: done}
		r := &projections.Runtime{Bus: bb, Handler: h, Consumer: fmt.Sprintf("count-%d", i)}
		before = cpuTime(b)
		start := time.Now()
		stop := projectiontest.Start(b, r)
		select {
		case <-done:
		case <-time.After(120 * time.Second):
			b.Fatalf("projection stuck at %+v", r.Progress())
		}
		projD = time.Since(start)
		cpu = append(cpu, rawCPU.Seconds()/(cpuTime(b)-before).Seconds())
		if err := stop(); err != nil {
			b.Fatal(err)
		}
		ratios = append(ratios, rawD.Seconds()/projD.Seconds())
		pipe = append(pipe, (rawD+readD).Seconds()/projD.Seconds())
	}
	b.ReportMetric(float64(len(es))/projD.Seconds(), "proj-ev/s")
	b.ReportMetric(float64(len(es))/rawD.Seconds(), "raw-ev/s")
	b.ReportMetric(float64(len(es))/readD.Seconds(), "read-ev/s")
	// The same work done raw, one after the other: read the stream, then insert.
	b.ReportMetric(median(pipe), "read+insert-ratio")
	b.ReportMetric(median(floor), "cpu-floor-ratio")
	b.ReportMetric(median(cpu), "cpu-ratio")
	b.ReportMetric(median(ratios), "ratio")
	testenv.TargetFloor(b, "count-projection-ratio", median(ratios), 0.7, median(floor), false)
}

// BenchmarkRebuild1M: rebuild throughput of 1M events (100k with -short)
// into the count projection, against a raw ordered-consumer read of the same
// stream (ratio = read time / rebuild time).
func BenchmarkRebuild1M(b *testing.B) {
	sandboxes := 10_000 // × ~100 events
	if testing.Short() {
		sandboxes = 1000
	}
	bb := projectiontest.Bus(b)
	es := projectiontest.History(22, sandboxes, 24)
	projectiontest.Publish(b, bb, es)
	b.ResetTimer()
	var rebuildD, readD time.Duration
	for range b.N {
		readD = rawRead(b, bb, len(es))
		db := benchDB(b)
		start := time.Now()
		st, err := projections.RebuildHandler(context.Background(), bb, countHandler(db), projections.RebuildOptions{Key: "rebuild"})
		if err != nil {
			b.Fatal(err)
		}
		rebuildD = time.Since(start)
		if st.Applied != uint64(len(es)) {
			b.Fatalf("rebuilt %d of %d", st.Applied, len(es))
		}
	}
	b.ReportMetric(float64(len(es)), "events")
	b.ReportMetric(float64(len(es))/rebuildD.Seconds(), "rebuild-ev/s")
	b.ReportMetric(float64(len(es))/readD.Seconds(), "read-ev/s")
	b.ReportMetric(readD.Seconds()/rebuildD.Seconds(), "ratio")
}

// cpuTime is the CPU time this process has used (user and system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rawRead reads n ledger messages with an ordered consumer, decoding nothing.
// It reads unfiltered, as the runtime does (a wildcard filter costs the
// server a subject match per message), passing over fence messages.
func rawRead(b *testing.B, bb *bus.Bus, n int) time.Duration {
	ctx := context.Background()
	start := time.Now()
	cons, err := bb.JetStream().OrderedConsumer(ctx, bb.Config().Stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	msgs, err := cons.Messages(jetstream.PullMaxMessages(4 * projections.DefaultBatchSize))
	if err != nil {
		b.Fatal(err)
	}
	defer msgs.Stop()
	fence := bb.Config().FencePrefix + "."
	for read := 0; read < n; {
		m, err := msgs.Next()
		if err != nil {
			b.Fatal(err)
		}
		if !strings.HasPrefix(m.Subject(), fence) {
			read++
		}
	}
	return time.Since(start)
}

// slowStore is a handler whose store is not CPU-bound: each batch waits
// perEntry per entry (a remote database's round trips), holding no CPU, so
// partitions show how the runtime scales when the store is the bottleneck,
// which a 2-core machine could not show against a CPU-bound local SQLite.
type slowStore struct {
	perEntry time.Duration
	mu       sync.Mutex
	offsets  map[string]uint64
	n        atomic.Int64
	want     int64
	once     sync.Once
	done     chan struct{}
}

func (s *slowStore) Apply(ctx context.Context, b projections.Batch) error {
	select {
	case <-time.After(time.Duration(len(b.Entries)) * s.perEntry):
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	s.offsets[b.Key] = b.Offset
	s.mu.Unlock()
	if s.n.Add(int64(len(b.Entries))) >= s.want {
		s.once.Do(func() { close(s.done) })
	}
	return nil
}

func (s *slowStore) Offset(_ context.Context, key string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offsets[key], nil
}

// BenchmarkPartitionScaling: 1, 2 and 4 partitioned workers sharing one
// stream into a store that is not CPU-bound (200 µs of waiting per entry, a remote database; see
// slowStore). x2 = time of 1 worker / time of 2 (target ≥ 1.7), x4 = time of
// 1 / time of 4 (target ≥ 3). Partitions are chosen by the runtime, so every
// worker still reads (not decodes) the whole stream: scaling ends where
// reading the stream N times costs more CPU than the machine has.
func BenchmarkPartitionScaling(b *testing.B) {
	bb := projectiontest.Bus(b)
	es := projectiontest.History(23, 200, 8) // ~8.5k events
	projectiontest.Publish(b, bb, es)
	run := func(i, n int) time.Duration {
		s := &slowStore{perEntry: 200 * time.Microsecond, offsets: map[string]uint64{}, want: int64(len(es)), done: make(chan struct{})}
		start := time.Now()
		for k := range n {
			r := &projections.Runtime{Bus: bb, Handler: s, Consumer: fmt.Sprintf("scale-%d-%d", i, n), BatchSize: 250,
				Partition: projections.Partitioning{N: n, Index: k}}
			if n == 1 {
				r.Partition = projections.Partitioning{}
			}
			projectiontest.Start(b, r)
		}
		select {
		case <-s.done:
		case <-time.After(120 * time.Second):
			b.Fatalf("%d workers: %d of %d applied", n, s.n.Load(), len(es))
		}
		return time.Since(start)
	}
	var x2, x4 []float64
	var d1 time.Duration
	for i := range b.N * 3 {
		d1 = run(i, 1)
		d2, d4 := run(i, 2), run(i, 4)
		x2 = append(x2, d1.Seconds()/d2.Seconds())
		x4 = append(x4, d1.Seconds()/d4.Seconds())
	}
	b.ReportMetric(float64(len(es))/d1.Seconds(), "1worker-ev/s")
	b.ReportMetric(median(x2), "x2-ratio")
	b.ReportMetric(median(x4), "x4-ratio")
	testenv.Target(b, "x2-ratio", median(x2), 1.7, false)
	testenv.Target(b, "x4-ratio", median(x4), 3, false)
}

// lagHandler records, for every committed entry, the time from its append
// (Ts, taken just before Append, in ms) to the commit of its batch.
type lagHandler struct {
	*projections.SQLHandler
	mu  sync.Mutex
	lag []time.Duration
}

func (h *lagHandler) Apply(ctx context.Context, b projections.Batch) error {
	if err := h.SQLHandler.Apply(ctx, b); err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	h.mu.Lock()
	for _, e := range b.Entries {
		h.lag = append(h.lag, time.Duration(now-e.Ts)*time.Millisecond)
	}
	h.mu.Unlock()
	return nil
}

func (h *lagHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.lag)
}

// BenchmarkCountProjectionLag: lag (append to commit) of the minimal count
// projection into SQLite under a steady 20k events/s for 3 s, appended by
// four goroutines through one bus.Ledger. Target p99 ≤ 100 ms.
func BenchmarkCountProjectionLag(b *testing.B) {
	const rate, secs, publishers = 20_000, 3, 4
	bb := projectiontest.Bus(b)
	l, err := bus.NewLedger(bb, bus.LedgerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	h := &lagHandler{SQLHandler: countHandler(benchDB(b))}
	projectiontest.Start(b, &projections.Runtime{Bus: bb, Handler: h, Consumer: "count-lag"})
	ctx := context.Background()
	var sentTotal atomic.Int64
	for range b.N {
		var wg sync.WaitGroup
		for p := range publishers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sentTotal.Add(int64(paced(ctx, b, l, fmt.Sprintf("lag%d", p), rate/publishers, secs*time.Second)))
			}()
		}
		wg.Wait()
	}
	sent := int(sentTotal.Load())
	deadline := time.Now().Add(60 * time.Second)
	for h.count() < sent {
		if time.Now().After(deadline) {
			b.Fatalf("projected %d of %d", h.count(), sent)
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.mu.Lock()
	lag := slices.Clone(h.lag)
	h.mu.Unlock()
	slices.Sort(lag)
	p50, p99 := lag[len(lag)/2], lag[len(lag)*99/100]
	b.ReportMetric(float64(sent)/float64(secs*b.N), "ev/s")
	b.ReportMetric(float64(p50.Milliseconds()), "p50-ms")
	b.ReportMetric(float64(p99.Milliseconds()), "p99-ms")
	testenv.Target(b, "count-lag-p99-ms", float64(p99.Milliseconds()), 100, true)
}

// paced appends exec.output entries of five sandboxes at rate per second
// for d, and returns how many it appended.
func paced(ctx context.Context, b *testing.B, l *bus.Ledger, name string, rate int, d time.Duration) int {
	ids := make([]string, 5)
	for i := range ids {
		ids[i] = bustest.ID(name)
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	start, sent := time.Now(), 0
	for time.Since(start) < d {
		<-tick.C
		due := int(time.Since(start).Seconds()*float64(rate)) - sent
		for range due {
			e := events.New(time.Now().UnixMilli(), name, ids[sent%len(ids)], 1, events.ExecOutput, events.NewOutput(1, events.Stdout, make([]byte, 200)))
			if err := l.Append(ctx, e); err != nil {
				b.Error(err)
				return sent
			}
			sent++
		}
	}
	return sent
}
