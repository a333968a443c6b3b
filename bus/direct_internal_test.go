package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// apiCounter counts the JetStream API requests a test's reads make, by
// subject: a subscription of its own sees a copy of each.
type apiCounter struct {
	mu   sync.Mutex
	subs map[string][]string // subject → request bodies
}

func countAPI(t *testing.T, nc *nats.Conn, subjects ...string) *apiCounter {
	t.Helper()
	c := &apiCounter{subs: map[string][]string{}}
	for _, s := range subjects {
		sub, err := nc.Subscribe(s, func(m *nats.Msg) {
			c.mu.Lock()
			c.subs[m.Subject] = append(c.subs[m.Subject], string(m.Data))
			c.mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// n returns how many requests went to subjects starting with prefix.
func (c *apiCounter) n(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for s, bodies := range c.subs {
		if strings.HasPrefix(s, prefix) {
			n += len(bodies)
		}
	}
	return n
}

// wide returns how many direct gets asked for a batch without a subject
// filter.
func (c *apiCounter) wide() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for s, bodies := range c.subs {
		for _, body := range bodies {
			if strings.HasPrefix(s, "$JS.API.DIRECT.GET.") && strings.Contains(body, `"batch"`) && !strings.Contains(body, "next_by_subj") {
				n++
			}
		}
	}
	return n
}

func (c *apiCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.subs)
}

// settled waits until the counter has seen every request made so far (its
// subscription runs on another connection).
func (c *apiCounter) settled(t *testing.T, nc *nats.Conn) {
	t.Helper()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// publishRaw publishes msgs to b's stream and waits for their
// acknowledgements.
func publishRaw(t *testing.T, b *Bus, msgs []*nats.Msg) {
	t.Helper()
	// At most window publishes are unacknowledged at a time: beyond the
	// async publisher's limit (4000) a publish waits for acks only its
	// stall wait (200 ms), less than a slow run (the race detector on a
	// busy machine) can take, and then fails.
	const window = 1000
	for i, m := range msgs {
		if _, err := b.js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
		if (i+1)%window != 0 && i+1 != len(msgs) {
			continue
		}
		select {
		case <-b.js.PublishAsyncComplete():
		case <-time.After(30 * time.Second):
			t.Fatal("publishes not acknowledged after 30 s")
		}
	}
}

// entryMsg is e as the ledger publishes it (subject, session name header,
// payload), without the writer's fence headers.
func entryMsg(t *testing.T, b *Bus, e events.Entry) *nats.Msg {
	t.Helper()
	subj, err := events.Subject(b.cfg.SubjectPrefix, e.SandboxID, e.Event)
	if err != nil {
		t.Fatal(err)
	}
	data, err := events.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return &nats.Msg{Subject: subj, Data: data, Header: nats.Header{HeaderName: {url.PathEscape(e.Name)}}}
}

func output(name, id string, step int) events.Entry {
	return events.New(int64(step), name, id, step, events.ExecOutput, events.NewOutput(step, events.Stdout, []byte(fmt.Sprintf("out %s %d\n", name, step))))
}

// sameRead fails t unless got and want read the same entries, in the same
// order, with the same first sequence.
func sameRead(t *testing.T, got, want readResult) {
	t.Helper()
	if got.firstSeq != want.firstSeq {
		t.Errorf("firstSeq = %d, want %d", got.firstSeq, want.firstSeq)
	}
	if len(got.entries) != len(want.entries) {
		t.Fatalf("read %d entries, want %d", len(got.entries), len(want.entries))
	}
	for i := range want.entries {
		g, w := got.entries[i], want.entries[i]
		if g.Seq != w.Seq || g.Name != w.Name || g.SandboxID != w.SandboxID || g.Event != w.Event || g.Ts != w.Ts ||
			g.StepIndex != w.StepIndex || !bytes.Equal(g.Payload, w.Payload) {
			t.Fatalf("entry %d = %+v, want %+v", i, g, w)
		}
	}
}

// scanned runs read on a scan's readResult and returns what the scan
// handed on, with its first sequence: a scan holds at most a batch.
func scanned(t *testing.T, read func(*readResult) error) readResult {
	t.Helper()
	var got readResult
	most := 0
	res := readResult{emit: func(e *events.Entry) error {
		got.entries = append(got.entries, *e)
		return nil
	}}
	hold := res.emit
	res.emit = func(e *events.Entry) error {
		most = max(most, len(res.entries))
		return hold(e)
	}
	if err := read(&res); err != nil {
		t.Fatalf("scan: %v", err)
	}
	if err := res.flush(); err != nil {
		t.Fatalf("scan: %v", err)
	}
	if len(res.entries) != 0 {
		t.Errorf("a flushed scan holds %d entries", len(res.entries))
	}
	if most > directBatchMax {
		t.Errorf("a scan held %d entries at once, want at most a batch (%d)", most, directBatchMax)
	}
	got.firstSeq = res.firstSeq
	return got
}

func openInternal(t *testing.T, cfg Config) *Bus {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = testenv.NATS(t)
	}
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestReadDirectSameAsOrdered: on one stream, the batched direct-get read
// returns exactly what the ordered-consumer read returns, whatever the
// session's messages are mixed with: its sandbox's fence, another sandbox's
// fence and messages (a few, then many in turn), another session of the
// same sandbox, an undecodable message; and a session of several batches
// with a few foreign messages is read with direct gets only, no consumer.
func TestReadDirectSameAsOrdered(t *testing.T) {
	var logs bytes.Buffer
	b := openInternal(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !b.direct {
		t.Fatal("a new stream does not allow direct gets")
	}
	ctx := context.Background()
	const x, y = "sbx-x", "sbx-y"
	var msgs []*nats.Msg
	step := 0
	add := func(name, id string) { step++; msgs = append(msgs, entryMsg(t, b, output(name, id, step))) }
	fence := func(id string) {
		msgs = append(msgs, &nats.Msg{Subject: b.cfg.FencePrefix + "." + id, Data: []byte("fence")})
	}
	fence(x)
	for range 6000 { // dense: batches of 1000, 4000, then more
		add("a", x)
	}
	fence(y)
	add("b", y)
	for range 3000 { // another session of the sandbox, in the same subjects
		add("a", x)
		add("b", x)
	}
	xout, _ := events.Subject(b.cfg.SubjectPrefix, x, events.ExecOutput)
	msgs = append(msgs, &nats.Msg{Subject: xout, Data: []byte("{not json"), Header: nats.Header{HeaderName: {"a"}}})
	for range 2000 { // dense again
		add("a", x)
	}
	publishRaw(t, b, msgs)
	filter, _ := events.SandboxSubject(b.cfg.SubjectPrefix, x)
	api := countAPI(t, b.nc, "$JS.API.DIRECT.GET.>", "$JS.API.CONSUMER.>")

	for _, name := range []string{"a", "b", ""} {
		api.settled(t, b.nc)
		api.reset()
		got, err := b.read(ctx, filter, name)
		if err != nil {
			t.Fatalf("read %q: %v", name, err)
		}
		api.settled(t, b.nc)
		if n := api.n("$JS.API.CONSUMER.CREATE."); n != 0 {
			t.Errorf("read %q of a dense session made %d consumer requests, want 0 (direct gets only)", name, n)
		}
		if n := api.n("$JS.API.DIRECT.GET."); n < 4 {
			t.Errorf("read %q made %d direct get requests, want several batches", name, n)
		}
		last, _, err := b.lastSeq(ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		var want readResult
		if err := b.readOrdered(ctx, &want, filter, name, 1, last); err != nil {
			t.Fatalf("ordered read %q: %v", name, err)
		}
		sameRead(t, got, want)
		if wantN := map[string]int{"a": 11000, "b": 3000, "": 14000}[name]; len(got.entries) != wantN {
			t.Errorf("read %q: %d entries, want %d", name, len(got.entries), wantN)
		}
		// A scan hands the same entries, batch by batch, by direct gets
		// and by the ordered consumer.
		sameRead(t, scanned(t, func(res *readResult) error { return b.readInto(ctx, res, filter, name) }), want)
		sameRead(t, scanned(t, func(res *readResult) error { return b.readOrdered(ctx, res, filter, name, 1, last) }), want)
	}
	// Every read and scan decodes it, but the ordered ones of session b,
	// which skip it by its header: 6 direct, 4 ordered.
	if n := strings.Count(logs.String(), "skipping undecodable"); n != 10 {
		t.Errorf("%d warnings of an undecodable message, want 10:\n%s", n, logs.String())
	}

	// Sandbox y's messages, interleaved with x's over many batches (two of
	// y's for each of x's): read with direct gets until the interleaving,
	// then an ordered consumer.
	msgs = msgs[:0]
	for range 12000 {
		add("a", x)
		add("c", y)
		add("c", y)
	}
	publishRaw(t, b, msgs)
	api.settled(t, b.nc)
	api.reset()
	got, err := b.read(ctx, filter, "a")
	if err != nil {
		t.Fatal(err)
	}
	api.settled(t, b.nc)
	if api.n("$JS.API.CONSUMER.CREATE.") == 0 {
		t.Error("an interleaved session was read without an ordered consumer")
	}
	last, _, _ := b.lastSeq(ctx, filter)
	var want readResult
	if err := b.readOrdered(ctx, &want, filter, "a", 1, last); err != nil {
		t.Fatal(err)
	}
	sameRead(t, got, want)
	if len(got.entries) != 23000 {
		t.Errorf("read %d entries, want 23000", len(got.entries))
	}
}

// TestReadDirectPastTheEnd: a read asked up to a sequence the stream no
// longer holds (its messages deleted or expired after the leader gave it)
// asks the leader again when the batches stop short and finishes with what
// exists.
func TestReadDirectPastTheEnd(t *testing.T) {
	b := openInternal(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var msgs []*nats.Msg
	for i := range 1500 {
		msgs = append(msgs, entryMsg(t, b, output("a", "sbx", i+1)))
	}
	publishRaw(t, b, msgs)
	filter, _ := events.SandboxSubject(b.cfg.SubjectPrefix, "sbx")
	var res readResult
	if err := b.readDirect(ctx, &res, filter, "a", 1600); err != nil {
		t.Fatal(err)
	}
	if got, want := len(res.entries), 1500; got != want {
		t.Fatalf("read %d entries, want %d", got, want)
	}
	if got, want := res.entries[len(res.entries)-1].Seq, uint64(1500); got != want {
		t.Errorf("last entry at %d, want %d", got, want)
	}
	// The last messages deleted: the read ends at what is left.
	for seq := uint64(1001); seq <= 1500; seq++ {
		if err := b.stream.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	res = readResult{}
	if err := b.readDirect(ctx, &res, filter, "a", 1500); err != nil {
		t.Fatal(err)
	}
	if got, want := len(res.entries), 1000; got != want {
		t.Fatalf("after deletions: read %d entries, want %d", got, want)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if err := b.readDirect(cctx, &readResult{}, filter, "a", 1500); !errors.Is(err, context.Canceled) {
		t.Errorf("read with a cancelled ctx = %v, want context.Canceled", err)
	}
}

// TestLeaderReads: with direct gets allowed, the reads that must see the
// leader's state (a subject's last sequence before a read, a writer's fence
// when it claims, re-claims or takes over a sandbox) go to the leader's
// STREAM.MSG.GET, never to a direct get, which any replica answers.
func TestLeaderReads(t *testing.T) {
	b := openInternal(t, Config{})
	ctx := context.Background()
	api := countAPI(t, b.nc, "$JS.API.DIRECT.GET.>", "$JS.API.STREAM.MSG.GET.>")
	l, err := NewLedger(b, LedgerConfig{WriterID: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	e := events.New(1, "n", "sbx", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sbx", RunID: "r"})
	if err := l.AppendBatch(ctx, []events.Entry{e}); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "sbx"); err != nil {
		t.Fatal(err)
	}
	// A re-claim of its own fence reads it.
	if err := l.AppendBatch(ctx, []events.Entry{output("n", "sbx", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Takeover(ctx, "sbx"); err != nil {
		t.Fatal(err)
	}
	es, err := l.ReadAll(ctx, "n", "sbx")
	if err != nil || len(es) != 2 {
		t.Fatalf("ReadAll = %d entries, %v; want 2", len(es), err)
	}
	if _, err := b.LastMsg(ctx, b.cfg.FencePrefix+".none"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("LastMsg of an empty subject = %v, want ErrMsgNotFound", err)
	}
	m, err := b.Msg(ctx, es[0].Seq)
	if err != nil || m.Sequence != es[0].Seq || m.Header.Get(HeaderName) != "n" {
		t.Errorf("Msg(%d) = %+v, %v", es[0].Seq, m, err)
	}
	api.settled(t, b.nc)
	// Reclaim, Takeover, ReadAll's last sequence, LastMsg and Msg.
	if n := api.n("$JS.API.STREAM.MSG.GET."); n < 5 {
		t.Errorf("%d requests to STREAM.MSG.GET, want 5 at least", n)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	for subj, bodies := range api.subs {
		if !strings.HasPrefix(subj, "$JS.API.DIRECT.GET.") {
			continue
		}
		if subj != "$JS.API.DIRECT.GET."+b.cfg.Stream {
			t.Errorf("a direct get of a subject's last message: %s", subj)
		}
		for _, body := range bodies {
			if strings.Contains(body, "last_by_subj") {
				t.Errorf("a direct get of a subject's last message: %s", body)
			}
		}
	}
}

// TestReadDirectNoResponders: when no server answers the stream's direct
// gets (a stream just updated to allow them, not serving them yet), the
// read is made with an ordered consumer.
func TestReadDirectNoResponders(t *testing.T) {
	b := openInternal(t, Config{})
	ctx := context.Background()
	sc := b.StreamConfig()
	sc.AllowDirect = false
	if _, err := b.js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	var msgs []*nats.Msg
	for i := range 100 {
		msgs = append(msgs, entryMsg(t, b, output("a", "sbx", i+1)))
	}
	publishRaw(t, b, msgs)
	b.direct = true // as the bus saw the stream a moment ago
	filter, _ := events.SandboxSubject(b.cfg.SubjectPrefix, "sbx")
	res, err := b.read(ctx, filter, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(res.entries), 100; got != want {
		t.Fatalf("read %d entries, want %d", got, want)
	}
}

// TestReadDirectWide: after a dense batch, the next one is asked without
// the subject filter; a wide batch holding a message of another sandbox (a
// decodable entry of the same session name, or a fence) is dropped and
// read again on the filter, so the read still returns exactly what the
// ordered read returns.
func TestReadDirectWide(t *testing.T) {
	b := openInternal(t, Config{})
	ctx := context.Background()
	var msgs []*nats.Msg
	step := 0
	add := func(id string, n int) {
		for range n {
			step++
			msgs = append(msgs, entryMsg(t, b, output("a", id, step)))
		}
	}
	add("x", 3000)
	add("y", 1) // same session name, another sandbox
	add("x", 3000)
	msgs = append(msgs, &nats.Msg{Subject: b.cfg.FencePrefix + ".z", Data: []byte(`{"writer":"w"}`)})
	add("x", 3000)
	publishRaw(t, b, msgs)
	api := countAPI(t, b.nc, "$JS.API.DIRECT.GET.>")
	filter, _ := events.SandboxSubject(b.cfg.SubjectPrefix, "x")
	for _, name := range []string{"a", ""} {
		api.reset()
		got, err := b.read(ctx, filter, name)
		if err != nil {
			t.Fatal(err)
		}
		api.settled(t, b.nc)
		if api.wide() == 0 {
			t.Errorf("read %q asked no batch without the filter", name)
		}
		var want readResult
		if err := b.readOrdered(ctx, &want, filter, name, 1, uint64(len(msgs))); err != nil {
			t.Fatal(err)
		}
		sameRead(t, got, want)
		if len(got.entries) != 9000 {
			t.Errorf("read %q: %d entries, want 9000", name, len(got.entries))
		}
		// A scan hands on a wide batch only once it is known to be the
		// sandbox's: the one holding y's message is dropped, not handed.
		sameRead(t, scanned(t, func(res *readResult) error { return b.readInto(ctx, res, filter, name) }), want)
	}
	// A session whose messages are all dense is read wide after its first
	// batch, and only then.
	b2 := openInternal(t, Config{})
	msgs = msgs[:0]
	for i := range 20000 {
		msgs = append(msgs, entryMsg(t, b2, output("a", "w", i+1)))
	}
	publishRaw(t, b2, msgs)
	api = countAPI(t, b2.nc, "$JS.API.DIRECT.GET.>")
	wfilter, _ := events.SandboxSubject(b2.cfg.SubjectPrefix, "w")
	got, err := b2.read(ctx, wfilter, "a")
	if err != nil {
		t.Fatal(err)
	}
	api.settled(t, b2.nc)
	if got, want := api.wide(), api.n("$JS.API.DIRECT.GET.")-1; got != want {
		t.Errorf("%d wide batches, want %d (all but the first)", got, want)
	}
	if len(got.entries) != 20000 || got.entries[19999].Seq != 20000 {
		t.Errorf("read %d entries", len(got.entries))
	}
}

// TestReadDirectStaleReplica plays the replicas of a stream "FAKE" whose
// session has messages at sequences 1, 3 and 5 of 5: the first batch is
// answered (sparse), its second asking, with headers, by a replica that has
// nothing yet (404); the read asks the leader for its last sequence and
// asks again, and then gets the messages with their sequences.
func TestReadDirectStaleReplica(t *testing.T) {
	nc, err := nats.Connect(testenv.NATSCore(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b := &Bus{cfg: Config{Stream: "FAKE", SubjectPrefix: "l", Logger: slog.Default()}, nc: nc, direct: true}
	var data [][]byte
	for i := range 3 {
		d, err := events.Marshal(output("a", "sbx", i+1))
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, d)
	}
	status := func(code string, h nats.Header) *nats.Msg {
		if h == nil {
			h = nats.Header{}
		}
		h.Set(hdrStatus, code)
		return &nats.Msg{Header: h}
	}
	var mu sync.Mutex
	var asked []string
	direct, err := nc.Subscribe("$JS.API.DIRECT.GET.FAKE", func(m *nats.Msg) {
		mu.Lock()
		asked = append(asked, string(m.Data))
		n := len(asked)
		mu.Unlock()
		noHdr := strings.Contains(string(m.Data), "no_hdr")
		switch {
		case n == 2: // the second asking: a replica behind
			_ = m.RespondMsg(status("404", nil))
			return
		case n > 4:
			t.Errorf("request %d: %s", n, m.Data)
			return
		}
		for i, d := range data {
			r := &nats.Msg{Data: d}
			if !noHdr {
				r.Header = nats.Header{jetstream.SequenceHeader: {fmt.Sprint(2*i + 1)}, jetstream.SubjectHeader: {"l.sbx.exec.output"}}
			}
			_ = m.RespondMsg(r)
		}
		_ = m.RespondMsg(status("204", nats.Header{hdrLastSequence: {"5"}, hdrNumPending: {"3"}}))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Unsubscribe()
	leader, err := nc.Subscribe("$JS.API.STREAM.MSG.GET.FAKE", func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"l.sbx.exec.output","seq":5,"time":"2026-01-01T00:00:00Z"}}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := b.read(ctx, "l.sbx.>", "a")
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, e := range res.entries {
		seqs = append(seqs, e.Seq)
	}
	if fmt.Sprint(seqs) != "[1 3 5]" || res.firstSeq != 1 {
		t.Errorf("read sequences %v (first %d), want [1 3 5] (first 1)", seqs, res.firstSeq)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 4 {
		t.Errorf("%d direct gets, want 4: %q", len(asked), asked)
	}
}
