package bus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/testenv"
)

func TestStreamSeq(t *testing.T) {
	tests := []struct {
		reply string
		want  uint64
		ok    bool
	}{
		{"$JS.ACK.ALINEO_LEDGER.c1.1.4711.3.1764400000000000000.0", 4711, true},
		{"$JS.ACK._.ACCHASH.ALINEO_LEDGER.c1.2.4712.3.1764400000000000000.5", 4712, true},
		{"$JS.ACK.hub.ACCHASH.ALINEO_LEDGER.c1.2.4713.3.1764400000000000000.5.rnd", 4713, true},
		{"$JS.ACK.hub.ACCHASH.ALINEO_LEDGER.c1.2.4714.3.1764400000000000000.5.rnd.more", 4714, true},
		{"$JS.ACK.S.c1.1.0.3.1.0", 0, false},    // sequence 0
		{"$JS.ACK.S.c1.1.x.3.1.0", 0, false},    // not a number
		{"$JS.ACK.S.c1.1.12.3.1", 0, false},     // 8 tokens
		{"$JS.ACK.d.h.S.c1.1.12.3.1", 0, false}, // 10 tokens
		{"$JS.NAK.S.c1.1.12.3.1.0", 0, false},   // not an ack subject
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := streamSeq(tt.reply)
		if got != tt.want || ok != tt.ok {
			t.Errorf("streamSeq(%q) = %d, %v; want %d, %v", tt.reply, got, ok, tt.want, tt.ok)
		}
	}
}

// TestStreamSeqOfServer checks streamSeq against Metadata on the reply
// subjects a real server sends.
func TestStreamSeqOfServer(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	subj := b.cfg.SubjectPrefix + ".sbx.exec.output"
	for range 3 {
		if _, err := b.js.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := b.js.OrderedConsumer(ctx, b.cfg.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(3)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := streamSeq(m.Reply()); !ok || got != md.Sequence.Stream {
			t.Errorf("streamSeq(%q) = %d, %v; want %d", m.Reply(), got, ok, md.Sequence.Stream)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("read %d messages, want 3", n)
	}
}

// TestStallWatch checks the deadline of an ordered read's waits: it ends
// once progress stops, never less than a period after the last message, and
// it tells its own end (a stall) from its parent's.
func TestStallWatch(t *testing.T) {
	const period = 20 * time.Millisecond
	w := watchStalls(context.Background(), period)
	var last time.Time
	for range 30 { // progress for several periods
		w.progress()
		last = time.Now()
		time.Sleep(period / 4)
	}
	select {
	case <-w.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end once progress stopped")
	}
	if quiet := time.Since(last); quiet < period {
		t.Errorf("the watch ended %v after the last progress, less than its period %v", quiet, period)
	}
	if !w.stalled() {
		t.Error("stalled() = false after a stall")
	}

	parent, cancel := context.WithCancel(context.Background())
	w = watchStalls(parent, time.Hour)
	cancel()
	<-w.ctx.Done()
	if w.stalled() {
		t.Error("stalled() = true when the parent ended")
	}
	w = watchStalls(context.Background(), time.Hour)
	if w.stalled() {
		t.Error("stalled() = true on a watch stopped before its period")
	}
	if w.ctx.Err() == nil {
		t.Error("stalled() did not stop the watch")
	}
}
