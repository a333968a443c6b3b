package events_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/alineo-labs/alineo/events"
)

func TestAppendCanonicalJSON(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{` { "a" : [ 1 , 2 ] } `, `{"a":[1,2]}`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`"\u003c\u00e9\/"`, `"<é/"`},
		{`"a\"b\\c\n\t\u0001"`, `"a\"b\\c\n\t\u0001"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`"\ud83d"`, `"` + "\uFFFD" + `"`},
		{"\"\xff\"", `"` + "\uFFFD" + `"`},
		{`1.50`, `1.5`},
		{`1e2`, `100`},
		{`-0`, `0`},
		{`-12`, `-12`},
		{`[0,-0,7]`, `[0,0,7]`},
		{`999999999999999`, `999999999999999`},
		{`-999999999999999`, `-999999999999999`},
		{`9007199254740993`, `9007199254740992`},
		{`1e21`, `1e+21`},
		{`0.000001`, `0.000001`},
		{`1e-7`, `1e-7`},
		{`123456789012345678901234`, `1.2345678901234569e+23`},
		{`1e400`, `1e400`},
		{`null`, `null`},
		{`[true,false,{}]`, `[true,false,{}]`},
		{`{"é":1,"z":2,"A":3}`, `{"A":3,"z":2,"é":1}`},
		{"{\"\x9f\":0,\"\x8e\":[]}", `{"` + "\uFFFD" + `":[]}`},
		{"{\"\xff\":0,\"\uffff\":1}", `{"` + "\uFFFD" + `":0,"` + "\uffff" + `":1}`},
	}
	for _, tt := range tests {
		got, err := events.AppendCanonicalJSON(nil, []byte(tt.in))
		if err != nil {
			t.Errorf("AppendCanonicalJSON(%s): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("AppendCanonicalJSON(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a"}`, `[1,]`, `01`, `"abc`, `tru`, `{"a":1}x`, "\"\x01\"", `1.`, `"\x"`} {
		if got, err := events.AppendCanonicalJSON(nil, []byte(bad)); err == nil {
			t.Errorf("AppendCanonicalJSON(%q) = %s, want an error", bad, got)
		}
	}
}

