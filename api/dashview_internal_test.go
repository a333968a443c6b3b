package api

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/audit"
	"github.com/alineo-labs/alineo/events"
)

func TestPageOfCutsAtRuneBoundaries(t *testing.T) {
	b := []byte("ab✓cd") // ✓ is 3 bytes: a b [✓✓✓] c d
	for limit, want := range map[int]string{0: "a", 1: "a", 2: "ab", 3: "ab", 4: "ab", 5: "ab✓", 6: "ab✓c", 100: "ab✓cd"} {
		p := pageOf(b, limit)
		if p.Text != want || p.Shown != len(want) || p.Total != len(b) || !p.Exact {
			t.Errorf("pageOf(%d) = %+v, want %q", limit, p, want)
		}
	}
	if p := pageOf([]byte("✓x"), 1); p.Text != "✓" {
		t.Errorf("a rune longer than the limit is taken whole, got %q", p.Text)
	}
	if p := pageOf([]byte{0xff, 'a'}, 10); p.Exact || !utf8.ValidString(p.Text) || p.Shown != 2 {
		t.Errorf("invalid UTF-8: %+v", p)
	}
	if p := pageOf([]byte("a\x00b"), 10); p.Exact || p.Text != "a\uFFFDb" {
		t.Errorf("NUL: %+v", p)
	}
	if p := pageOf(nil, 10); p.Shown != 0 || p.More() {
		t.Errorf("empty: %+v", p)
	}
}

func TestParseExecKey(t *testing.T) {
	for in, want := range map[string]execKey{"1": {1, -1}, "12-3": {12, 3}, "0": {0, -1}} {
		if got, ok := parseExecKey(in); !ok || got != want || got.String() != in {
			t.Errorf("parseExecKey(%q) = %+v, %v", in, got, ok)
		}
	}
	for _, in := range []string{"", "-1", "x", "1-", "1-x", "1--2", "1-2-3"} {
		if k, ok := parseExecKey(in); ok {
			t.Errorf("parseExecKey(%q) = %+v, want an error", in, k)
		}
	}
}

func TestBuildSession(t *testing.T) {
	two := 2
	es := []events.Entry{
		{Seq: 1, Ts: 1000, Event: events.TSSandboxCreated, StepIndex: -1, Payload: []byte(`{"sandboxId":"s","resumedFrom":"p"}`)},
		{Seq: 2, Ts: 1010, Event: events.TSExecStart, StepIndex: 1, Payload: []byte(`{"cmd":"ls","seq":1}`)},
		{Seq: 3, Ts: 1011, Event: events.TSExecEvent, StepIndex: 1, Payload: []byte(`{"seq":1,"type":"init","text":"x"}`)},
		{Seq: 4, Ts: 1012, Event: events.TSExecEvent, StepIndex: 1, Payload: []byte(`{"seq":1,"type":"stdout","text":"a\r\n"}`)},
		events.New(1013, "", "", 1, events.ExecOutput, events.NewOutput(1, events.Stderr, []byte{0xff})),
		{Seq: 6, Ts: 2510, Event: events.TSExecComplete, StepIndex: 1, Payload: []byte(`{"exitCode":2,"seq":1}`)},
		{Seq: 7, Ts: 2600, Event: events.ExecStarted, StepIndex: 2, Branch: &two, Payload: []byte(`{"kind":"code","code":"print(1)","seq":2}`)},
		{Seq: 8, Ts: 2700, Event: events.CheckpointCreated, StepIndex: -1, Payload: []byte(`{"snapshotId":"snap","name":"t"}`)},
		{Seq: 9, Ts: 2800, Event: events.SandboxClosed, StepIndex: -1, Payload: []byte(`{"reason":"taken over","by":"w2","job":"j"}`)},
	}
	v := buildSession(es)
	if len(v.Execs) != 2 || len(v.Markers) != 3 || len(v.Items) != 5 || v.LastSeq != 9 {
		t.Fatalf("execs %d markers %d items %d last %d", len(v.Execs), len(v.Markers), len(v.Items), v.LastSeq)
	}
	x := v.Execs[0]
	if x.Text != "ls" || x.ExitCode != 2 || !x.Done || x.Duration() != "1.50 s" || string(x.Stream(events.Stdout)) != "a\r\n" || string(x.Stream(events.Stderr)) != "\xff" || x.Bytes() != 4 {
		t.Errorf("exec 1 = %+v (duration %q)", x, x.Duration())
	}
	y := v.find(execKey{2, 2})
	if y == nil || y.Kind != "code" || y.Text != "print(1)" || y.Done || y.Duration() != "" || y.Step() != "2-2" {
		t.Errorf("exec 2-2 = %+v", y)
	}
	// The sandbox closed (taken over) before exec 2-2 completed: its attempt
	// died, and it reads as interrupted, not running.
	if !y.Interrupted || y.Running() || !y.Failed() || x.Interrupted || !x.Failed() {
		t.Errorf("exec 2-2 interrupted %v running %v failed %v; exec 1 interrupted %v failed %v, want true false true, false true",
			y.Interrupted, y.Running(), y.Failed(), x.Interrupted, x.Failed())
	}
	// While the session is open, an exec without exec.completed runs.
	ov := buildSession(es[:8])
	if open := ov.find(execKey{2, 2}); open.Interrupted || !open.Running() || open.Failed() {
		t.Errorf("exec 2-2 of the open session: interrupted %v running %v failed %v, want false true false", open.Interrupted, open.Running(), open.Failed())
	}
	if r := relationOf(v.Created); r != (relation{"resumed from", "p"}) {
		t.Errorf("relation = %+v", r)
	}
	if v.Closed == nil || v.Closed.By != "w2" || !strings.Contains(v.Markers[2].Label, "taken over by w2") || !strings.Contains(v.Markers[1].Label, "snap") {
		t.Errorf("markers = %+v", v.Markers)
	}
}

