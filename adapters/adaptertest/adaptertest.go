package adaptertest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// T0 is the Unix-millisecond timestamp the suite's entries start at.
const T0 int64 = 1764400000000

// ctx returns a context bounded by the test's deadline, so a hanging store fails
// the test instead of the whole run.
func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// Run runs both halves of the Store conformance suite, RunLedger and
// RunReadModel, as every Store passes them. newStore returns a fresh, empty
// store for each subtest and closes it with t.Cleanup (or lets the suite's
// Close do it).
func Run(t *testing.T, newStore func(t *testing.T) adapters.Store) {
	t.Run("Ledger", func(t *testing.T) {
		RunLedger(t, func(t *testing.T) adapters.Ledger { return newStore(t) })
	})
	t.Run("ReadModel", func(t *testing.T) { RunReadModel(t, newStore) })
}

// RunLedger runs the Ledger half of the suite: appends, validation, read
// order, payloads, checkpoints, delete, concurrency, Close. newLedger returns
// a fresh, empty ledger for each subtest.
func RunLedger(t *testing.T, newLedger func(t *testing.T) adapters.Ledger) {
	cases := []struct {
		name string
		f    func(t *testing.T, s adapters.Ledger)
	}{
		{"RoundTrip", testRoundTrip},
		{"SameMillisecondKeepsAppendOrder", testSameMillisecond},
		{"ReadOrderIsTsThenSeq", testTsOrder},
		{"HashChain", testHashChain},
		{"Payloads", testPayloads},
		{"BinaryOutput", testBinaryOutput},
		{"BranchAndError", testBranchAndError},
		{"Actor", testActor},
		{"OddNames", testOddNames},
		{"InvalidEntries", testInvalidEntries},
		{"ExtensionEvents", testExtensionEvents},
		{"InvalidExtensionEvents", testInvalidExtensionEvents},
		{"AppendBatch", testAppendBatch},
		{"AppendBatchInvalidWritesNothing", testAppendBatchInvalid},
		{"LastCheckpoint", testLastCheckpoint},
		{"ListCheckpoints", testListCheckpoints},
		{"DeleteSandbox", testDeleteSandbox},
		{"ConcurrentAppends", testConcurrentAppends},
		{"ManySessionsAtOnce", testManySessionsAtOnce},
		{"CanceledContext", testCanceledContext},
		{"Scan", testScan},
		{"Close", testClose},
		{"CloseWhileAppending", testCloseWhileAppending},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newLedger(t)
			t.Cleanup(func() { _ = s.Close() })
			c.f(t, s)
		})
	}
}

// RunReadModel runs the ReadModel half of the suite against a Store: the
// details its appends keep (of sessions, across names, with filters, after
// batches, invalid entries and deletes) and the environment records.
// newStore returns a fresh, empty store for each subtest.
func RunReadModel(t *testing.T, newStore func(t *testing.T) adapters.Store) {
	cases := []struct {
		name string
		f    func(t *testing.T, s adapters.Store)
	}{
		{"OddNames", testOddNamesDetails},
		{"InvalidEntriesHaveNoDetails", testInvalidEntriesDetails},
		{"ExtensionEvents", testExtensionEventsDetails},
		{"AppendBatch", testAppendBatchDetails},
		{"AppendBatchInvalidHasNoDetails", testAppendBatchInvalidDetails},
		{"Details", testDetails},
		{"DetailsFilters", testDetailsFilters},
		{"DetailsByName", testDetailsByName},
		{"DetailsWithoutCreated", testDetailsWithoutCreated},
		{"DeleteSandbox", testDeleteSandboxDetails},
		{"ManySessionsAtOnce", testManySessionsDetails},
		{"Environments", testEnvironments},
		{"Close", testCloseReadModel},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			c.f(t, s)
		})
	}
}

// entry builds a valid entry of ev with the natural payload.
func entry(ts int64, name, id string, step int, ev events.Event) events.Entry {
	var p any
	switch ev {
	case events.SandboxCreated:
		p = events.SandboxCreatedPayload{SandboxID: id, RunID: "run-" + id}
	case events.ExecStarted:
		p = events.ExecStartedPayload{Seq: step, Kind: events.KindCommand, Cmd: "echo " + fmt.Sprint(step)}
	case events.ExecOutput:
		p = events.NewOutput(step, events.Stdout, []byte(fmt.Sprintf("out %d@%d\n", step, ts)))
	case events.ExecCompleted:
		p = events.ExecCompletedPayload{Seq: step}
	case events.CheckpointCreated:
		p = events.CheckpointCreatedPayload{SnapshotID: fmt.Sprintf("snap-%d", ts)}
	}
	return events.New(ts, name, id, step, ev, p)
}

func mustAppend(t *testing.T, s adapters.Ledger, es ...events.Entry) {
	t.Helper()
	for _, e := range es {
		if err := s.Append(ctx(t), e); err != nil {
			t.Fatalf("Append(%s %s/%s): %v", e.Event, e.Name, e.SandboxID, err)
		}
	}
}

func mustRead(t *testing.T, s adapters.Ledger, name, id string) []events.Entry {
	t.Helper()
	es, err := s.ReadAll(ctx(t), name, id)
	if err != nil {
		t.Fatalf("ReadAll(%q, %q): %v", name, id, err)
	}
	if sc, ok := s.(adapters.Scanner); ok {
		sameScan(t, sc, name, id, es)
	}
	return es
}

// sameScan checks that a Scanner's ScanAll hands the entries ReadAll
// returned (es), Seq and hashes included, or fails with ErrRescan; every
// read of the suite checks it. Each entry handed is copied, as the
// contract says a caller must, and compared once the scan is over: what
// it holds must outlive the call.
func sameScan(t *testing.T, sc adapters.Scanner, name, id string, es []events.Entry) {
	t.Helper()
	var got []events.Entry
	err := sc.ScanAll(ctx(t), name, id, func(e *events.Entry) error {
		got = append(got, *e)
		return nil
	})
	switch {
	case errors.Is(err, adapters.ErrRescan):
		return
	case err != nil:
		t.Fatalf("ScanAll(%q, %q): %v", name, id, err)
	}
	if len(got) != len(es) {
		t.Fatalf("ScanAll(%q, %q) handed %d entries, ReadAll returned %d", name, id, len(got), len(es))
	}
	for i := range es {
		g, w := got[i], es[i]
		if err := sameEntry(g, w); err != nil || g.Seq != w.Seq || g.PrevHash != w.PrevHash || g.Hash != w.Hash ||
			!bytes.Equal(g.Payload, w.Payload) {
			t.Fatalf("ScanAll(%q, %q) entry %d = %+v, ReadAll's %+v (%v)", name, id, i, g, w, err)
		}
	}
}