// FuzzAppendCanonicalJSON checks that the canonical form is valid JSON, a
// fixed point, and equal as a value to the input, whenever encoding/json
// accepts the input.
func FuzzAppendCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1,2.5,"x"]}`, `"\u00e9"`, `null`, `-1e-9`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := events.AppendCanonicalJSON(nil, b)
		if valid := json.Valid(b); (err == nil) != valid {
			t.Fatalf("AppendCanonicalJSON(%q) error %v, json.Valid %v", b, err, valid)
		}
		if err != nil {
			return
		}
		if !json.Valid(got) {
			t.Fatalf("canonical form %q of %q is not JSON", got, b)
		}
		again, err := events.AppendCanonicalJSON(nil, got)
		if err != nil || string(again) != string(got) {
			t.Fatalf("canonical form %q is not a fixed point: %q, %v", got, again, err)
		}
		// The same value as encoding/json reads it (it too keeps a repeated
		// key's last value and reads invalid UTF-8 as U+FFFD).
		var in, out any
		if json.Unmarshal(b, &in) == nil {
			if err := json.Unmarshal(got, &out); err != nil || !reflect.DeepEqual(in, out) {
				t.Fatalf("canonical form %q of %q reads as %#v, want %#v (%v)", got, b, out, in, err)
			}
		}
	})
}

// golden is the entry of the documented test vector (docs/architecture.md §4.10).
func golden() events.Entry {
	branch := 2
	return events.Entry{
		Ts: 1700000000000, Name: "build", SandboxID: "sbx-1", StepIndex: 3, Branch: &branch,
		Event: events.ExecOutput, Payload: json.RawMessage(`{"type":"stdout", "seq":1, "text":"hi\u003c"}`),
		Actor: "alice@host",
	}
}

// The vectors of docs/architecture.md §4.10; another implementation of the
// encoding must reproduce them.
const (
	goldenFirst  = "sha256:88755512cf61a79955e75878aefd57143b731dac024d3ad8085e71dd46037d4a"
	goldenSecond = "sha256:9197908e21a47a0cbf3ada7f98873b65e92496685f4bf49ff937cd6f005d7216"
)

func TestChainHashGolden(t *testing.T) {
	h1, err := events.ChainHash(golden(), "")
	if err != nil {
		t.Fatal(err)
	}
	e2 := events.New(1700000000001, "build", "sbx-1", events.SandboxLevel, events.SandboxClosed, nil)
	h2, err := events.ChainHash(e2, h1)
	if err != nil {
		t.Fatal(err)
	}
	if h1 != goldenFirst || h2 != goldenSecond {
		t.Fatalf("golden hashes = %s, %s; want %s, %s", h1, h2, goldenFirst, goldenSecond)
	}
}

func TestChainHashCoversEveryField(t *testing.T) {
	base, err := events.ChainHash(golden(), "")
	if err != nil {
		t.Fatal(err)
	}
	other := 3
	edits := map[string]func(*events.Entry){
		"sandboxId": func(e *events.Entry) { e.SandboxID = "sbx-2" },
		"name":      func(e *events.Entry) { e.Name = "buil" },
		"step":      func(e *events.Entry) { e.StepIndex = 4 },
		"branch":    func(e *events.Entry) { e.Branch = &other },
		"no branch": func(e *events.Entry) { e.Branch = nil },
		"event":     func(e *events.Entry) { e.Event = events.ExecStarted },
		"payload":   func(e *events.Entry) { e.Payload = json.RawMessage(`{"type":"stdout","seq":1,"text":"hi>"}`) },
		"null":      func(e *events.Entry) { e.Payload = json.RawMessage(`null`) },
		"nil":       func(e *events.Entry) { e.Payload = nil },
		"error":     func(e *events.Entry) { e.Error = "x" },
		"actor":     func(e *events.Entry) { e.Actor = "mallory@host" },
		"no actor":  func(e *events.Entry) { e.Actor = "" },
		"ts":        func(e *events.Entry) { e.Ts++ },
		// Fields shift between name and sandbox id: the length prefixes keep them apart.
		"shift": func(e *events.Entry) { e.SandboxID, e.Name = "sbx-1b", "uild" },
	}
	for what, edit := range edits {
		e := golden()
		edit(&e)
		got, err := events.ChainHash(e, "")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got == base {
			t.Errorf("editing %s leaves the hash unchanged", what)
		}
	}
	if got, _ := events.ChainHash(golden(), base); got == base {
		t.Error("the previous hash is not covered")
	}
	// Not covered: what a store assigns or reformats.
	e := golden()
	e.Seq, e.Trace = 42, "00-abc"
	e.Payload = json.RawMessage(`{"text":"hi<","seq":1.0,"type":"stdout"}`)
	if got, _ := events.ChainHash(e, ""); got != base {
		t.Errorf("hash after Seq, Trace and JSON formatting changed = %s, want %s", got, base)
	}
}

func TestChainHashRejectsBadPayload(t *testing.T) {
	e := golden()
	e.Payload = json.RawMessage(`{"a":`)
	if _, err := events.ChainHash(e, ""); !errors.Is(err, events.ErrInvalidEntry) {
		t.Fatalf("ChainHash(bad payload) error = %v, want ErrInvalidEntry", err)
	}
}

func TestChainLink(t *testing.T) {
	var c events.Chain
	a, err := c.Link(golden())
	if err != nil {
		t.Fatal(err)
	}
	if a.PrevHash != "" || !events.ValidHash(a.Hash) || a.Hash == "" {
		t.Fatalf("first link = (%q, %q)", a.PrevHash, a.Hash)
	}
	b, err := c.Link(events.New(1700000000001, "build", "sbx-1", events.SandboxLevel, events.SandboxClosed, nil))
	if err != nil {
		t.Fatal(err)
	}
	if b.PrevHash != a.Hash {
		t.Fatalf("second PrevHash = %q, want %q", b.PrevHash, a.Hash)
	}
	if h, _ := c.Head(b.Session()); h != b.Hash {
		t.Fatalf("head = %q, want %q", h, b.Hash)
	}
	// A new session's first entry keeps the PrevHash it names (a fork).
	f := events.New(1700000000002, "build", "sbx-fork", events.SandboxLevel, events.SandboxCreated, nil)
	f.PrevHash = b.Hash
	if f, err = c.Link(f); err != nil || f.PrevHash != b.Hash {
		t.Fatalf("fork link = %q, %v; want PrevHash %q", f.PrevHash, err, b.Hash)
	}
	bad := events.New(1700000000002, "build", "sbx-other", events.SandboxLevel, events.SandboxCreated, nil)
	bad.PrevHash = "md5:x"
	if _, err := c.Link(bad); !errors.Is(err, events.ErrInvalidHash) {
		t.Fatalf("Link(bad PrevHash) error = %v, want ErrInvalidHash", err)
	}
}

// TestChainHeads: Head, Seed, Forget and Clone, as a Chain moves from one
// session (kept inline) to several (a map), and a clone is independent of
// its origin either way.
func TestChainHeads(t *testing.T) {
	a := events.Session{Name: "build", SandboxID: "sbx-a"}
	b := events.Session{Name: "build", SandboxID: "sbx-b"}
	other := events.Session{Name: "test", SandboxID: "sbx-a"} // another name, the same sandbox
	head := func(c *events.Chain, s events.Session, want string, known bool) {
		t.Helper()
		if h, ok := c.Head(s); h != want || ok != known {
			t.Errorf("Head(%v) = %q, %v; want %q, %v", s, h, ok, want, known)
		}
	}
	var c events.Chain
	head(&c, a, "", false)
	c.Seed(a, "") // a new session: known, with no head
	head(&c, a, "", true)
	head(&c, other, "", false)
	c.Seed(a, "h1")
	one := c.Clone()
	c.Seed(a, "h2")
	head(&one, a, "h1", true)
	head(&c, a, "h2", true)
	c.Seed(b, "h3")
	head(&c, a, "h2", true)
	head(&c, b, "h3", true)
	head(&c, other, "", false)
	two := c.Clone()
	c.Forget(a)
	head(&c, a, "", false)
	head(&c, b, "h3", true)
	head(&two, a, "h2", true)
	one.Forget(other) // not the one it knows
	head(&one, a, "h1", true)
	one.Forget(a)
	head(&one, a, "", false)
	one.Seed(b, "h4") // after a Forget, inline again
	head(&one, b, "h4", true)
	head(&one, a, "", false)
}
