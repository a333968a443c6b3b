package jobs_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/testenv"
)

// benchJobs is the job count of BenchmarkFleet: 1000, as the issue asks (about
// three minutes for both fleets on two cores); ALINEO_BENCH_JOBS sets another
// count for a quicker run.
func benchJobs() int {
	if n, err := strconv.Atoi(os.Getenv("ALINEO_BENCH_JOBS")); err == nil && n > 0 {
		return n
	}
	return 1000
}

// runFleet submits n short jobs and runs them on `size` in-process workers
// (each with its own bus ledger and SDK client); it returns the wall time
// until every job is acknowledged.
func runFleet(b *testing.B, natsURL, sandboxURL string, stream string, n, size int) time.Duration {
	ctx := context.Background()
	bb, err := bus.Open(ctx, bus.Config{URL: natsURL})
	if err != nil {
		b.Fatal(err)
	}
	defer bb.Close()
	q, err := jobs.OpenQueue(ctx, bb.JetStream(), jobs.QueueConfig{Stream: stream, Subject: "bench." + stream, Bucket: stream + "_STATUS", MaxDeliver: 3})
	if err != nil {
		b.Fatal(err)
	}
	spec, err := jobs.Parse([]byte(`{"name":"short","image":"host","steps":[{"exec":{"command":"echo hi"}}]}`))
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, n)
	for i := range n {
		st, err := q.Submit(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = st.ID
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range size {
		l, err := bus.NewLedger(bb, bus.LedgerConfig{})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		client, err := alineo.New(alineo.Options{BaseURL: sandboxURL, Adapter: l})
		if err != nil {
			b.Fatal(err)
		}
		w := &jobs.Worker{Queue: q, Client: client, Ledger: l, ID: fmt.Sprintf("w%d", i)}
		wg.Go(func() { _ = w.Run(wctx) })
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		p, err := q.Pending(ctx)
		if err == nil && p == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("fleet of %d: %d jobs still pending", size, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	for _, id := range ids {
		st, err := q.Status(ctx, id)
		if err != nil || st.State != jobs.StateSucceeded {
			b.Fatalf("job %s: %+v, %v", id, st, err)
		}
	}
	return elapsed
}

// BenchmarkFleet: the same batch of short jobs (one sandbox and one exec
// each) on one executor and on a fleet of four; reports jobs/s of each and
// the throughput ratio.
func BenchmarkFleet(b *testing.B) {
	natsURL, sandboxURL := testenv.NATS(b), testenv.Sandboxd(b)
	n := benchJobs()
	for range b.N {
		one := runFleet(b, natsURL, sandboxURL, "BENCH_ONE", n, 1)
		four := runFleet(b, natsURL, sandboxURL, "BENCH_FOUR", n, 4)
		b.ReportMetric(float64(n), "jobs")
		b.ReportMetric(float64(n)/one.Seconds(), "1-exec-jobs/s")
		b.ReportMetric(float64(n)/four.Seconds(), "4-exec-jobs/s")
		b.ReportMetric(one.Seconds()/four.Seconds(), "ratio")
	}
}
