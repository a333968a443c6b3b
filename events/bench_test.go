package events_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/events"
)

// BenchmarkValidateOutput measures validation of a typical exec.output entry
// (200 bytes of text) against one json.Valid pass over the same payload, what
// any check that the payload is JSON must at least do with encoding/json.
// "ratio" is validate / json.Valid: below 1, the fast path (payloadFits) beats it.
func BenchmarkValidateOutput(b *testing.B) {
	e := events.New(1764400000000, "ci-job", "sbx-a1", 3, events.ExecOutput,
		events.NewOutput(3, events.Stdout, bytes.Repeat([]byte("0123456789abcdefghij"), 10)))
	const n = 100_000
	timeIt := func(f func()) time.Duration {
		start := time.Now()
		for range n {
			f()
		}
		return time.Since(start)
	}
	for range b.N {
		raw := timeIt(func() { json.Valid(e.Payload) })
		val := timeIt(func() {
			if err := events.Validate(e); err != nil {
				b.Fatal(err)
			}
		})
		b.ReportMetric(float64(val.Nanoseconds())/n, "validate-ns/op")
		b.ReportMetric(float64(val)/float64(raw), "ratio")
	}
}