// sameEntry compares two entries ignoring Seq, and payloads by decoded value,
// since a JSONB column normalises JSON text.
func sameEntry(got, want events.Entry) error {
	if got.Ts != want.Ts || got.Name != want.Name || got.SandboxID != want.SandboxID ||
		got.StepIndex != want.StepIndex || got.Event != want.Event || got.Error != want.Error ||
		got.Actor != want.Actor {
		return fmt.Errorf("got %+v, want %+v", got, want)
	}
	if (got.Branch == nil) != (want.Branch == nil) || (got.Branch != nil && *got.Branch != *want.Branch) {
		return fmt.Errorf("branch: got %v, want %v", fmtBranch(got.Branch), fmtBranch(want.Branch))
	}
	return samePayload(got.Payload, want.Payload)
}

func fmtBranch(b *int) string {
	if b == nil {
		return "absent"
	}
	return fmt.Sprint(*b)
}

func samePayload(got, want json.RawMessage) error {
	if (got == nil) != (want == nil) {
		return fmt.Errorf("payload: got %s, want %s (nil vs non-nil)", trunc(got), trunc(want))
	}
	if want == nil {
		return nil
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		return fmt.Errorf("payload %s does not decode: %v", trunc(got), err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		return fmt.Errorf("want payload %s does not decode: %v", trunc(want), err)
	}
	if !reflect.DeepEqual(g, w) {
		return fmt.Errorf("payload: got %s, want %s", trunc(got), trunc(want))
	}
	return nil
}

func trunc(b []byte) string {
	if b == nil {
		return "<nil>"
	}
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

func sameEntries(t *testing.T, got, want []events.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("len = %d, want %d", len(got), len(want))
	}
	for i := range want {
		if err := sameEntry(got[i], want[i]); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
}

func testRoundTrip(t *testing.T, s adapters.Ledger) {
	a := []events.Entry{
		entry(T0, "job", "sbx-1", events.SandboxLevel, events.SandboxCreated),
		entry(T0+1, "job", "sbx-1", 1, events.ExecStarted),
		entry(T0+2, "job", "sbx-1", 1, events.ExecOutput),
		entry(T0+3, "job", "sbx-1", 1, events.ExecCompleted),
		entry(T0+4, "job", "sbx-1", events.SandboxLevel, events.SandboxPaused),
		entry(T0+5, "job", "sbx-1", events.SandboxLevel, events.SandboxClosed),
	}
	// Other sessions sharing the name or the sandbox id must not leak in.
	mustAppend(t, s, entry(T0, "job", "sbx-2", events.SandboxLevel, events.SandboxCreated))
	mustAppend(t, s, a[:3]...)
	mustAppend(t, s, entry(T0+2, "other", "sbx-1", events.SandboxLevel, events.SandboxCreated))
	mustAppend(t, s, a[3:]...)

	got := mustRead(t, s, "job", "sbx-1")
	sameEntries(t, got, a)
	seen := map[uint64]bool{}
	for i, e := range got {
		if e.Seq == 0 {
			t.Fatalf("entry %d: Seq = 0, want the row's position", i)
		}
		if seen[e.Seq] {
			t.Fatalf("entry %d: Seq %d seen twice", i, e.Seq)
		}
		seen[e.Seq] = true
		if i > 0 && e.Seq <= got[i-1].Seq {
			t.Fatalf("entry %d: Seq %d after %d, want increasing in append order", i, e.Seq, got[i-1].Seq)
		}
	}
	if got := mustRead(t, s, "job", "sbx-3"); len(got) != 0 {
		t.Fatalf("ReadAll of an unknown session = %d entries, want 0", len(got))
	}
	if got := mustRead(t, s, "other", "sbx-1"); len(got) != 1 {
		t.Fatalf("ReadAll(other, sbx-1) = %d entries, want 1", len(got))
	}
}

func testSameMillisecond(t *testing.T, s adapters.Ledger) {
	var want []events.Entry
	for i := range 50 {
		e := events.New(T0, "job", "sbx-1", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte(fmt.Sprintf("chunk %02d", i))))
		want = append(want, e)
	}
	mustAppend(t, s, want...)
	sameEntries(t, mustRead(t, s, "job", "sbx-1"), want)
}

// testHashChain: every entry is chained after the one appended before it in
// its session (append order, whatever the ts), alone or in a batch; a
// session's first entry keeps the PrevHash it names (a fork's parent head).
func testHashChain(t *testing.T, s adapters.Ledger) {
	in := []events.Entry{
		entry(T0+20, "job", "sbx-1", events.SandboxLevel, events.SandboxCreated),
		entry(T0+10, "job", "sbx-1", 1, events.ExecStarted), // out of ts order
	}
	mustAppend(t, s, in...)
	if err := s.AppendBatch(t.Context(), []events.Entry{
		entry(T0+30, "job", "sbx-1", 1, events.ExecOutput),
		entry(T0+30, "job", "sbx-2", events.SandboxLevel, events.SandboxCreated),
		entry(T0+31, "job", "sbx-1", 1, events.ExecCompleted),
	}); err != nil {
		t.Fatal(err)
	}
	got := mustRead(t, s, "job", "sbx-1")
	slices.SortFunc(got, func(a, b events.Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	prev := ""
	for i, e := range got {
		h, err := events.ChainHash(e, prev)
		if err != nil || e.PrevHash != prev || e.Hash != h {
			t.Fatalf("entry %d (%s): prevHash %q, hash %q; want %q, %q (%v)", i, e.Event, e.PrevHash, e.Hash, prev, h, err)
		}
		prev = e.Hash
	}
	// A fork's first entry names its parent's head.
	fork := entry(T0+40, "fork", "sbx-3", events.SandboxLevel, events.SandboxCreated)
	fork.PrevHash = prev
	mustAppend(t, s, fork)
	if got := mustRead(t, s, "fork", "sbx-3"); len(got) != 1 || got[0].PrevHash != prev || got[0].Hash == "" {
		t.Fatalf("fork's first entry = %+v; want PrevHash %s", got, prev)
	}
}

func testTsOrder(t *testing.T, s adapters.Ledger) {
	// Appended out of ts order: read back by ts, ties in append order.
	in := []events.Entry{
		entry(T0+20, "job", "sbx-1", 2, events.ExecStarted),
		entry(T0+10, "job", "sbx-1", 1, events.ExecStarted),
		entry(T0+20, "job", "sbx-1", 2, events.ExecOutput),
		entry(T0+10, "job", "sbx-1", 1, events.ExecOutput),
		entry(T0, "job", "sbx-1", events.SandboxLevel, events.SandboxCreated),
	}
	mustAppend(t, s, in...)
	sameEntries(t, mustRead(t, s, "job", "sbx-1"), []events.Entry{in[4], in[1], in[3], in[0], in[2]})
}

func testPayloads(t *testing.T, s adapters.Ledger) {
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	tests := []struct {
		name    string
		payload json.RawMessage
	}{
		{"absent", nil},
		{"json null", json.RawMessage(`null`)},
		{"nested", json.RawMessage(`{"seq":1,"type":"stdout","text":"x","extra":{"a":[1,2,{"b":null,"c":true}],"d":1.5e3,"e":""}}`)},
		{"unicode", json.RawMessage(`{"seq":1,"type":"stdout","text":"héllo 👋 \u00e9 日本語 \"q\" \\ \n\t"}`)},
		{"escaped nul and lone surrogate-free controls", json.RawMessage(`{"seq":1,"type":"stdout","text":"a\u0001b"}`)},
		{"1 MiB", json.RawMessage(`{"seq":1,"type":"stdout","text":"` + big + `"}`)},
	}
	var want []events.Entry
	for i, tt := range tests {
		want = append(want, events.Entry{Ts: T0 + int64(i), Name: "job", SandboxID: "sbx-1", StepIndex: 1, Event: events.ExecOutput, Payload: tt.payload})
	}
	mustAppend(t, s, want...)
	got := mustRead(t, s, "job", "sbx-1")
	if len(got) != len(tests) {
		t.Fatalf("len = %d, want %d", len(got), len(tests))
	}
	for i, tt := range tests {
		if err := sameEntry(got[i], want[i]); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	if !bytes.Equal(bytes.TrimSpace(got[1].Payload), []byte("null")) {
		t.Errorf("json null payload read back as %q, want the literal null", got[1].Payload)
	}
	// Sandbox-level events without a payload.
	e := events.Entry{Ts: T0, Name: "job", SandboxID: "sbx-2", StepIndex: -1, Event: events.SandboxClosed}
	mustAppend(t, s, e)
	if got := mustRead(t, s, "job", "sbx-2"); len(got) != 1 || got[0].Payload != nil {
		t.Fatalf("ReadAll = %+v, want one entry with a nil payload", got)
	}
}

func testBinaryOutput(t *testing.T, s adapters.Ledger) {
	chunks := [][]byte{
		{0xff, 0xfe, 'a', 0x00, 0x80},
		[]byte("valid ✓"),
		{0xe2, 0x82}, // a truncated multi-byte sequence
	}
	for i, c := range chunks {
		mustAppend(t, s, events.New(T0+int64(i), "job", "sbx-1", 1, events.ExecOutput, events.NewOutput(1, events.Stderr, c)))
	}
	got := mustRead(t, s, "job", "sbx-1")
	if len(got) != len(chunks) {
		t.Fatalf("len = %d, want %d", len(got), len(chunks))
	}
	for i, e := range got {
		var p events.ExecOutputPayload
		if err := e.Decode(&p); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if !bytes.Equal(p.Bytes(), chunks[i]) || p.Type != events.Stderr {
			t.Fatalf("chunk %d = %q (%s), want %q (stderr)", i, p.Bytes(), p.Type, chunks[i])
		}
	}
}

func testBranchAndError(t *testing.T, s adapters.Ledger) {
	zero, one := 0, 1
	in := []events.Entry{entry(T0, "job", "sbx-1", 1, events.ExecStarted), entry(T0+1, "job", "sbx-1", 1, events.ExecStarted), entry(T0+2, "job", "sbx-1", 1, events.ExecStarted)}
	in[1].Branch = &zero
	in[2].Branch = &one
	in[2].Error = "boom: \"quoted\"\nline 2"
	mustAppend(t, s, in...)
	sameEntries(t, mustRead(t, s, "job", "sbx-1"), in)
}

// actors are actor names as the SDK and the executors write them, "" (none,
// as the TypeScript SDK writes) and the longest valid one among them.
var actors = []string{
	"alice via executor-3", "", "zoë@hôte-日本", `o'brien "quoted"; DROP TABLE x;--`,
	strings.Repeat("é", events.MaxActorLen/2),
}

// testActor checks each entry's actor reads back as written, appended one by
// one and in a batch, and on the checkpoint reads; an entry without one
// reads back without one.
func testActor(t *testing.T, s adapters.Ledger) {
	var in []events.Entry
	for i, a := range actors {
		e := entry(T0+int64(i), "job", "sbx-actor", i+1, events.ExecStarted)
		e.Actor = a
		in = append(in, e)
	}
	mustAppend(t, s, in[:2]...)
	if err := s.AppendBatch(ctx(t), in[2:]); err != nil {
		t.Fatal(err)
	}
	cp := checkpoint(T0+100, "job", "sbx-actor", "snap-a", "")
	cp.Actor = "bob@build-host"
	mustAppend(t, s, cp)
	in = append(in, cp)
	sameEntries(t, mustRead(t, s, "job", "sbx-actor"), in)
	last, err := s.LastCheckpoint(ctx(t), "job", "sbx-actor")
	if err != nil || last == nil {
		t.Fatalf("LastCheckpoint = %v, %v", last, err)
	}
	if got, want := last.Actor, cp.Actor; got != want {
		t.Fatalf("LastCheckpoint actor = %q, want %q", got, want)
	}
}

// oddNames are session names that break naive SQL or string handling.
var oddNames = []string{
	`agent "quoted"; DROP TABLE alineo_events;--`,
	"it's",
	"line\nbreak\ttab",
	"emoji 👋🏽 日本",
	`back\slash %_ like`,
}

func testOddNames(t *testing.T, s adapters.Ledger) {
	for i, n := range oddNames {
		id := fmt.Sprintf("sbx-%d'\"", i)
		mustAppend(t, s, entry(T0+int64(i), n, id, events.SandboxLevel, events.SandboxCreated))
		got := mustRead(t, s, n, id)
		if len(got) != 1 || got[0].Name != n || got[0].SandboxID != id {
			t.Fatalf("ReadAll(%q, %q) = %+v, want one entry with the same name and id", n, id, got)
		}
	}
	// A LIKE pattern must not match: names compare exactly.
	if got := mustRead(t, s, `back\slash %`, "sbx-4'\""); len(got) != 0 {
		t.Fatalf("ReadAll with a prefix of a name = %d entries, want 0", len(got))
	}
}

func testOddNamesDetails(t *testing.T, s adapters.Store) {
	names := oddNames
	for i, n := range names {
		id := fmt.Sprintf("sbx-%d'\"", i)
		mustAppend(t, s, entry(T0+int64(i), n, id, events.SandboxLevel, events.SandboxCreated))
		d, err := s.GetSandboxDetails(ctx(t), n, id)
		if err != nil || d == nil || d.Name != n || d.SandboxID != id {
			t.Fatalf("GetSandboxDetails(%q, %q) = %+v, %v", n, id, d, err)
		}
	}
	all, err := s.ListAllSandboxDetails(ctx(t), adapters.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(all), len(names); got != want {
		t.Fatalf("ListAllSandboxDetails = %d sessions, want %d", got, want)
	}
	if err := s.SaveEnvironment(ctx(t), adapters.EnvironmentRecord{Name: names[0], SnapshotID: "s", Image: "i'm", BuiltAt: T0}); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.GetEnvironment(ctx(t), names[0]); err != nil || rec == nil || rec.Name != names[0] || rec.Image != "i'm" {
		t.Fatalf("GetEnvironment = %+v, %v", rec, err)
	}
}

// invalidEntries are edits that make an entry fail events.Validate, and the
// field its *events.ValidationError names.
var invalidEntries = []struct {
	name  string
	edit  func(*events.Entry)
	field string
}{
	{"empty name", func(e *events.Entry) { e.Name = "" }, "name"},
	{"empty sandbox id", func(e *events.Entry) { e.SandboxID = "" }, "sandboxId"},
	{"unknown event", func(e *events.Entry) { e.Event = "exec_finished" }, "event"},
	{"payload not json", func(e *events.Entry) { e.Payload = json.RawMessage(`{"seq":`) }, "payload"},
	{"zero ts", func(e *events.Entry) { e.Ts = 0 }, "ts"},
	{"negative ts", func(e *events.Entry) { e.Ts = -1 }, "ts"},
	{"actor too long", func(e *events.Entry) { e.Actor = strings.Repeat("a", events.MaxActorLen+1) }, "actor"},
	{"actor not utf-8", func(e *events.Entry) { e.Actor = "al\xffice" }, "actor"},
}

// appendInvalid appends each of invalidEntries, checking each is refused.
func appendInvalid(t *testing.T, s adapters.Ledger) {
	for _, tt := range invalidEntries {
		t.Run(tt.name, func(t *testing.T) {
			e := entry(T0, "job", "sbx-bad", 1, events.ExecCompleted)
			tt.edit(&e)
			err := s.Append(ctx(t), e)
			checkInvalid(t, err, tt.field)
		})
	}
}

func testInvalidEntries(t *testing.T, s adapters.Ledger) {
	appendInvalid(t, s)
	if got := mustRead(t, s, "job", "sbx-bad"); len(got) != 0 {
		t.Fatalf("invalid entries wrote %d rows, want 0", len(got))
	}
}

func testInvalidEntriesDetails(t *testing.T, s adapters.Store) {
	appendInvalid(t, s)
	if d, err := s.GetSandboxDetails(ctx(t), "job", "sbx-bad"); err != nil || d != nil {
		t.Fatalf("GetSandboxDetails after invalid appends = %+v, %v; want nil, nil", d, err)
	}
}

func checkInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if !errors.Is(err, adapters.ErrInvalidEntry) {
		t.Fatalf("err = %v, want one wrapping ErrInvalidEntry", err)
	}
	var ve *events.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %T %v, want a *events.ValidationError", err, err)
	}
	if ve.Field != field {
		t.Fatalf("ValidationError.Field = %q, want %q", ve.Field, field)
	}
}

// appendBatches appends a session of 2502 entries in two batches and
// returns it.
func appendBatches(t *testing.T, s adapters.Ledger) []events.Entry {
	t.Helper()
	var want []events.Entry
	want = append(want, entry(T0, "job", "sbx-1", -1, events.SandboxCreated))
	for i := range 2500 {
		want = append(want, entry(T0+1+int64(i/10), "job", "sbx-1", 1, events.ExecOutput))
	}
	want = append(want, entry(T0+1000, "job", "sbx-1", 1, events.ExecCompleted))
	if err := s.AppendBatch(ctx(t), want[:1]); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendBatch(ctx(t), want[1:]); err != nil {
		t.Fatal(err)
	}
	return want
}

func testAppendBatch(t *testing.T, s adapters.Ledger) {
	if err := s.AppendBatch(ctx(t), nil); err != nil {
		t.Fatalf("AppendBatch(nil) = %v, want nil", err)
	}
	want := appendBatches(t, s)
	sameEntries(t, mustRead(t, s, "job", "sbx-1"), want)
}

func testAppendBatchDetails(t *testing.T, s adapters.Store) {
	appendBatches(t, s)
	d, err := s.GetSandboxDetails(ctx(t), "job", "sbx-1")
	if err != nil || d == nil {
		t.Fatalf("GetSandboxDetails = %v, %v", d, err)
	}
	if d.ExecCount != 1 || d.StartedAt != T0 {
		t.Fatalf("details = %+v, want ExecCount 1, StartedAt %d", *d, T0)
	}
}

// appendInvalidBatch appends a batch whose last entry is invalid, checking
// it is refused.
func appendInvalidBatch(t *testing.T, s adapters.Ledger) {
	t.Helper()
	es := []events.Entry{
		entry(T0, "job", "sbx-1", -1, events.SandboxCreated),
		entry(T0+1, "job", "sbx-1", 1, events.ExecStarted),
		entry(T0+2, "job", "sbx-1", 1, events.ExecCompleted),
	}
	es[2].Ts = 0
	checkInvalid(t, s.AppendBatch(ctx(t), es), "ts")
}

func testAppendBatchInvalid(t *testing.T, s adapters.Ledger) {
	appendInvalidBatch(t, s)
	if got := mustRead(t, s, "job", "sbx-1"); len(got) != 0 {
		t.Fatalf("a batch with an invalid entry wrote %d rows, want 0", len(got))
	}
}

func testAppendBatchInvalidDetails(t *testing.T, s adapters.Store) {
	appendInvalidBatch(t, s)
	if d, err := s.GetSandboxDetails(ctx(t), "job", "sbx-1"); err != nil || d != nil {
		t.Fatalf("GetSandboxDetails = %+v, %v; want nil, nil", d, err)
	}
}

func checkpoint(ts int64, name, id, snap, tag string) events.Entry {
	return events.New(ts, name, id, events.SandboxLevel, events.CheckpointCreated, events.CheckpointCreatedPayload{SnapshotID: snap, Name: tag})
}

func testLastCheckpoint(t *testing.T, s adapters.Ledger) {
	got, err := s.LastCheckpoint(ctx(t), "job", "sbx-1")
	if err != nil || got != nil {
		t.Fatalf("LastCheckpoint with none = %+v, %v; want nil, nil", got, err)
	}
	mustAppend(t, s,
		entry(T0, "job", "sbx-1", -1, events.SandboxCreated),
		checkpoint(T0+10, "job", "sbx-1", "snap-a", "first"),
		checkpoint(T0+20, "job", "sbx-1", "snap-b", ""),
		checkpoint(T0+20, "job", "sbx-1", "snap-c", "tie, appended later"),
		entry(T0+30, "job", "sbx-1", 2, events.ExecCompleted),
		checkpoint(T0+40, "job", "sbx-2", "snap-other-session", ""),
		checkpoint(T0+50, "other", "sbx-1", "snap-other-name", ""),
	)
	got, err = s.LastCheckpoint(ctx(t), "job", "sbx-1")
	if err != nil || got == nil {
		t.Fatalf("LastCheckpoint = %v, %v", got, err)
	}
	var p events.CheckpointCreatedPayload
	if err := got.Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.SnapshotID != "snap-c" || got.Ts != T0+20 || got.Event != events.CheckpointCreated || got.Seq == 0 {
		t.Fatalf("LastCheckpoint = %+v (%s), want snap-c at T0+20 with a Seq", *got, p.SnapshotID)
	}
}

func testListCheckpoints(t *testing.T, s adapters.Ledger) {
	if got, err := s.ListCheckpoints(ctx(t), "job", "sbx-1"); err != nil || len(got) != 0 {
		t.Fatalf("ListCheckpoints with none = %v, %v", got, err)
	}
	mustAppend(t, s,
		checkpoint(T0+30, "job", "sbx-1", "snap-3", "after-test"),
		checkpoint(T0+10, "job", "sbx-1", "snap-1", "after-install"),
		entry(T0+15, "job", "sbx-1", 1, events.ExecCompleted),
		checkpoint(T0+20, "job", "sbx-1", "snap-2", ""),
		checkpoint(T0+20, "job", "sbx-1", "snap-2b", "tie"),
		checkpoint(T0+25, "job", "sbx-9", "snap-x", "other"),
	)
	got, err := s.ListCheckpoints(ctx(t), "job", "sbx-1")
	if err != nil {
		t.Fatal(err)
	}
	want := []adapters.CheckpointInfo{
		{SnapshotID: "snap-1", Tag: "after-install", CreatedAt: T0 + 10},
		{SnapshotID: "snap-2", CreatedAt: T0 + 20},
		{SnapshotID: "snap-2b", Tag: "tie", CreatedAt: T0 + 20},
		{SnapshotID: "snap-3", Tag: "after-test", CreatedAt: T0 + 30},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ListCheckpoints = %+v, want %+v", got, want)
	}
}

// session appends a whole session: created at start, execs completed, closed
// at end (0: still running).
func session(t *testing.T, s adapters.Ledger, name, id string, start int64, execs int, end int64) {
	t.Helper()
	es := []events.Entry{entry(start, name, id, -1, events.SandboxCreated)}
	for i := 1; i <= execs; i++ {
		es = append(es,
			entry(start+int64(i), name, id, i, events.ExecStarted),
			entry(start+int64(i), name, id, i, events.ExecOutput),
			entry(start+int64(i), name, id, i, events.ExecCompleted))
	}
	es = append(es, entry(start+int64(execs)+1, name, id, execs+1, events.ExecStarted)) // never completed
	if end != 0 {
		es = append(es, entry(end, name, id, -1, events.SandboxClosed))
	}
	mustAppend(t, s, es...)
}

func details(name, id string, start int64, execs int, end int64) adapters.SandboxDetails {
	d := adapters.SandboxDetails{Name: name, SandboxID: id, Status: adapters.StatusRunning, StartedAt: start, ExecCount: execs, RunID: "run-" + id}
	if end != 0 {
		d.Status, d.CompletedAt = adapters.StatusCompleted, end
	}
	return d
}

func checkDetails(t *testing.T, what string, got, want []adapters.SandboxDetails) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func testDetails(t *testing.T, s adapters.Store) {
	session(t, s, "job", "sbx-1", T0, 2, T0+100)
	session(t, s, "job", "sbx-2", T0+10, 3, 0)
	session(t, s, "agent", "sbx-3", T0+20, 0, 0)
	// A session whose sandbox.created has no runId falls back to its id.
	mustAppend(t, s, events.New(T0+30, "agent", "sbx-4", -1, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sbx-4"}))
	// A paused sandbox still counts as running; a second close moves completedAt.
	mustAppend(t, s, entry(T0+40, "job", "sbx-2", -1, events.SandboxPaused))
	mustAppend(t, s, entry(T0+200, "job", "sbx-1", -1, events.SandboxClosed))

	d4 := details("agent", "sbx-4", T0+30, 0, 0)
	d4.RunID = "sbx-4"
	want := []adapters.SandboxDetails{
		d4,
		details("agent", "sbx-3", T0+20, 0, 0),
		details("job", "sbx-2", T0+10, 3, 0),
		details("job", "sbx-1", T0, 2, T0+200),
	}
	got, err := s.ListAllSandboxDetails(ctx(t), adapters.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkDetails(t, "ListAllSandboxDetails", got, want)
	for _, w := range want {
		d, err := s.GetSandboxDetails(ctx(t), w.Name, w.SandboxID)
		if err != nil || d == nil || *d != w {
			t.Fatalf("GetSandboxDetails(%s, %s) = %+v, %v; want %+v", w.Name, w.SandboxID, d, err, w)
		}
	}
	for _, k := range [][2]string{{"job", "sbx-404"}, {"agent", "sbx-1"}} {
		if d, err := s.GetSandboxDetails(ctx(t), k[0], k[1]); err != nil || d != nil {
			t.Fatalf("GetSandboxDetails(%s, %s) of an unknown session = %+v, %v; want nil, nil", k[0], k[1], d, err)
		}
	}
	// Details stay right when sessions are appended as batches.
	var es []events.Entry
	es = append(es, entry(T0+50, "batch", "sbx-5", -1, events.SandboxCreated))
	for i := 1; i <= 4; i++ {
		es = append(es, entry(T0+50+int64(i), "batch", "sbx-5", i, events.ExecCompleted))
	}
	es = append(es, entry(T0+60, "batch", "sbx-5", -1, events.SandboxClosed))
	if err := s.AppendBatch(ctx(t), es); err != nil {
		t.Fatal(err)
	}
	d, err := s.GetSandboxDetails(ctx(t), "batch", "sbx-5")
	if w := details("batch", "sbx-5", T0+50, 4, T0+60); err != nil || d == nil || *d != w {
		t.Fatalf("GetSandboxDetails after AppendBatch = %+v, %v; want %+v", d, err, w)
	}
}

func testDetailsFilters(t *testing.T, s adapters.Store) {
	// 30 sessions: every third completed; run ids shared by pairs.
	var all []adapters.SandboxDetails
	for i := range 30 {
		id := fmt.Sprintf("sbx-%02d", i)
		start := T0 + int64(i)*1000
		var end int64
		if i%3 == 0 {
			end = start + 500
		}
		session(t, s, "job", id, start, i%4, end)
		all = append(all, details("job", id, start, i%4, end))
	}
	// Newest first.
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	filter := func(keep func(adapters.SandboxDetails) bool, limit int) []adapters.SandboxDetails {
		var out []adapters.SandboxDetails
		for _, d := range all {
			if keep(d) && (limit == 0 || len(out) < limit) {
				out = append(out, d)
			}
		}
		return out
	}
	tests := []struct {
		name string
		opts adapters.ListOptions
		want []adapters.SandboxDetails
	}{
		{"none", adapters.ListOptions{}, all},
		{"limit", adapters.ListOptions{Limit: 5}, all[:5]},
		{"limit above count", adapters.ListOptions{Limit: 100}, all},
		{"completed", adapters.ListOptions{Status: adapters.StatusCompleted}, filter(func(d adapters.SandboxDetails) bool { return d.Status == adapters.StatusCompleted }, 0)},
		// The filter applies before the limit: the 3 newest completed, not the completed among the 3 newest.
		{"completed limit 3", adapters.ListOptions{Status: adapters.StatusCompleted, Limit: 3}, filter(func(d adapters.SandboxDetails) bool { return d.Status == adapters.StatusCompleted }, 3)},
		{"running limit 4", adapters.ListOptions{Status: adapters.StatusRunning, Limit: 4}, filter(func(d adapters.SandboxDetails) bool { return d.Status == adapters.StatusRunning }, 4)},
		{"before", adapters.ListOptions{Before: T0 + 10000}, filter(func(d adapters.SandboxDetails) bool { return d.StartedAt < T0+10000 }, 0)},
		{"before limit", adapters.ListOptions{Before: T0 + 20000, Limit: 2}, filter(func(d adapters.SandboxDetails) bool { return d.StartedAt < T0+20000 }, 2)},
		{"before is exclusive", adapters.ListOptions{Before: T0 + 1000}, all[len(all)-1:]},
		{"before and status", adapters.ListOptions{Before: T0 + 20000, Status: adapters.StatusCompleted, Limit: 2}, filter(func(d adapters.SandboxDetails) bool {
			return d.StartedAt < T0+20000 && d.Status == adapters.StatusCompleted
		}, 2)},
		{"run id", adapters.ListOptions{RunID: "run-sbx-07"}, filter(func(d adapters.SandboxDetails) bool { return d.RunID == "run-sbx-07" }, 0)},
		{"nothing matches", adapters.ListOptions{RunID: "run-none"}, nil},
		{"sandbox id", adapters.ListOptions{SandboxID: "sbx-07"}, filter(func(d adapters.SandboxDetails) bool { return d.SandboxID == "sbx-07" }, 0)},
		{"sandbox id and other status", adapters.ListOptions{SandboxID: "sbx-07", Status: otherStatus(all, "sbx-07")}, nil},
		{"unknown sandbox id", adapters.ListOptions{SandboxID: "sbx-none"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.ListAllSandboxDetails(ctx(t), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			checkDetails(t, "ListAllSandboxDetails", got, tt.want)
			got, err = s.ListSandboxDetails(ctx(t), "job", tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			checkDetails(t, "ListSandboxDetails", got, tt.want)
		})
	}
}

func testDetailsByName(t *testing.T, s adapters.Store) {
	session(t, s, "a", "sbx-1", T0, 1, 0)
	session(t, s, "b", "sbx-2", T0+1, 1, T0+5)
	session(t, s, "a", "sbx-3", T0+2, 2, T0+9)
	session(t, s, "b", "sbx-1", T0+3, 0, 0) // same id, other name: another session
	// Equal start times are ordered by name, then sandbox id.
	session(t, s, "b", "sbx-5", T0+4, 0, 0)
	session(t, s, "a", "sbx-6", T0+4, 0, 0)
	session(t, s, "a", "sbx-4", T0+4, 0, 0)

	got, err := s.ListSandboxDetails(ctx(t), "a", adapters.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkDetails(t, "ListSandboxDetails(a)", got, []adapters.SandboxDetails{
		details("a", "sbx-4", T0+4, 0, 0),
		details("a", "sbx-6", T0+4, 0, 0),
		details("a", "sbx-3", T0+2, 2, T0+9),
		details("a", "sbx-1", T0, 1, 0),
	})
	got, err = s.ListSandboxDetails(ctx(t), "b", adapters.ListOptions{Status: adapters.StatusRunning, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkDetails(t, "ListSandboxDetails(b, running, 1)", got, []adapters.SandboxDetails{details("b", "sbx-5", T0+4, 0, 0)})
	got, err = s.ListAllSandboxDetails(ctx(t), adapters.ListOptions{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	checkDetails(t, "ListAllSandboxDetails(limit 4)", got, []adapters.SandboxDetails{
		details("a", "sbx-4", T0+4, 0, 0),
		details("a", "sbx-6", T0+4, 0, 0),
		details("b", "sbx-5", T0+4, 0, 0),
		details("b", "sbx-1", T0+3, 0, 0),
	})
	if got, err := s.ListSandboxDetails(ctx(t), "nobody", adapters.ListOptions{}); err != nil || len(got) != 0 {
		t.Fatalf("ListSandboxDetails(nobody) = %v, %v; want none", got, err)
	}
}

func testDetailsWithoutCreated(t *testing.T, s adapters.Store) {
	// A connect()-style handle writes no sandbox.created: it has no details.
	mustAppend(t, s,
		entry(T0, "conn", "sbx-1", 1, events.ExecStarted),
		entry(T0+1, "conn", "sbx-1", 1, events.ExecCompleted),
		entry(T0+2, "conn", "sbx-1", -1, events.SandboxClosed),
	)
	if d, err := s.GetSandboxDetails(ctx(t), "conn", "sbx-1"); err != nil || d != nil {
		t.Fatalf("GetSandboxDetails = %+v, %v; want nil, nil", d, err)
	}
	if got, err := s.ListAllSandboxDetails(ctx(t), adapters.ListOptions{}); err != nil || len(got) != 0 {
		t.Fatalf("ListAllSandboxDetails = %+v, %v; want none", got, err)
	}
	// Its sandbox.created arriving late (out of ts order) counts everything so far.
	mustAppend(t, s, entry(T0-5, "conn", "sbx-1", -1, events.SandboxCreated))
	d, err := s.GetSandboxDetails(ctx(t), "conn", "sbx-1")
	if w := details("conn", "sbx-1", T0-5, 1, T0+2); err != nil || d == nil || *d != w {
		t.Fatalf("GetSandboxDetails = %+v, %v; want %+v", d, err, w)
	}
}

// deleteOne writes three sessions (two sharing a sandbox id, two a name),
// deletes job/sbx-1 and returns how many entries the others held.
func deleteOne(t *testing.T, s adapters.Ledger) (before2, before3 int) {
	t.Helper()
	session(t, s, "job", "sbx-1", T0, 2, T0+50)
	session(t, s, "job", "sbx-2", T0+1, 1, 0)
	session(t, s, "other", "sbx-1", T0+2, 1, 0)
	mustAppend(t, s, checkpoint(T0+3, "job", "sbx-1", "snap", "t"))
	before2, before3 = len(mustRead(t, s, "job", "sbx-2")), len(mustRead(t, s, "other", "sbx-1"))
	if err := s.DeleteSandbox(ctx(t), "job", "sbx-1"); err != nil {
		t.Fatal(err)
	}
	return before2, before3
}

func testDeleteSandbox(t *testing.T, s adapters.Ledger) {
	before2, before3 := deleteOne(t, s)
	if got := mustRead(t, s, "job", "sbx-1"); len(got) != 0 {
		t.Fatalf("ReadAll after delete = %d entries, want 0", len(got))
	}
	if cp, err := s.LastCheckpoint(ctx(t), "job", "sbx-1"); err != nil || cp != nil {
		t.Fatalf("LastCheckpoint after delete = %+v, %v; want nil, nil", cp, err)
	}
	if got := len(mustRead(t, s, "job", "sbx-2")); got != before2 {
		t.Fatalf("job/sbx-2 has %d entries after deleting job/sbx-1, want %d", got, before2)
	}
	if got := len(mustRead(t, s, "other", "sbx-1")); got != before3 {
		t.Fatalf("other/sbx-1 has %d entries after deleting job/sbx-1, want %d", got, before3)
	}
	if err := s.DeleteSandbox(ctx(t), "job", "sbx-404"); err != nil {
		t.Fatalf("DeleteSandbox of an unknown session = %v, want nil", err)
	}
	// The session can be written again from scratch.
	session(t, s, "job", "sbx-1", T0+100, 1, 0)
	if got, want := len(mustRead(t, s, "job", "sbx-1")), 5; got != want {
		t.Fatalf("ReadAll after rewrite = %d entries, want %d", got, want)
	}
}

func testDeleteSandboxDetails(t *testing.T, s adapters.Store) {
	deleteOne(t, s)
	if d, err := s.GetSandboxDetails(ctx(t), "job", "sbx-1"); err != nil || d != nil {
		t.Fatalf("GetSandboxDetails after delete = %+v, %v; want nil, nil", d, err)
	}
	all, err := s.ListAllSandboxDetails(ctx(t), adapters.ListOptions{})
	if err != nil || len(all) != 2 {
		t.Fatalf("ListAllSandboxDetails after delete = %+v, %v; want 2 sessions", all, err)
	}
	// The session can be written again from scratch.
	session(t, s, "job", "sbx-1", T0+100, 1, 0)
	d, err := s.GetSandboxDetails(ctx(t), "job", "sbx-1")
	if w := details("job", "sbx-1", T0+100, 1, 0); err != nil || d == nil || *d != w {
		t.Fatalf("GetSandboxDetails after rewrite = %+v, %v; want %+v", d, err, w)
	}
}

func testEnvironments(t *testing.T, s adapters.Store) {
	c := ctx(t)
	if rec, err := s.GetEnvironment(c, "node"); err != nil || rec != nil {
		t.Fatalf("GetEnvironment of an unknown name = %+v, %v; want nil, nil", rec, err)
	}
	if err := s.DeleteEnvironment(c, "node"); err != nil {
		t.Fatalf("DeleteEnvironment of an unknown name = %v, want nil", err)
	}
	if got, err := s.ListEnvironments(c); err != nil || len(got) != 0 {
		t.Fatalf("ListEnvironments when empty = %v, %v", got, err)
	}
	node := adapters.EnvironmentRecord{Name: "node", SnapshotID: "snap-1", Image: "node:20", BuiltAt: T0, Fingerprint: "sha256:aa"}
	py := adapters.EnvironmentRecord{Name: "python", SnapshotID: "snap-2", Image: "python:3.12", BuiltAt: T0 + 10}
	for _, rec := range []adapters.EnvironmentRecord{node, py} {
		if err := s.SaveEnvironment(c, rec); err != nil {
			t.Fatal(err)
		}
	}
	if rec, err := s.GetEnvironment(c, "node"); err != nil || rec == nil || *rec != node {
		t.Fatalf("GetEnvironment = %+v, %v; want %+v", rec, err, node)
	}
	if rec, err := s.GetEnvironment(c, "python"); err != nil || rec == nil || *rec != py {
		t.Fatalf("GetEnvironment = %+v, %v; want %+v (no fingerprint)", rec, err, py)
	}
	got, err := s.ListEnvironments(c)
	if want := []adapters.EnvironmentRecord{py, node}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ListEnvironments = %+v, %v; want %+v", got, err, want)
	}
	// Save is an upsert: node rebuilt later, with another fingerprint.
	node2 := adapters.EnvironmentRecord{Name: "node", SnapshotID: "snap-3", Image: "node:22", BuiltAt: T0 + 20, Fingerprint: "sha256:bb"}
	if err := s.SaveEnvironment(c, node2); err != nil {
		t.Fatal(err)
	}
	got, err = s.ListEnvironments(c)
	if want := []adapters.EnvironmentRecord{node2, py}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ListEnvironments after upsert = %+v, %v; want %+v", got, err, want)
	}
	// Clearing the fingerprint is saved too.
	node2.Fingerprint = ""
	if err := s.SaveEnvironment(c, node2); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.GetEnvironment(c, "node"); err != nil || rec == nil || *rec != node2 {
		t.Fatalf("GetEnvironment = %+v, %v; want %+v", rec, err, node2)
	}
	if err := s.DeleteEnvironment(c, "node"); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.GetEnvironment(c, "node"); err != nil || rec != nil {
		t.Fatalf("GetEnvironment after delete = %+v, %v; want nil, nil", rec, err)
	}
	got, err = s.ListEnvironments(c)
	if want := []adapters.EnvironmentRecord{py}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ListEnvironments after delete = %+v, %v; want %+v", got, err, want)
	}
	if err := s.SaveEnvironment(c, adapters.EnvironmentRecord{SnapshotID: "x"}); !errors.Is(err, adapters.ErrInvalidEntry) {
		t.Fatalf("SaveEnvironment without a name = %v, want ErrInvalidEntry", err)
	}
}

func testConcurrentAppends(t *testing.T, s adapters.Ledger) {
	const workers, per = 8, 60
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("sbx-%d", w)
			for i := range per {
				// All workers share the session "shared" too, at the same ts.
				e := events.New(T0+int64(i), "job", id, 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte(fmt.Sprint(i))))
				shared := events.New(T0, "shared", "sbx", 1, events.ExecOutput, events.NewOutput(w, events.Stdout, []byte(fmt.Sprint(i))))
				var err error
				if i%10 == 9 {
					err = s.AppendBatch(ctx(t), []events.Entry{e, shared})
				} else if err = s.Append(ctx(t), e); err == nil {
					err = s.Append(ctx(t), shared)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d append %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := range workers {
		got := mustRead(t, s, "job", fmt.Sprintf("sbx-%d", w))
		if len(got) != per {
			t.Fatalf("worker %d: %d entries, want %d", w, len(got), per)
		}
		for i, e := range got {
			if e.Ts != T0+int64(i) {
				t.Fatalf("worker %d: entry %d has ts %d, want %d", w, i, e.Ts, T0+int64(i))
			}
		}
	}
	// In the shared session each worker's entries keep that worker's order.
	shared := mustRead(t, s, "shared", "sbx")
	if len(shared) != workers*per {
		t.Fatalf("shared session: %d entries, want %d", len(shared), workers*per)
	}
	next := make([]int, workers)
	for _, e := range shared {
		var p events.ExecOutputPayload
		if err := e.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if got, want := p.Text, fmt.Sprint(next[p.Seq]); got != want {
			t.Fatalf("worker %d: read %s, want %s (append order lost)", p.Seq, got, want)
		}
		next[p.Seq]++
	}
}

// testScan checks what a Scanner's ScanAll does besides handing ReadAll's
// entries, which mustRead checks on every read of the suite: fn's error
// ends the scan and is returned as it is; an unknown session hands nothing;
// a canceled context and a closed ledger fail it. For a Ledger that is no
// Scanner there is nothing to check: ReadAll is its only read.
func testScan(t *testing.T, s adapters.Ledger) {
	sc, ok := s.(adapters.Scanner)
	if !ok {
		return
	}
	in := []events.Entry{entry(T0, "job", "sbx-1", events.SandboxLevel, events.SandboxCreated)}
	for step := 1; step <= 1000; step++ { // several of a scan's batches
		ts := T0 + int64(step)
		in = append(in, entry(ts, "job", "sbx-1", step, events.ExecStarted),
			entry(ts, "job", "sbx-1", step, events.ExecOutput), entry(ts, "job", "sbx-1", step, events.ExecCompleted))
	}
	mustAppend(t, s, in...)
	sameEntries(t, mustRead(t, s, "job", "sbx-1"), in)

	stop := errors.New("stop")
	n := 0
	err := sc.ScanAll(ctx(t), "job", "sbx-1", func(*events.Entry) error {
		if n++; n == 1500 {
			return stop
		}
		return nil
	})
	if err != stop || n != 1500 {
		t.Errorf("ScanAll whose fn fails at the 1500th entry = %v after %d entries, want that error after 1500", err, n)
	}
	for _, id := range []string{"sbx-none", ""} {
		if err := sc.ScanAll(ctx(t), "job", id, func(e *events.Entry) error {
			return fmt.Errorf("handed %+v", *e)
		}); err != nil {
			t.Errorf("ScanAll of unknown session %q = %v, want nothing handed and no error", id, err)
		}
	}
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sc.ScanAll(c, "job", "sbx-1", func(*events.Entry) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("ScanAll with a canceled ctx = %v, want context.Canceled", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sc.ScanAll(ctx(t), "job", "sbx-1", func(*events.Entry) error { return nil }); !errors.Is(err, adapters.ErrClosed) {
		t.Errorf("ScanAll after Close = %v, want ErrClosed", err)
	}
}

func testCanceledContext(t *testing.T, s adapters.Ledger) {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Append(c, entry(T0, "job", "sbx-1", -1, events.SandboxCreated))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a canceled ctx = %v, want context.Canceled", err)
	}
	if _, err := s.ReadAll(c, "job", "sbx-1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("ReadAll with a canceled ctx = %v, want context.Canceled", err)
	}
	if got := mustRead(t, s, "job", "sbx-1"); len(got) != 0 {
		t.Fatalf("an append with a canceled ctx wrote %d rows", len(got))
	}
}

// closeTwice appends an entry, then closes s twice.
func closeTwice(t *testing.T, s adapters.Ledger) {
	t.Helper()
	mustAppend(t, s, entry(T0, "job", "sbx-1", -1, events.SandboxCreated))
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
}

func checkClosed(t *testing.T, calls map[string]func() error) {
	t.Helper()
	for name, f := range calls {
		if err := f(); !errors.Is(err, adapters.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

func testClose(t *testing.T, s adapters.Ledger) {
	c := ctx(t)
	closeTwice(t, s)
	e := entry(T0+1, "job", "sbx-1", 1, events.ExecStarted)
	checkClosed(t, map[string]func() error{
		"Append":      func() error { return s.Append(c, e) },
		"AppendBatch": func() error { return s.AppendBatch(c, []events.Entry{e}) },
		"ReadAll":     func() error { _, err := s.ReadAll(c, "job", "sbx-1"); return err },
		"LastCheckpoint": func() error {
			_, err := s.LastCheckpoint(c, "job", "sbx-1")
			return err
		},
		"DeleteSandbox":   func() error { return s.DeleteSandbox(c, "job", "sbx-1") },
		"ListCheckpoints": func() error { _, err := s.ListCheckpoints(c, "job", "sbx-1"); return err },
	})
}

func testCloseReadModel(t *testing.T, s adapters.Store) {
	c := ctx(t)
	closeTwice(t, s)
	checkClosed(t, map[string]func() error{
		"ListSandboxDetails": func() error {
			_, err := s.ListSandboxDetails(c, "job", adapters.ListOptions{})
			return err
		},
		"ListAllSandboxDetails": func() error {
			_, err := s.ListAllSandboxDetails(c, adapters.ListOptions{})
			return err
		},
		"GetSandboxDetails": func() error { _, err := s.GetSandboxDetails(c, "job", "sbx-1"); return err },
		"GetEnvironment":    func() error { _, err := s.GetEnvironment(c, "x"); return err },
		"SaveEnvironment": func() error {
			return s.SaveEnvironment(c, adapters.EnvironmentRecord{Name: "x", SnapshotID: "s", Image: "i", BuiltAt: 1})
		},
		"DeleteEnvironment": func() error { return s.DeleteEnvironment(c, "x") },
		"ListEnvironments":  func() error { _, err := s.ListEnvironments(c); return err },
	})
}

// otherStatus returns the status that the session of sandbox id in all does
// not have.
func otherStatus(all []adapters.SandboxDetails, id string) adapters.SandboxStatus {
	for _, d := range all {
		if d.SandboxID == id && d.Status == adapters.StatusRunning {
			return adapters.StatusCompleted
		}
	}
	return adapters.StatusRunning
}
