package events_test

import (
	"bytes"
	"encoding/json"
	"strings"
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

// BenchmarkChainHash measures the hash of a chained entry: an exec.started
// and a 1000-byte line of output, what every chained append pays per entry.
func BenchmarkChainHash(b *testing.B) {
	line := bytes.Repeat([]byte("npm WARN deprecated inflight@1.0.6: leaks memory "), 25)[:1000]
	prev := "sha256:" + strings.Repeat("ab", 32)
	for _, c := range []struct {
		name string
		e    events.Entry
	}{
		{"started", events.New(1764400000000, "ci-job", "sbx-a1", 3, events.ExecStarted,
			events.ExecStartedPayload{Seq: 3, Kind: events.KindCommand, Cmd: "npm ci"})},
		{"output-1000", events.New(1764400000000, "ci-job", "sbx-a1", 3, events.ExecOutput,
			events.NewOutput(1, events.Stdout, line))},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := events.ChainHash(c.e, prev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
