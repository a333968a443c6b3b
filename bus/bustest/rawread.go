package bustest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/bus"
)

// The raw reads benchmarks measure a ledger's reads against: the messages of
// one sandbox, read with the same connection and neither decoded nor checked.

// RawDirectRead reads want messages on filter (prefix.<sandbox id>.>), the
// first of the stream's on it, with batched direct gets as fast as the
// server serves them: no headers, batches of 10,000, the first on the
// filter and the next ones on any subject (the session is all the stream
// holds after its first message, which the benchmarks make sure of),
// sparing the server its subject matching, as the bus's own read does. It
// returns the time it took. The stream must allow direct gets.
func RawDirectRead(tb testing.TB, b *bus.Bus, filter string, want int) time.Duration {
	tb.Helper()
	start := time.Now()
	nc := b.Conn()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		tb.Fatal(err)
	}
	defer sub.Unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, from := 0, uint64(1)
	for got < want {
		req := fmt.Sprintf(`{"seq":%d,"batch":10000,"no_hdr":true}`, from)
		if got == 0 {
			req = fmt.Sprintf(`{"seq":%d,"next_by_subj":%q,"batch":10000,"no_hdr":true}`, from, filter)
		}
		if err := nc.PublishRequest(jetstream.DefaultAPIPrefix+"DIRECT.GET."+b.Config().Stream, inbox, []byte(req)); err != nil {
			tb.Fatal(err)
		}
		for {
			m, err := sub.NextMsgWithContext(ctx)
			if err != nil {
				tb.Fatal(err)
			}
			if len(m.Data) == 0 && m.Header.Get("Status") != "" {
				last, err := strconv.ParseUint(m.Header.Get("Nats-Last-Sequence"), 10, 64)
				if m.Header.Get("Status") != "204" || err != nil {
					tb.Fatalf("direct get: status %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
				}
				from = last + 1
				break
			}
			got++
		}
	}
	return time.Since(start)
}

// RawOrderedRead reads want messages on filter with an ordered consumer,
// the fastest consumer of JetStream, and returns the time it took.
func RawOrderedRead(tb testing.TB, b *bus.Bus, filter string, want int) time.Duration {
	tb.Helper()
	ctx := context.Background()
	start := time.Now()
	cons, err := b.JetStream().OrderedConsumer(ctx, b.Config().Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
	})
	if err != nil {
		tb.Fatal(err)
	}
	msgs, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		tb.Fatal(err)
	}
	defer msgs.Stop()
	for range want {
		if _, err := msgs.Next(); err != nil {
			tb.Fatal(err)
		}
	}
	return time.Since(start)
}