func TestCardOutputCollapses(t *testing.T) {
	x := &execView{Chunks: []chunk{{Stream: events.Stdout, Data: []byte(strings.Repeat("a", cardBytes-1))}, {Stream: events.Stderr, Data: []byte("✓bc")}, {Stream: events.Stdout, Data: []byte("zz")}}}
	c := cardOutput(x)
	if len(c.Chunks) != 2 || c.Chunks[1].Text != "✓" || c.Rest != 4 {
		t.Errorf("card = %d chunks, second %q, rest %d; want the rune whole and 4 bytes left out", len(c.Chunks), c.Chunks[1].Text, c.Rest)
	}
}

func TestTermHTMLKeepsCR(t *testing.T) {
	if got := string(termHTML("a\r\n<b>&\"")); got != "a&#13;\n&lt;b&gt;&amp;&#34;" {
		t.Errorf("termHTML = %q", got)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0 ms", 999 * time.Millisecond: "999 ms", 1500 * time.Millisecond: "1.50 s", 65 * time.Second: "1m5s", -1: "—"} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestSandboxPageChainState: the sandbox page shows a session's chain
// state: chained, unchained (the TypeScript SDK's), or broken at entry N.
func TestSandboxPageChainState(t *testing.T) {
	srv, err := New(Config{Store: memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	var c events.Chain
	var es []events.Entry
	for i, ev := range []events.Event{events.SandboxCreated, events.SandboxPaused, events.SandboxResumed} {
		e, err := c.Link(events.New(int64(1000+i), "n", "S", events.SandboxLevel, ev, nil))
		if err != nil {
			t.Fatal(err)
		}
		e.Seq = uint64(i + 1)
		es = append(es, e)
	}
	unchained := make([]events.Entry, len(es))
	for i, e := range es {
		e.PrevHash, e.Hash = "", ""
		unchained[i] = e
	}
	edited := slices.Clone(es)
	edited[1].Ts++
	d := &adapters.SandboxDetails{Name: "n", SandboxID: "S", Status: adapters.StatusRunning}
	for _, tt := range []struct {
		es   []events.Entry
		want string
	}{
		{es, `data-chain="chained"`},
		{unchained, `data-chain="unchained"`},
		{edited, `broken at entry 2`},
	} {
		rec := httptest.NewRecorder()
		p := sandboxPage{Details: d, View: buildSession(tt.es), Events: tt.es, Chain: audit.Check(tt.es)}
		srv.render(rec, httptest.NewRequest("GET", "/ui/sandboxes/n/S", nil), http.StatusOK, "sandbox.html", page{Title: "n S", Data: p})
		if !strings.Contains(rec.Body.String(), tt.want) {
			t.Errorf("sandbox page lacks %s:\n%s", tt.want, rec.Body.String())
		}
	}
}
