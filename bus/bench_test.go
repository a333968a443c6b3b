package bus_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/bus/bustest"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// mix returns sandboxes sessions of the realistic mix: created, then execs of
// started, 20 outputs of ~200 B, completed.
func mix(sandboxes, execs int) []events.Entry {
	var es []events.Entry
	for i := range sandboxes {
		id := bustest.ID(fmt.Sprintf("bench%d", i))
		all := bustest.Entries("bench", id, execs, 20)
		es = append(es, all[:len(all)-2]...) // without checkpoint and close
	}
	return es
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

// rounds is how many times a benchmark alternates its baseline and its
// subject; it reports the median of the per-round ratios, which is far less
// noisy on a shared machine than one long run of each.
const rounds = 3

// appendRounds is rounds for BenchmarkAppend, whose rounds are short (about
// 0.2 s each) and so the noisiest.
const appendRounds = 5

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkAppend: bus append throughput from one executor (realistic mix,
// Append then the barrier) vs raw JetStream async publish of the same bytes on
// the same subjects, and vs the direct SQLite adapter's per-event Append.
func BenchmarkAppend(b *testing.B) {
	es := mix(100, 20) // 100 × (1 + 20×22) = 44,100 events
	ctx := context.Background()
	var busD, rawD, sqlD time.Duration
	var ratios []float64
	const sqlN = 3000
	for range b.N * appendRounds {
		var roundRaw, roundBus time.Duration
		// Raw JetStream async publish, same payloads, window 4096.
		{
			bb := openEmbedded(b, bus.Config{})
			js, err := jetstream.New(bb.Conn(), jetstream.WithPublishAsyncMaxPending(4096))
			if err != nil {
				b.Fatal(err)
			}
			subjects := make([]string, len(es))
			datas := make([][]byte, len(es))
			for i, e := range es {
				subjects[i], _ = events.Subject(bb.Config().SubjectPrefix, e.SandboxID, e.Event)
				datas[i], _ = events.Marshal(e)
			}
			start := time.Now()
			for i := range es {
				if _, err := js.PublishAsync(subjects[i], datas[i]); err != nil {
					b.Fatal(err)
				}
			}
			<-js.PublishAsyncComplete()
			roundRaw = time.Since(start)
		}
		// The bus ledger.
		{
			bb := openEmbedded(b, bus.Config{})
			l, err := bus.NewLedger(bb, bus.LedgerConfig{MaxPending: 4096})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			for _, e := range es {
				if err := l.Append(ctx, e); err != nil {
					b.Fatal(err)
				}
			}
			if err := l.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			roundBus = time.Since(start)
			l.Close()
		}
		rawD, busD = rawD+roundRaw, busD+roundBus
		ratios = append(ratios, roundRaw.Seconds()/roundBus.Seconds())
		if len(ratios) > b.N {
			continue // SQLite once per b.N: it is 10-20× slower and stable
		}
		// Direct SQLite, one Append per event.
		{
			s, err := sqlite.Open(testenv.SQLitePath(b), sqlite.Config{})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			for _, e := range es[:sqlN] {
				if err := s.Append(ctx, e); err != nil {
					b.Fatal(err)
				}
			}
			sqlD += time.Since(start)
			s.Close()
		}
	}
	busR, rawR, sqlR := rate(len(es)*b.N*appendRounds, busD), rate(len(es)*b.N*appendRounds, rawD), rate(sqlN*b.N, sqlD)
	b.ReportMetric(busR, "bus-ev/s")
	b.ReportMetric(rawR, "raw-ev/s")
	b.ReportMetric(sqlR, "sqlite-ev/s")
	b.ReportMetric(median(ratios), "ratio-vs-raw")
	b.ReportMetric(busR/sqlR, "ratio-vs-sqlite")
}

// BenchmarkReplay: ReadAll of a 100k-event sandbox vs a raw ordered-consumer
// read of the same subject.
func BenchmarkReplay(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	bb := openEmbedded(b, bus.Config{})
	l, err := bus.NewLedger(bb, bus.LedgerConfig{MaxPending: 8192})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	id := bustest.ID("replay")
	es := bustest.Entries("big", id, n/22+1, 20)[:n]
	for _, e := range es {
		if err := l.Append(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	var busD, rawD time.Duration
	var ratios []float64
	for range b.N * rounds {
		start := time.Now()
		cons, err := bb.JetStream().OrderedConsumer(ctx, bb.Config().Stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{bb.Config().SubjectPrefix + "." + id + ".>"},
		})
		if err != nil {
			b.Fatal(err)
		}
		msgs, err := cons.Messages(jetstream.PullMaxMessages(1024))
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for {
			m, err := msgs.Next()
			if err != nil {
				b.Fatal(err)
			}
			got++
			md, _ := m.Metadata()
			if md.NumPending == 0 {
				break
			}
		}
		msgs.Stop()
		roundRaw := time.Since(start)
		rawD += roundRaw
		if got != n {
			b.Fatalf("raw read %d, want %d", got, n)
		}
		start = time.Now()
		all, err := l.ReadAll(ctx, "big", id)
		if err != nil {
			b.Fatal(err)
		}
		roundBus := time.Since(start)
		busD += roundBus
		ratios = append(ratios, roundRaw.Seconds()/roundBus.Seconds())
		if len(all) != n {
			b.Fatalf("ReadAll = %d, want %d", len(all), n)
		}
	}
	busR, rawR := rate(n*b.N*rounds, busD), rate(n*b.N*rounds, rawD)
	b.ReportMetric(busR, "replay-ev/s")
	b.ReportMetric(rawR, "raw-ev/s")
	b.ReportMetric(median(ratios), "ratio")
}

// BenchmarkSubscribeLatency: publish-to-receipt latency of a live subscriber,
// 2,000 events at ~5k/s.
func BenchmarkSubscribeLatency(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bb := openEmbedded(b, bus.Config{})
	l, err := bus.NewLedger(bb, bus.LedgerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	const n = 2000
	var lat []time.Duration
	for range b.N {
		id := bustest.ID("live")
		sub, err := bb.Subscribe(ctx, bus.Filter{SandboxID: id})
		if err != nil {
			b.Fatal(err)
		}
		sent := make([]atomic.Int64, n) // UnixNano
		done := make(chan struct{})
		go func() {
			defer close(done)
			i := 0
			for e, err := range sub {
				if err != nil {
					return
				}
				_ = e
				lat = append(lat, time.Duration(time.Now().UnixNano()-sent[i].Load()))
				i++
				if i == n {
					return
				}
			}
		}()
		es := bustest.Entries("live", id, n/22+1, 20)[:n]
		tick := time.NewTicker(200 * time.Microsecond)
		for i, e := range es {
			<-tick.C
			sent[i].Store(time.Now().UnixNano())
			if err := l.Append(ctx, e); err != nil {
				b.Fatal(err)
			}
		}
		tick.Stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			b.Fatalf("subscriber received %d of %d", len(lat), n)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
