package alineo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/bus/bustest"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// session appends a session's entries to a store, with increasing timestamps.
type session struct {
	t     *testing.T
	store adapters.Store
	name  string
	id    string
	ts    int64
}

func (s *session) add(step int, ev events.Event, payload any) {
	s.t.Helper()
	s.ts++
	if err := s.store.Append(context.Background(), events.New(s.ts, s.name, s.id, step, ev, payload)); err != nil {
		s.t.Fatal(err)
	}
}

func (s *session) created(p events.SandboxCreatedPayload) {
	p.SandboxID = s.id
	s.add(events.SandboxLevel, events.SandboxCreated, p)
}

// exec records a completed command; its stdout is "out-<cmd>".
func (s *session) exec(step int, cmd string, exit int) {
	s.started(step, cmd)
	s.add(step, events.ExecOutput, events.NewOutput(step, events.Stdout, []byte("out-"+cmd)))
	s.add(step, events.ExecCompleted, events.ExecCompletedPayload{Seq: step, ExitCode: exit})
}

func (s *session) started(step int, cmd string) {
	s.add(step, events.ExecStarted, events.ExecStartedPayload{Seq: step, Kind: events.KindCommand, Cmd: cmd,
		Fingerprint: events.Fingerprint(events.KindCommand, cmd)})
}

func (s *session) checkpoint(snap, tag string) {
	s.add(events.SandboxLevel, events.CheckpointCreated, events.CheckpointCreatedPayload{SnapshotID: snap, Name: tag})
}

// cached renders a cache as step → text|chunks|exit.
func cached(t *testing.T, c *replayCache) map[int]string {
	t.Helper()
	m := map[int]string{}
	for step, r := range c.steps {
		res, err := r.decode()
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		var out bytes.Buffer
		for _, ch := range res.chunks {
			out.WriteString(string(ch.stream) + ":" + string(ch.data) + ";")
		}
		m[step] = res.text + "|" + out.String() + "|" + string(rune('0'+res.exitCode))
	}
	return m
}

// recorded returns a cached call as the ledger records it.
func recorded(step int, kind events.ExecKind, text string, exit int, chunks ...chunk) *recordedExec {
	p := events.ExecStartedPayload{Seq: step, Kind: kind, Fingerprint: events.Fingerprint(kind, text)}
	if kind == events.KindCode {
		p.Code = text
	} else {
		p.Cmd = text
	}
	enc := func(v any) json.RawMessage {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return b
	}
	rec := &recordedExec{step: step, started: enc(p), completed: enc(events.ExecCompletedPayload{Seq: step, ExitCode: exit})}
	for _, c := range chunks {
		rec.outputs = append(rec.outputs, enc(events.NewOutput(step, c.stream, c.data)))
	}
	return rec
}

