package workers_test

import (
	"context"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/internal/workers"
)

// deep uses about 12 KB of stack, as an exec's commit through a durable
// store does (its frames, its hashing): a new goroutine's stack is copied
// three times on the way.
//
//go:noinline
func deep(n int) byte {
	var frame [384]byte
	frame[n%len(frame)] = byte(n)
	if n == 0 {
		return frame[0]
	}
	return deep(n-1) + frame[n%len(frame)]
}

// BenchmarkGo runs a function that uses a deep stack, one at a time, on a
// new goroutine (go) and through Go, in turn. ratio = Go's time / go's.
func BenchmarkGo(b *testing.B) {
	ctx := context.Background()
	done := make(chan byte)
	f := func() { done <- deep(30) }
	const n = 2000
	var goNs, poolNs float64
	for b.Loop() {
		goNs += timeNs(func() {
			for range n {
				go f()
				<-done
			}
		}) / n
		poolNs += timeNs(func() {
			for range n {
				workers.Go(ctx, f)
				<-done
			}
		}) / n
	}
	b.ReportMetric(goNs/float64(b.N), "go-ns")
	b.ReportMetric(poolNs/float64(b.N), "workers-ns")
	b.ReportMetric(poolNs/goNs, "ratio")
}

func timeNs(f func()) float64 {
	start := time.Now()
	f()
	return float64(time.Since(start).Nanoseconds())
}
