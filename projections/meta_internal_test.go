package projections

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

func TestParseAckReply(t *testing.T) {
	for _, tc := range []struct {
		reply string
		want  meta
		ok    bool
	}{
		{"$JS.ACK.ledger.proj.1.42.7.1764400000000000000.99", meta{stream: 42, consumer: 7, pending: 99}, true},
		{"$JS.ACK._.ACCHASH.ledger.proj.2.42.7.1764400000000000000.0", meta{stream: 42, consumer: 7}, true},
		{"$JS.ACK.dom.ACCHASH.ledger.proj.2.42.7.1764400000000000000.5.rand", meta{stream: 42, consumer: 7, pending: 5}, true},
		{"$JS.ACK.ledger.proj.1.42.7.1764400000000000000", meta{}, false},    // 8 tokens
		{"$JS.ACK.a.ledger.proj.1.42.7.1.2", meta{}, false},                  // 10 tokens
		{"$JS.ACK.d.h.ledger.proj.2.42.7.1.5.r.extra", meta{}, false},        // 13 tokens
		{"$JS.ACK.ledger.proj.1.4x2.7.1.99", meta{}, false},                  // not a number
		{"$JS.ACK.ledger.proj.1.42.7.1.", meta{}, false},                     // empty number
		{"$JS.ACK.ledger.proj.1.42.7.1.99999999999999999999", meta{}, false}, // 20 digits
		{"$JS.NAK.ledger.proj.1.42.7.1.99", meta{}, false},                   // not an ack subject
		{"", meta{}, false},
	} {
		got, ok := parseAckReply(tc.reply)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseAckReply(%q) = %+v, %v; want %+v, %v", tc.reply, got, ok, tc.want, tc.ok)
		}
	}
}

// TestMetadataMatchesJetStream: on the server's own deliveries, metadata
// reads what jetstream's Msg.Metadata does.
func TestMetadataMatchesJetStream(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 20 {
		if err := l.Append(ctx, events.New(int64(i+1), "n", "sb-meta", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte("x")))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cons, err := b.JetStream().CreateOrUpdateConsumer(ctx, b.Config().Stream, jetstream.ConsumerConfig{Durable: "meta", AckPolicy: jetstream.AckAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(30, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		n++
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		want := meta{stream: md.Sequence.Stream, consumer: md.Sequence.Consumer, pending: md.NumPending}
		fast, ok := parseAckReply(m.Reply())
		if !ok || fast != want {
			t.Fatalf("parseAckReply(%q) = %+v, %v; want %+v", m.Reply(), fast, ok, want)
		}
		if got, err := metadata(m); err != nil || got != want {
			t.Fatalf("metadata = %+v, %v; want %+v", got, err, want)
		}
	}
	if n < 20 {
		t.Fatalf("fetched %d messages, want at least 20 (%v)", n, batch.Error())
	}
}

// oldDecode is Decode as it was: bus.DecodeValidMsg, then the subject
// parsed again and compared.
func oldDecode(prefix, subject string, data []byte, seq uint64) (events.Entry, error) {
	e, err := bus.DecodeValidMsg(data, seq)
	if err != nil {
		return events.Entry{}, err
	}
	id, ev, err := events.ParseSubject(prefix, subject)
	if err != nil {
		return events.Entry{}, &events.ValidationError{Field: "subject", Reason: "is not a ledger subject", Err: err}
	}
	if id != e.SandboxID || ev != e.Event {
		return events.Entry{}, &events.ValidationError{Field: "subject",
			Reason: fmt.Sprintf("%q does not match entry %s/%s", subject, e.SandboxID, e.Event)}
	}
	e.Seq = seq
	return e, nil
}

// FuzzDecodeParsed: the runtime's decode (the subject parsed once, a
// Decoder kept across messages) gives what the old Decode gave.
func FuzzDecodeParsed(f *testing.F) {
	good, _ := events.Marshal(events.New(1, "n", "sb", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte("hi"))))
	other, _ := events.Marshal(events.New(1, "m", "sc", 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Cmd: "ls"}))
	f.Add("alineo.ledger.sb.exec.output", good, other)
	f.Add("alineo.ledger.sb.exec.started", good, good)
	f.Add("alineo.ledger.sc.exec.started", other, good)
	f.Add("alineo.ledger.x", []byte("{}"), good)
	f.Add("alineo.ledger.sb.exec.output", []byte("\xff"), other)
	f.Fuzz(func(t *testing.T, subject string, data, prev []byte) {
		var dec bus.Decoder
		for _, msg := range [][]byte{prev, data, data} {
			id, ev, perr := events.ParseSubject("alineo.ledger", subject)
			got, err := decodeParsed(&dec, subject, id, ev, perr, msg, 7)
			want, werr := oldDecode("alineo.ledger", subject, msg, 7)
			if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
				t.Fatalf("decode %q %q: error %v, old %v", subject, msg, err, werr)
			}
			if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
				t.Fatalf("decode %q %q = %#v, old %#v", subject, msg, got, want)
			}
		}
	})
}