func TestBuildResumePointChain(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	// A: 1, 2, checkpoint snapA, 3 (after the checkpoint), then 4 started only.
	a := &session{t: t, store: store, name: "job", id: "A"}
	a.created(events.SandboxCreatedPayload{RunID: "run-1", Resources: map[string]string{"cpu": "2", "memory": "2Gi"}})
	a.exec(1, "one", 0)
	a.started(2, "two")
	a.add(2, events.ExecOutput, events.NewOutput(2, events.Stderr, []byte{0xff, 'x'}))
	a.add(2, events.ExecCompleted, events.ExecCompletedPayload{Seq: 2, ExitCode: 3})
	a.checkpoint("snapA", "mid")
	a.exec(3, "three-a", 0)
	a.checkpoint("snapA2", "")
	a.started(4, "four")
	// B resumed A at snapA: it replayed 1 and 2, ran 3 live, checkpointed.
	b := &session{t: t, store: store, name: "job", id: "B", ts: 100}
	b.created(events.SandboxCreatedPayload{ResumedFrom: "A", SnapshotID: "snapA", RunID: "run-1"})
	b.exec(3, "three-b", 0)
	b.checkpoint("snapB", "")
	b.started(4, "four")
	// C resumed B at snapB: 4 ran live.
	c := &session{t: t, store: store, name: "job", id: "C", ts: 200}
	c.created(events.SandboxCreatedPayload{ResumedFrom: "B", SnapshotID: "snapB", RunID: "run-1"})
	c.exec(4, "four", 1)
	c.checkpoint("snapC", "")
	// D resumed a session that is not in the ledger.
	d := &session{t: t, store: store, name: "job", id: "D", ts: 300}
	d.created(events.SandboxCreatedPayload{ResumedFrom: "gone", SnapshotID: "snapX"})
	d.checkpoint("snapD", "")
	// E and F resumed each other.
	e := &session{t: t, store: store, name: "job", id: "E", ts: 400}
	e.created(events.SandboxCreatedPayload{ResumedFrom: "F", SnapshotID: "snapF"})
	e.checkpoint("snapE", "")
	f := &session{t: t, store: store, name: "job", id: "F", ts: 500}
	f.created(events.SandboxCreatedPayload{ResumedFrom: "E", SnapshotID: "snapE"})
	f.checkpoint("snapF", "")

	one, two := "one|stdout:out-one;|0", "two|stderr:\xffx;|3"
	tests := []struct {
		id, tag  string
		snap     string
		want     map[int]string
		notFound bool
	}{
		{id: "A", snap: "snapA2", want: map[int]string{1: one, 2: two, 3: "three-a|stdout:out-three-a;|0"}},
		{id: "A", tag: "mid", snap: "snapA", want: map[int]string{1: one, 2: two}},
		{id: "A", tag: "nope", notFound: true},
		{id: "B", snap: "snapB", want: map[int]string{1: one, 2: two, 3: "three-b|stdout:out-three-b;|0"}},
		{id: "C", snap: "snapC", want: map[int]string{1: one, 2: two, 3: "three-b|stdout:out-three-b;|0", 4: "four|stdout:out-four;|1"}},
		{id: "D", notFound: true},
		{id: "E", notFound: true},
	}
	for _, tt := range tests {
		t.Run(tt.id+"/"+tt.tag, func(t *testing.T) {
			rp, err := buildResumePoint(ctx, store, "job", tt.id, tt.tag)
			if tt.notFound {
				var ce *ClientError
				if !errors.As(err, &ce) || ce.Status != http.StatusNotFound {
					t.Fatalf("err = %v, want a 404 *ClientError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := rp.checkpoint.SnapshotID; got != tt.snap {
				t.Errorf("checkpoint = %s, want %s", got, tt.snap)
			}
			got := cached(t, rp.cache)
			if len(got) != len(tt.want) {
				t.Errorf("cache = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("step %d = %q, want %q", k, got[k], v)
				}
			}
			if rp.runID != "run-1" {
				t.Errorf("runID = %q, want run-1", rp.runID)
			}
			if want := (Resources{CPU: "2", Memory: "2Gi"}); rp.resources != want {
				t.Errorf("resources = %+v, want %+v (inherited from A)", rp.resources, want)
			}
		})
	}
}

func TestBuildResumePointLastTag(t *testing.T) {
	store := memory.New()
	s := &session{t: t, store: store, name: "n", id: "S"}
	s.created(events.SandboxCreatedPayload{})
	s.exec(1, "a", 0)
	s.checkpoint("s1", "t")
	s.exec(2, "b", 0)
	s.checkpoint("s2", "t")
	s.exec(3, "c", 0)
	s.checkpoint("s3", "other")
	rp, err := buildResumePoint(context.Background(), store, "n", "S", "t")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rp.checkpoint.SnapshotID, "s2"; got != want {
		t.Errorf("checkpoint = %s, want %s (the last with the tag)", got, want)
	}
	if got, want := rp.cache.Len(), 2; got != want {
		t.Errorf("cached = %d, want %d", got, want)
	}
	if got, want := rp.runID, "S"; got != want {
		t.Errorf("runID = %q, want the sandbox id %q when none was recorded", got, want)
	}
}

// TestBuildResumePointTypeScriptFixture reads the ledger of the TypeScript SDK.
func TestBuildResumePointTypeScriptFixture(t *testing.T) {
	store, err := sqlite.Open(testenv.Fixture(t, "seed-schema-ledger.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	for _, tag := range []string{"", "after-install"} {
		rp, err := buildResumePoint(ctx, store, "ci-job", "sbx-a1", tag)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := rp.checkpoint.SnapshotID, "snap-1"; got != want {
			t.Errorf("checkpoint = %s, want %s", got, want)
		}
		got := cached(t, rp.cache)
		want := map[int]string{1: "pip install -q requests|stdout:Successfully installed requests;|0"}
		if len(got) != 1 || got[1] != want[1] {
			t.Errorf("cache = %v, want %v", got, want)
		}
		if res, _ := rp.cache.steps[1].decode(); res.fingerprint != events.Fingerprint(events.KindCommand, "pip install -q requests") {
			t.Errorf("fingerprint = %s, want the command's", res.fingerprint)
		}
		if rp.runID != "run-1" || rp.resources != (Resources{CPU: "500m", Memory: "512Mi"}) {
			t.Errorf("runID, resources = %q, %+v; want run-1, 500m/512Mi", rp.runID, rp.resources)
		}
	}
	_, err = buildResumePoint(ctx, store, `agent "quoted"; DROP TABLE x;--`, "sbx-b2", "")
	var ce *ClientError
	if !errors.As(err, &ce) || ce.Status != http.StatusNotFound {
		t.Fatalf("session without checkpoint: err = %v, want a 404 *ClientError", err)
	}
}

// TestReplayedExecShapes replays recorded results on a live handle: every shape
// gets the exact bytes, nothing reaches execd or the ledger, strict applies,
// a divergent call fails typed, and the first uncached step runs live.
func TestReplayedExecShapes(t *testing.T) {
	ctx := context.Background()
	f := newFakeServer(t)
	c, err := New(Options{BaseURL: f.URL, Adapter: memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	bin := []byte{0, 0xff, 'z'}
	cmd := events.KindCommand
	sb.replay = &replayCache{steps: map[int]*recordedExec{
		1: recorded(1, cmd, "build", 0, chunk{events.Stdout, []byte("a\n")}, chunk{events.Stderr, []byte("e")}, chunk{events.Stdout, bin}),
		2: recorded(2, cmd, "test", 3, chunk{events.Stdout, []byte("t")}),
		3: recorded(3, cmd, "test", 3),
		4: recorded(4, cmd, "deploy", 0),
		5: recorded(5, events.KindCode, "x", 0),
		7: {step: 7, started: json.RawMessage(`{"seq":7,"cmd":"bad"}`), completed: json.RawMessage(`{"exitCode":"x"}`)},
	}}
	wantOut := append([]byte("a\n"), bin...)

	e1 := sb.Exec(ctx, "build")
	res, err := e1.Wait()
	if err != nil || res.Stdout != string(wantOut) || res.Stderr != "e" || res.ExitCode != 0 {
		t.Fatalf("Wait = %q, %q, %d, %v; want %q, e, 0, nil", res.Stdout, res.Stderr, res.ExitCode, err, wantOut)
	}
	var piped bytes.Buffer
	if err := e1.Pipe(&piped); err != nil || !bytes.Equal(piped.Bytes(), wantOut) {
		t.Fatalf("Pipe = %q, %v; want %q", piped.Bytes(), err, wantOut)
	}
	var chunks [][]byte
	for c, err := range e1.Stdout() {
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, c)
	}
	if len(chunks) != 2 || string(chunks[0]) != "a\n" || !bytes.Equal(chunks[1], bin) {
		t.Fatalf("Stdout chunks = %q, want the two recorded ones", chunks)
	}
	for c, err := range e1.Stderr() {
		if err != nil || string(c) != "e" {
			t.Fatalf("Stderr = %q, %v; want e", c, err)
		}
	}

	// Strict (default): the replayed non-zero exit is a *CommandError, and Pipe reports it too.
	e2 := sb.Exec(ctx, "test")
	var ce *CommandError
	if _, err := e2.Wait(); !errors.As(err, &ce) || ce.ExitCode != 3 || ce.Stdout != "t" {
		t.Fatalf("strict replay: err = %v, want a *CommandError with exit 3 and stdout t", err)
	}
	if err := e2.Pipe(io.Discard); !errors.As(err, &ce) {
		t.Fatalf("strict replay Pipe: err = %v, want a *CommandError", err)
	}
	// Not strict: the exit code, no error.
	if res, err := sb.Exec(ctx, "test", ExecOptions{Strict: new(false)}).Wait(); err != nil || res.ExitCode != 3 {
		t.Fatalf("non-strict replay = %d, %v; want 3, nil", res.ExitCode, err)
	}
	// Divergent text, then divergent kind.
	var de *ReplayDivergedError
	if _, err := sb.Exec(ctx, "rm -rf /").Wait(); !errors.As(err, &de) || !errors.Is(err, ErrReplayDiverged) ||
		de.Step != 4 || de.Recorded != "deploy" || de.Got != "rm -rf /" {
		t.Fatalf("divergent call: err = %v, want a *ReplayDivergedError at step 4", err)
	}
	if _, err := sb.Exec(ctx, "x").Wait(); !errors.As(err, &de) || de.Step != 5 {
		t.Fatalf("divergent kind: err = %v, want a *ReplayDivergedError at step 5", err)
	}
	f.mu.Lock()
	n := len(f.commands)
	f.mu.Unlock()
	if n != 0 {
		t.Fatalf("execd got %d commands during replay, want 0", n)
	}
	// Past the cache: live, as step 6; then a recorded entry that does not decode.
	live := sb.Exec(ctx, "echo live")
	if res, err := live.Wait(); err != nil || res.Stdout != "live\n" && res.Stdout != "live" {
		t.Fatalf("live exec = %q, %v", res.Stdout, err)
	}
	if live.Step() != 6 {
		t.Fatalf("live step = %d, want 6", live.Step())
	}
	var se *SandboxError
	if _, err := sb.Exec(ctx, "bad").Wait(); !errors.As(err, &se) {
		t.Fatalf("undecodable recorded step: err = %v, want a *SandboxError", err)
	}
	es, err := c.Sandboxes().Events(ctx, sb.Name(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.StepIndex != events.SandboxLevel && e.StepIndex != 6 {
			t.Errorf("ledger has %s at step %d; replayed calls must write nothing", e.Event, e.StepIndex)
		}
	}
}

// BenchmarkResumeReplayCache builds the replay cache of a session holding
// 10,000 execs in a SQLite ledger (target: under 200 ms). The baseline, in the
// same run, is reading the session's rows alone (ReadAll). decode-all is the
// time to decode every cached step, which replayed calls pay one by one.
func BenchmarkResumeReplayCache(b *testing.B) {
	const execs = 10000
	ctx := context.Background()
	store, err := sqlite.Open(testenv.SQLitePath(b), sqlite.Config{Synchronous: "NORMAL"})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	const name, id = "bench", "sbx-bench"
	ts := int64(1)
	batch := make([]events.Entry, 0, 3000)
	add := func(step int, ev events.Event, p any) {
		batch = append(batch, events.New(ts, name, id, step, ev, p))
		ts++
	}
	flush := func() {
		if err := store.AppendBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	add(events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: id, RunID: "run"})
	for step := 1; step <= execs; step++ {
		cmd := "make target-" + strconv.Itoa(step)
		add(step, events.ExecStarted, events.ExecStartedPayload{Seq: step, Kind: events.KindCommand, Cmd: cmd,
			Fingerprint: events.Fingerprint(events.KindCommand, cmd)})
		add(step, events.ExecOutput, events.NewOutput(step, events.Stdout, []byte("built target "+strconv.Itoa(step)+"\n")))
		add(step, events.ExecCompleted, events.ExecCompletedPayload{Seq: step})
		if len(batch) >= 2999 {
			flush()
		}
	}
	add(events.SandboxLevel, events.CheckpointCreated, events.CheckpointCreatedPayload{SnapshotID: "snap"})
	flush()

	const reps = 5
	var read, build, decode []time.Duration
	for b.Loop() {
		for range reps {
			start := time.Now()
			es, err := store.ReadAll(ctx, name, id)
			if err != nil || len(es) != 3*execs+2 {
				b.Fatalf("ReadAll = %d rows, %v", len(es), err)
			}
			read = append(read, time.Since(start))
			start = time.Now()
			rp, err := buildResumePoint(ctx, store, name, id, "")
			if err != nil || rp.cache.Len() != execs {
				b.Fatalf("cache of %d steps, %v; want %d", rp.cache.Len(), err, execs)
			}
			build = append(build, time.Since(start))
			start = time.Now()
			for _, rec := range rp.cache.steps {
				if _, err := rec.decode(); err != nil {
					b.Fatal(err)
				}
			}
			decode = append(decode, time.Since(start))
		}
	}
	p50 := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(p50(build)), "cache-p50-ms")
	b.ReportMetric(ms(p50(read)), "readall-p50-ms")
	b.ReportMetric(float64(p50(build))/float64(p50(read)), "ratio")
	// Decoding happens as calls are replayed; this is all of it, for reference.
	b.ReportMetric(ms(p50(decode)), "decode-all-p50-ms")
}

// FuzzRecordedExecDecode feeds arbitrary payloads to a cached step: decoding
// either fails with an error or yields chunks of stdout or stderr only.
func FuzzRecordedExecDecode(f *testing.F) {
	f.Add([]byte(`{"seq":1,"cmd":"ls"}`), []byte(`{"seq":1,"type":"stdout","text":"a"}`), []byte(`{"seq":1,"exitCode":2}`))
	f.Add([]byte(`{"code":"x","kind":"code"}`), []byte(`{"type":"init","text":"cmd-1"}`), []byte(`{}`))
	f.Add([]byte(`null`), []byte(`{"type":"stderr","text":"\uFFFD","data":"AP8="}`), []byte(`{"exitCode":-1}`))
	f.Add([]byte(`{`), []byte(`[]`), []byte(`"x"`))
	f.Fuzz(func(t *testing.T, started, output, completed []byte) {
		rec := &recordedExec{step: 1, started: started, outputs: []json.RawMessage{output}, completed: completed}
		res, err := rec.decode()
		if err != nil {
			return
		}
		if started != nil && !strings.HasPrefix(res.fingerprint, "sha256:") {
			t.Fatalf("fingerprint %q", res.fingerprint)
		}
		for _, c := range res.chunks {
			if (c.stream != events.Stdout && c.stream != events.Stderr) || len(c.data) == 0 {
				t.Fatalf("chunk %+v", c)
			}
		}
	})
}

// benchBusLedger returns a bus ledger on an embedded NATS server, and two
// raw reads of sandbox id's messages (the first want of them, the last ones
// in the stream), neither decoded nor checked: with batched direct gets
// without headers, as the bus reads them, the fastest read of them this
// client has (the floor); and with an ordered consumer, as the bus reads a
// stream without direct gets.
func benchBusLedger(b *testing.B, id string, want int) (l adapters.Ledger, direct, ordered func() time.Duration) {
	ctx := context.Background()
	bb, err := bus.Open(ctx, bus.Config{URL: testenv.NATS(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bb.Close() })
	l, err = bus.NewLedger(bb, bus.LedgerConfig{MaxPending: 8192})
	if err != nil {
		b.Fatal(err)
	}
	filter := bb.Config().SubjectPrefix + "." + id + ".>"
	direct = func() time.Duration { return bustest.RawDirectRead(b, bb, filter, want) }
	ordered = func() time.Duration { return bustest.RawOrderedRead(b, bb, filter, want) }
	return l, direct, ordered
}

// appendSession writes a session of n completed execs (`echo step i`, output
// "hi\n") and a checkpoint after them, in batches.
func appendSession(tb testing.TB, store adapters.Ledger, name, id string, n int) {
	tb.Helper()
	ctx := context.Background()
	batch := []events.Entry{events.New(1, name, id, events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{RunID: "run"})}
	flush := func() {
		if err := store.AppendBatch(ctx, batch); err != nil {
			tb.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := 1; i <= n; i++ {
		cmd := "echo step " + strconv.Itoa(i)
		ts := int64(1 + i)
		batch = append(batch,
			events.New(ts, name, id, i, events.ExecStarted, events.ExecStartedPayload{Seq: i, Kind: events.KindCommand, Cmd: cmd,
				Fingerprint: events.Fingerprint(events.KindCommand, cmd)}),
			events.New(ts, name, id, i, events.ExecOutput, outputPayload(i, events.Stdout, []byte("hi\n"))),
			events.New(ts, name, id, i, events.ExecCompleted, events.ExecCompletedPayload{Seq: i}))
		if len(batch) >= 3000 {
			flush()
		}
	}
	batch = append(batch, events.New(int64(n+2), name, id, events.SandboxLevel, events.CheckpointCreated,
		events.CheckpointCreatedPayload{SnapshotID: "snap", Name: "t"}))
	flush()
}

// BenchmarkResumeCache resumes the replay cache of a 50k-exec session (5k
// with -short): one read of the session, the cache and the network state
// built from it, as Client.Resume does before it creates the sandbox.
// ms = the time it takes (target <= 250, on SQLite and on the bus);
// cache-B/exec = the heap the cache keeps per exec beyond the recorded
// output bytes (target <= ~1024). read-ms, timed alone in the same run, is
// the store's ReadAll of the session, or on the bus a raw read of
// its messages (3 per exec) with batched direct gets, as the bus reads them,
// not decoded, the floor the bus's ms is judged against (make bench's
// summary names it); ordered-read-ms is the same raw read with an ordered
// consumer (the bus's read of a stream without direct gets), for reference.
func BenchmarkResumeCache(b *testing.B) {
	n := 50_000
	if testing.Short() {
		n = 5_000
	}
	for _, k := range []string{"sqlite", "memory", "bus"} {
		b.Run(k, func(b *testing.B) {
			var store adapters.Ledger = memory.New()
			var rawRead, orderedRead func() time.Duration
			switch k {
			case "sqlite":
				s, err := sqlite.Open(filepath.Join(b.TempDir(), "l.db"), sqlite.Config{Synchronous: "NORMAL"})
				if err != nil {
					b.Fatal(err)
				}
				store = s
			case "bus":
				store, rawRead, orderedRead = benchBusLedger(b, "S", 3*n+2)
			}
			defer store.Close()
			appendSession(b, store, "job", "S", n)
			if rawRead == nil { // the store's own read of the session
				rawRead = func() time.Duration {
					start := time.Now()
					if es, err := store.ReadAll(context.Background(), "job", "S"); err != nil || len(es) != 3*n+2 {
						b.Fatalf("ReadAll = %d entries, %v", len(es), err)
					}
					return time.Since(start)
				}
			}
			var reads, ordered []time.Duration // the floor, and the ordered read's
			for range 3 {
				reads = append(reads, rawRead())
				if orderedRead != nil {
					ordered = append(ordered, orderedRead())
				}
			}
			slices.Sort(reads)
			slices.Sort(ordered)
			c := &Client{store: store}
			ctx := context.Background()
			var took time.Duration
			var retained uint64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				start := time.Now()
				name, l, err := c.resumedSession(ctx, "S", "job")
				if err != nil {
					b.Fatal(err)
				}
				rp, err := resumePointOf(ctx, store, name, "S", "", l)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.prepareResume(ctx, "S", l.others, nil); err != nil {
					b.Fatal(err)
				}
				l = nil
				took += time.Since(start)
				runtime.GC()
				runtime.ReadMemStats(&after)
				if rp.cache.Len() != n {
					b.Fatalf("cache holds %d execs, want %d", rp.cache.Len(), n)
				}
				retained += after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
				runtime.KeepAlive(rp)
			}
			b.ReportMetric(float64(reads[1])/1e6, "read-ms")
			if len(ordered) > 0 {
				b.ReportMetric(float64(ordered[1])/1e6, "ordered-read-ms")
			}
			per := float64(retained)/float64(b.N)/float64(n) - float64(len("hi\n"))
			ms := float64(took) / float64(b.N) / 1e6
			b.ReportMetric(ms, "ms")
			if k == "bus" {
				// The raw read is a floor: no resume reads the
				// session's messages faster. (A store's ReadAll is
				// not: resume scans it, ScanAll, when it can.)
				testenv.TargetFloor(b, "ms", ms, 250, float64(reads[1])/1e6, true)
			} else {
				testenv.Target(b, "ms", ms, 250, true)
			}
			b.ReportMetric(per, "cache-B/exec")
			testenv.Target(b, "cache-B/exec", per, 1024, true)
		})
	}
}

// TestReplayedCodeResults replays code's recorded value and exception, as
// either SDK records them (exec.output of type "result" and "error", a
// Postgres JSONB string included): the error of a shell's exit is no
// exception, and a row that does not decode fails the call typed.
func TestReplayedCodeResults(t *testing.T) {
	ctx := context.Background()
	f := newFakeServer(t)
	c, err := New(Options{BaseURL: f.URL, Adapter: memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	code := events.KindCode
	withRows := func(rec *recordedExec, rows ...string) *recordedExec {
		for _, r := range rows {
			rec.outputs = append(rec.outputs, json.RawMessage(r))
		}
		return rec
	}
	tb := `["Traceback (most recent call last):\n","  File \"<cell>\", line 1, in <module>\n","ZeroDivisionError: division by zero\n"]`
	sb.replay = &replayCache{steps: map[int]*recordedExec{
		1: withRows(recorded(1, code, "1+1", 0),
			`{"seq":1,"type":"init","text":"c-1","timestamp":1}`, // the TypeScript SDK's rows of other events
			`{"seq":1,"type":"execution_count","execution_count":1}`,
			`{"seq":1,"type":"result","results":{"text":"2","text/html":"<b>2</b>"},"timestamp":2}`,
			`{"seq":1,"type":"execution_complete","execution_time":1}`),
		2: withRows(recorded(2, code, "1/0", 1, chunk{events.Stderr, []byte("Traceback (most recent call last):\n")}),
			`"{\"seq\":2,\"type\":\"error\",\"error\":{\"ename\":\"ZeroDivisionError\",\"evalue\":\"division by zero\",\"traceback\":`+strings.ReplaceAll(strings.ReplaceAll(tb, `\`, `\\`), `"`, `\"`)+`}}"`),
		3: withRows(recorded(3, events.KindCommand, "exit 3", 3),
			`{"seq":3,"type":"error","error":{"ename":"CommandExecError","evalue":"3","traceback":["exit status 3"]}}`),
		4: withRows(recorded(4, code, "bad", 1), `{"seq":4,"type":"error","error":"not an object"}`),
	}}

	res, err := sb.ExecCode(ctx, "1+1").Wait()
	if err != nil || res.Value != "2" || res.Exception != nil || res.Stdout != "" {
		t.Fatalf("replayed value = %+v, %v; want Value 2", res, err)
	}
	res, err = sb.ExecCode(ctx, "1/0").Wait()
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Exception == nil || ce.Exception.Name != "ZeroDivisionError" || ce.Exception.Value != "division by zero" ||
		len(ce.Exception.Traceback) != 3 || res.Exception != ce.Exception || ce.Stderr != "Traceback (most recent call last):\n" {
		t.Fatalf("replayed exception = %+v, %v; want a *CommandError with the ZeroDivisionError", res, err)
	}
	res, err = sb.Exec(ctx, "exit 3", ExecOptions{Strict: new(false)}).Wait()
	if err != nil || res.ExitCode != 3 || res.Exception != nil {
		t.Fatalf("replayed shell exit = %+v, %v; want exit 3 and no exception", res, err)
	}
	var se *SandboxError
	if _, err := sb.ExecCode(ctx, "bad").Wait(); !errors.As(err, &se) {
		t.Fatalf("undecodable error row: err = %v, want a *SandboxError", err)
	}
}

// TestExecRecordsPrefix: a prefix of the chunked records yields the first n
// records in order, at and around chunk boundaries.
func TestExecRecordsPrefix(t *testing.T) {
	var x execRecords
	total := 2*execChunk + 5
	for i := range total {
		x.add(execRecord{step: i})
	}
	for _, n := range []int{0, 1, execChunk - 1, execChunk, execChunk + 1, 2 * execChunk, total} {
		p := x.prefix(n)
		got := 0
		for r := range p.all() {
			if r.step != got {
				t.Fatalf("prefix(%d): record %d has step %d", n, got, r.step)
			}
			got++
		}
		if got != n || p.n != n {
			t.Errorf("prefix(%d) yields %d records, n = %d", n, got, p.n)
		}
	}
}

// scanStore is a memory store that is an adapters.Scanner: its scan hands
// ReadAll's entries one by one, reusing one entry as the bus does, or fails
// with err after half of them.
type scanStore struct {
	*memory.Store
	err   error
	scans int
}

func (s *scanStore) ScanAll(ctx context.Context, name, id string, fn func(*events.Entry) error) error {
	s.scans++
	es, err := s.ReadAll(ctx, name, id)
	if err != nil {
		return err
	}
	var e events.Entry
	for i := range es {
		if s.err != nil && i == len(es)/2 {
			return s.err
		}
		e = es[i]
		if err := fn(&e); err != nil {
			return err
		}
		e = events.Entry{}
	}
	return nil
}

// TestReadSessionLog: a session is read with ScanAll from a Scanner, with
// ReadAll after a scan that fails with ErrRescan, and the log is the same
// either way; any other error of the scan is Resume's.
func TestReadSessionLog(t *testing.T) {
	ctx := context.Background()
	store := &scanStore{Store: memory.New()}
	s := session{t: t, store: store, name: "job", id: "S", ts: 1}
	s.add(events.SandboxLevel, events.SandboxCreated, json.RawMessage(`{"runId":"r"}`))
	for step := 1; step <= 5; step++ {
		s.add(step, events.ExecStarted, events.ExecStartedPayload{Seq: step, Kind: events.KindCommand, Cmd: "echo"})
		s.add(step, events.ExecOutput, outputPayload(step, events.Stdout, []byte("hi\n")))
		s.add(step, events.ExecCompleted, events.ExecCompletedPayload{Seq: step})
		if step == 3 {
			s.add(events.SandboxLevel, events.CheckpointCreated, json.RawMessage(`{"snapshotId":"snap-3"}`))
		}
	}
	es, err := store.ReadAll(ctx, "job", "S")
	if err != nil {
		t.Fatal(err)
	}
	want := logOf(es)
	if want.execs.n != 15 || len(want.others) != 2 || want.at[1] != 9 {
		t.Fatalf("log of the entries: %d execs, %d others, at %v", want.execs.n, len(want.others), want.at)
	}
	same := func(got *sessionLog) {
		t.Helper()
		if got.execs.n != want.execs.n || !slices.Equal(got.at, want.at) || len(got.others) != len(want.others) {
			t.Fatalf("log: %d execs, at %v; want %d, at %v", got.execs.n, got.at, want.execs.n, want.at)
		}
		var g, w []execRecord
		for r := range got.execs.all() {
			g = append(g, *r)
		}
		for r := range want.execs.all() {
			w = append(w, *r)
		}
		for i := range w {
			if g[i].step != w[i].step || g[i].kind != w[i].kind || !bytes.Equal(g[i].payload, w[i].payload) {
				t.Fatalf("exec record %d = %+v, want %+v", i, g[i], w[i])
			}
		}
		for i := range want.others {
			if got.others[i].Seq != want.others[i].Seq || got.others[i].Event != want.others[i].Event {
				t.Fatalf("other entry %d = %+v, want %+v", i, got.others[i], want.others[i])
			}
		}
	}
	for _, tt := range []struct {
		name    string
		err     error
		wantErr error
	}{
		{"scan", nil, nil},
		{"rescan", fmt.Errorf("%w: out of order", adapters.ErrRescan), nil},
		{"unavailable", fmt.Errorf("%w: gone", adapters.ErrUnavailable), adapters.ErrUnavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store.err, store.scans = tt.err, 0
			got, err := readSessionLog(ctx, store, "job", "S")
			if store.scans != 1 {
				t.Errorf("%d scans, want 1", store.scans)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("readSessionLog = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			same(got)
			rp, err := resumePointOf(ctx, store, "job", "S", "", got)
			if err != nil {
				t.Fatal(err)
			}
			if rp.cache.Len() != 3 || rp.checkpoint.SnapshotID != "snap-3" {
				t.Fatalf("resume point: %d cached, checkpoint %q; want 3, snap-3", rp.cache.Len(), rp.checkpoint.SnapshotID)
			}
		})
	}
}
