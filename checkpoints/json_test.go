package checkpoints_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/checkpointtest"
	"github.com/alineo-labs/alineo/checkpoints/memory"
)

func fixture(t testing.TB) []json.RawMessage {
	t.Helper()
	var docs []json.RawMessage
	if err := json.Unmarshal(checkpointtest.TanStackCheckpoints(), &docs); err != nil {
		t.Fatal(err)
	}
	return docs
}

func sameJSON(t *testing.T, what string, got, want []byte) {
	t.Helper()
	same, err := checkpointtest.SameJSON(got, want)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !same {
		t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
	}
}

// TestTanStackRoundTrip decodes each checkpoint of the fixture, which is
// written from the contract's .d.ts, checks a few of its fields, and encodes
// it back to the same JSON.
func TestTanStackRoundTrip(t *testing.T) {
	docs := fixture(t)
	var cs []checkpoints.Checkpoint
	for _, doc := range docs {
		var c checkpoints.Checkpoint
		if err := json.Unmarshal(doc, &c); err != nil {
			t.Fatalf("decode %s: %v", doc, err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Validate(%s): %v", c.ID, err)
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "round trip of "+c.ID, b, doc)
		cs = append(cs, c)
	}
	first, second := cs[0], cs[1]
	if got, want := first.CreatedAt, time.UnixMilli(1764511387123).UTC(); !got.Equal(want) {
		t.Errorf("createdAt = %v, want %v", got, want)
	}
	if first.ParentID != "" || first.Reason != checkpoints.ReasonAutomatic || first.Label != "" || first.SourceRunID != "" {
		t.Errorf("first checkpoint = parent %q, reason %q, label %q, run %q; want none, automatic, none, none",
			first.ParentID, first.Reason, first.Label, first.SourceRunID)
	}
	if got, want := first.Files[3], (checkpoints.Entry{Path: "workspace/.keep", Kind: checkpoints.KindFile,
		BlobKey: "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}); !reflect.DeepEqual(got, want) {
		t.Errorf("empty file entry = %+v, want %+v", got, want)
	}
	if second.ParentID != "ckpt-01" || second.Label != "tests pass" || second.SourceRunID != "run-42" || second.Reason != checkpoints.ReasonNamed {
		t.Errorf("second checkpoint = parent %q, label %q, run %q, reason %q", second.ParentID, second.Label, second.SourceRunID, second.Reason)
	}
	if got, want := second.Artifacts[0].CreatedAt, time.UnixMilli(1764511451500).UTC(); !got.Equal(want) {
		t.Errorf("artifact createdAt = %v, want %v", got, want)
	}
	var convo []map[string]any
	if err := json.Unmarshal(second.Conversation, &convo); err != nil || len(convo) != 4 || convo[2]["toolCallId"] != "call_1" {
		t.Errorf("conversation = %s (%v), want the fixture's 4 messages", second.Conversation, err)
	}
	if cs[2].Reason != checkpoints.ReasonForkRoot {
		t.Errorf("third reason = %q, want fork-root", cs[2].Reason)
	}
}

// TestEncodeShape pins the JSON of values the fixture does not hold: the
// zero checkpoint has every member the contract requires, an entry's
// additions are there only when set.
func TestEncodeShape(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"zero checkpoint", checkpoints.Checkpoint{},
			`{"id":"","threadId":"","parentCheckpointId":null,"createdAt":0,"reason":"","files":[],"conversation":[],"artifacts":[]}`},
		{"pointer to checkpoint", &checkpoints.Checkpoint{ID: "c", ThreadID: "t", ParentID: "p", Reason: checkpoints.ReasonNamed,
			CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6_999_999, time.UTC), Label: "l", SourceRunID: "r", ForkedFrom: "f",
			Conversation: json.RawMessage(` [ {"role": "user"} ] `)},
			`{"id":"c","threadId":"t","parentCheckpointId":"p","createdAt":1767323045006,"reason":"named","label":"l","sourceRunId":"r","forkedFrom":"f","files":[],"conversation":[{"role":"user"}],"artifacts":[]}`},
		{"null conversation", checkpoints.Checkpoint{Conversation: json.RawMessage("null")},
			`{"id":"","threadId":"","parentCheckpointId":null,"createdAt":0,"reason":"","files":[],"conversation":[],"artifacts":[]}`},
		{"dir", checkpoints.Entry{Path: "a", Kind: checkpoints.KindDir}, `{"path":"a","kind":"dir"}`},
		{"empty file", checkpoints.Entry{Path: "a", Kind: checkpoints.KindFile, BlobKey: "k"}, `{"path":"a","kind":"file","blobKey":"k","size":0}`},
		{"file with additions", checkpoints.Entry{Path: "a", Kind: checkpoints.KindFile, BlobKey: "k", Size: 9, Mode: 0o644, ModTime: 7, UID: 1, GID: 2,
			Holes: []checkpoints.Extent{{Offset: 0, Length: 4}}},
			`{"path":"a","kind":"file","blobKey":"k","size":9,"mode":420,"mtime":7,"uid":1,"gid":2,"holes":[{"off":0,"len":4}]}`},
		{"symlink", checkpoints.Entry{Path: "l", Kind: checkpoints.KindSymlink, Target: "a"}, `{"path":"l","kind":"symlink","target":"a"}`},
		{"opaque dir", checkpoints.Entry{Path: "d", Kind: checkpoints.KindDir, Opaque: true}, `{"path":"d","kind":"dir","opaque":true}`},
		{"artifact", checkpoints.Artifact{ArtifactID: "a", Name: "n", MimeType: "m", Size: 1, BlobKey: "k", CreatedAt: time.UnixMilli(-1)},
			`{"artifactId":"a","name":"n","mimeType":"m","size":1,"blobKey":"k","createdAt":-1}`},
		{"zero artifact", checkpoints.Artifact{}, `{"artifactId":"","name":"","mimeType":"","size":0,"blobKey":"","createdAt":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); got != tt.want {
				t.Errorf("Marshal =\n %s\nwant\n %s", got, tt.want)
			}
		})
	}
}

// TestDecodeTolerates lists what decoding takes beyond the fixture's form.
func TestDecodeTolerates(t *testing.T) {
	at := func(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
	tests := []struct {
		name string
		doc  string
		want checkpoints.Checkpoint
	}{
		{"fractional milliseconds", `{"createdAt":1764511387123.987}`, checkpoints.Checkpoint{CreatedAt: at(1764511387123)}},
		{"exponent", `{"createdAt":1.764511387123e12}`, checkpoints.Checkpoint{CreatedAt: at(1764511387123)}},
		{"before the epoch", `{"createdAt":-1.5}`, checkpoints.Checkpoint{CreatedAt: at(-2)}},
		{"null time", `{"createdAt":null}`, checkpoints.Checkpoint{}},
		{"zero time", `{"createdAt":0}`, checkpoints.Checkpoint{}},
		{"RFC 3339 time", `{"createdAt":"2026-11-30T15:03:07.123456789+01:00"}`, checkpoints.Checkpoint{CreatedAt: time.Date(2026, 11, 30, 14, 3, 7, 123000000, time.UTC)}},
		{"parent absent, lists null", `{"id":"c","files":null,"conversation":null,"artifacts":null}`, checkpoints.Checkpoint{ID: "c"}},
		{"empty parent", `{"parentCheckpointId":""}`, checkpoints.Checkpoint{}},
		{"unknown members", `{"id":"c","schemaVersion":2,"files":[{"path":"a","kind":"dir","extra":{}}]}`,
			checkpoints.Checkpoint{ID: "c", Files: []checkpoints.Entry{{Path: "a", Kind: checkpoints.KindDir}}}},
		{"size null", `{"files":[{"path":"a","kind":"file","blobKey":"k","size":null}]}`,
			checkpoints.Checkpoint{Files: []checkpoints.Entry{{Path: "a", Kind: checkpoints.KindFile, BlobKey: "k"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got checkpoints.Checkpoint
			if err := json.Unmarshal([]byte(tt.doc), &got); err != nil {
				t.Fatalf("Unmarshal(%s): %v", tt.doc, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Unmarshal(%s) =\n %+v\nwant\n %+v", tt.doc, got, tt.want)
			}
		})
	}
}

// TestDecodeErrors checks that documents that are not checkpoints give
// errors wrapping ErrInvalidEntry, and that the value decoded into is left
// as it was.
func TestDecodeErrors(t *testing.T) {
	for _, doc := range []string{
		`{"createdAt":"yesterday"}`,
		`{"createdAt":true}`,
		`{"createdAt":1e300}`,
		`{"createdAt":-8.7e15}`,
		`{"createdAt":8640000000000001}`,
		`{"createdAt":{}}`,
		`{"id":5}`,
		`{"parentCheckpointId":7}`,
		`{"files":{}}`,
		`{"files":[{"path":"a","kind":"file","size":"5"}]}`,
		`{"artifacts":[{"createdAt":"noon"}]}`,
		`{"artifacts":[{"size":-1.5}]}`,
		`[]`,
	} {
		c := checkpoints.Checkpoint{ID: "kept"}
		err := json.Unmarshal([]byte(doc), &c)
		if !errors.Is(err, checkpoints.ErrInvalidEntry) {
			t.Errorf("Unmarshal(%s): err = %v, want ErrInvalidEntry", doc, err)
		}
		var ce *checkpoints.Error
		if !errors.As(err, &ce) || ce.Code != checkpoints.CodeInvalidEntry {
			t.Errorf("Unmarshal(%s): errors.As = %v, want code %s", doc, ce, checkpoints.CodeInvalidEntry)
		}
		if c.ID != "kept" {
			t.Errorf("Unmarshal(%s) changed the value: id = %q", doc, c.ID)
		}
	}
}

// TestValidateConversation: the contract's conversation is an array of
// messages.
func TestValidateConversation(t *testing.T) {
	for _, tt := range []struct {
		convo string
		ok    bool
	}{
		{"", true}, {"null", true}, {"[]", true}, {` [{"role":"user","content":"hi"}]`, true},
		{`{"role":"user"}`, false}, {`"hi"`, false}, {`[`, false},
	} {
		c := checkpoints.Checkpoint{ID: "c", ThreadID: "t", Reason: checkpoints.ReasonAutomatic, Conversation: json.RawMessage(tt.convo)}
		err := c.Validate()
		if got := err == nil; got != tt.ok {
			t.Errorf("Validate with conversation %q = %v, want ok=%v", tt.convo, err, tt.ok)
		}
		if err != nil && !errors.Is(err, checkpoints.ErrInvalidEntry) {
			t.Errorf("Validate with conversation %q = %v, want ErrInvalidEntry", tt.convo, err)
		}
	}
}

// TestLegacyCheckpoints decodes checkpointtest.LegacyCheckpoints, which is
// what this package wrote before it spoke the contract's JSON (json.Marshal
// with the struct tags of that time: createdAt an RFC 3339 string,
// parentCheckpointId, size and conversation left out when empty, artifacts
// null), as SQLite and Postgres stores hold it.
func TestLegacyCheckpoints(t *testing.T) {
	b := checkpointtest.LegacyCheckpoints()
	var got []checkpoints.Checkpoint
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("decode: %v", err)
	}
	want := []checkpoints.Checkpoint{{
		ID: "snap-1", ThreadID: "sbx-1", CreatedAt: time.Date(2026, 11, 30, 14, 3, 7, 123000000, time.UTC),
		Reason: checkpoints.ReasonAutomatic, Label: "before-build",
		Files: []checkpoints.Entry{
			{Path: "work", Kind: checkpoints.KindDir, Mode: 0o755},
			{Path: "work/empty", Kind: checkpoints.KindFile, BlobKey: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", Mode: 0o644, ModTime: 1764511387123456789},
			{Path: "work/main.go", Kind: checkpoints.KindFile, BlobKey: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Size: 4, Mode: 0o644},
			{Path: "work/link", Kind: checkpoints.KindSymlink, Target: "main.go"},
		},
		Artifacts: []checkpoints.Artifact{{ArtifactID: "sandboxd-snapshot.json", Name: "sandboxd-snapshot.json", MimeType: "application/json", Size: 120,
			BlobKey: "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752", CreatedAt: time.Date(2026, 11, 30, 14, 3, 7, 100000000, time.UTC)}},
	}, {
		ID: "snap-2", ThreadID: "sbx-1", ParentID: "snap-1", CreatedAt: time.Date(2026, 11, 30, 14, 5, 0, 999000000, time.UTC),
		Reason: checkpoints.ReasonNamed, SourceRunID: "run-7",
		Files:        []checkpoints.Entry{{Path: "work", Kind: checkpoints.KindDir, Mode: 0o755}},
		Conversation: got[1].Conversation,
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n %+v\nwant\n %+v", got, want)
	}
	if same, _ := checkpointtest.SameJSON(got[1].Conversation, []byte(`[{"role":"user","content":"build it"}]`)); !same {
		t.Fatalf("conversation = %s", got[1].Conversation)
	}
	for _, c := range got {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%s): %v", c.ID, err)
		}
	}
	enc, err := json.Marshal(got[1])
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "re-encoded", enc, []byte(`{"id":"snap-2","threadId":"sbx-1","parentCheckpointId":"snap-1","createdAt":1796047500999,
		"reason":"named","sourceRunId":"run-7","files":[{"path":"work","kind":"dir","mode":493}],
		"conversation":[{"role":"user","content":"build it"}],"artifacts":[]}`))
}

// FuzzDecodeCheckpoint checks that the decoder never panics, that what it
// decodes encodes, and that the encoding is a fixed point: decoding it and
// encoding again gives the same bytes and the same value.
func FuzzDecodeCheckpoint(f *testing.F) {
	for _, doc := range fixture(f) {
		f.Add([]byte(doc))
	}
	var legacy []json.RawMessage
	if err := json.Unmarshal(checkpointtest.LegacyCheckpoints(), &legacy); err != nil {
		f.Fatal(err)
	}
	for _, doc := range legacy {
		f.Add([]byte(doc))
	}
	for _, s := range []string{`{}`, `null`, `{"createdAt":-0.5}`, `{"createdAt":"2026-01-01T00:00:00Z"}`,
		`{"files":[{"path":"a","kind":"file","holes":[]}],"conversation":{"x":1}}`, `{"ID":"x","id":"y"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var c, direct checkpoints.Checkpoint
		err := json.Unmarshal(doc, &c)
		// The stores call the method directly: it must agree, and wrap
		// every error, syntax errors too.
		errDirect := direct.UnmarshalJSON(doc)
		if (err == nil) != (errDirect == nil) {
			t.Fatalf("json.Unmarshal(%q) = %v but UnmarshalJSON = %v", doc, err, errDirect)
		}
		if errDirect != nil && !errors.Is(errDirect, checkpoints.ErrInvalidEntry) {
			t.Fatalf("UnmarshalJSON(%q) = %v, want ErrInvalidEntry", doc, errDirect)
		}
		if err != nil {
			var se *json.SyntaxError
			if !errors.Is(err, checkpoints.ErrInvalidEntry) && !errors.As(err, &se) {
				t.Fatalf("Unmarshal(%q): err = %v, want ErrInvalidEntry or a syntax error", doc, err)
			}
			return
		}
		if a, b := canonical(c), canonical(direct); !reflect.DeepEqual(a, b) {
			t.Fatalf("json.Unmarshal and UnmarshalJSON differ:\n %+v\n %+v", a, b)
		}
		b1, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("Marshal of decoded %q: %v", doc, err)
		}
		var c2 checkpoints.Checkpoint
		if err := json.Unmarshal(b1, &c2); err != nil {
			t.Fatalf("Unmarshal of own encoding %s: %v", b1, err)
		}
		b2, err := json.Marshal(c2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not a fixed point:\n %s\n %s", b1, b2)
		}
		if a, b := canonical(c), canonical(c2); !reflect.DeepEqual(a, b) {
			t.Fatalf("value changed through its encoding:\n %+v\n %+v", a, b)
		}
	})
}

// FuzzDecodeInputs checks the decoders of the other documents (an entry,
// an artifact, the append and fork arguments) as FuzzDecodeCheckpoint does
// the checkpoint's: no panic, typed errors, and an encoding that is a fixed
// point.
func FuzzDecodeInputs(f *testing.F) {
	for _, s := range []string{
		`{"path":"a","kind":"file","blobKey":"k","size":0}`,
		`{"artifactId":"a","name":"n","mimeType":"m","size":1,"blobKey":"k","createdAt":1764511451500}`,
		`{"checkpoint":{"id":"c","threadId":"t","parentCheckpointId":null,"createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]},"expectedHeadId":null,"writer":{"threadId":"t","ownerToken":"o","fence":1}}`,
		`{"sourceThreadId":"a","sourceCheckpointId":"c","destinationThreadId":"b","destinationCheckpointId":"d","createdAt":2.5,"writer":{"threadId":"b","ownerToken":"o","fence":2}}`,
		`{"checkpoint":null,"expectedHeadId":"","createdAt":"2026-01-01T00:00:00Z"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		fixedPoint(t, doc, func() any { return new(checkpoints.Entry) })
		fixedPoint(t, doc, func() any { return new(checkpoints.Artifact) })
		fixedPoint(t, doc, func() any { return new(checkpoints.AppendInput) })
		fixedPoint(t, doc, func() any { return new(checkpoints.ForkInput) })
	})
}

// fixedPoint decodes doc into a new value; if that succeeds, its encoding
// must decode and encode to the same bytes.
func fixedPoint(t *testing.T, doc []byte, alloc func() any) {
	t.Helper()
	v := alloc()
	if err := json.Unmarshal(doc, v); err != nil {
		var se *json.SyntaxError
		if !errors.Is(err, checkpoints.ErrInvalidEntry) && !errors.As(err, &se) {
			t.Fatalf("Unmarshal(%q) into %T: err = %v, want ErrInvalidEntry or a syntax error", doc, v, err)
		}
		return
	}
	b1, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("Marshal of decoded %T: %v", v, err)
	}
	w := alloc()
	if err := json.Unmarshal(b1, w); err != nil {
		t.Fatalf("Unmarshal of own encoding %s into %T: %v", b1, w, err)
	}
	b2, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1, b2) {
		t.Fatalf("%T encoding is not a fixed point:\n %s\n %s", v, b1, b2)
	}
}

// canonical returns c with nil and empty lists alike and its conversation
// compacted and HTML-escaped as json.Marshal writes it, which encoding does
// not tell apart.
func canonical(c checkpoints.Checkpoint) checkpoints.Checkpoint {
	d := *c.Clone()
	if len(d.Files) == 0 {
		d.Files = nil
	}
	for i := range d.Files {
		if len(d.Files[i].Holes) == 0 {
			d.Files[i].Holes = nil
		}
	}
	if len(d.Artifacts) == 0 {
		d.Artifacts = nil
	}
	if b, err := json.Marshal(d.Conversation); err == nil && len(d.Conversation) > 0 && string(b) != "[]" && string(b) != "null" {
		d.Conversation = b
	} else {
		d.Conversation = nil
	}
	return d
}

// TestInputsJSON round-trips the arguments of the contract's append,
// deleteHead and forkFromCheckpoint, and the writer and blob reference types,
// through documents written from the .d.ts.
func TestInputsJSON(t *testing.T) {
	writer := `{"threadId":"thread-a","ownerToken":"tok","fence":3}`
	tests := []struct {
		name string
		doc  string
		v    any // a pointer to decode into
	}{
		{"append to an empty thread", `{"checkpoint":{"id":"c","threadId":"thread-a","parentCheckpointId":null,"createdAt":1764511387123,
			"reason":"automatic","files":[],"conversation":[],"artifacts":[]},"expectedHeadId":null,"writer":` + writer + `}`, new(checkpoints.AppendInput)},
		{"append after a head", `{"checkpoint":{"id":"c2","threadId":"thread-a","parentCheckpointId":"c","createdAt":1764511387124,
			"reason":"named","label":"x","files":[],"conversation":[],"artifacts":[]},"expectedHeadId":"c","writer":` + writer + `}`, new(checkpoints.AppendInput)},
		{"deleteHead", `{"threadId":"thread-a","checkpointId":"c2","writer":` + writer + `}`, new(checkpoints.DeleteHeadInput)},
		{"forkFromCheckpoint", `{"sourceThreadId":"thread-a","sourceCheckpointId":"c","destinationThreadId":"thread-b",
			"destinationCheckpointId":"d","createdAt":1764511500001,"writer":` + writer + `}`, new(checkpoints.ForkInput)},
		{"writer", writer, new(checkpoints.Writer)},
		{"listBlobReferences line", `{"key":"sha256:ab","references":2}`, new(checkpoints.BlobRef)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := json.Unmarshal([]byte(tt.doc), tt.v); err != nil {
				t.Fatalf("decode: %v", err)
			}
			b, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, "round trip", b, []byte(tt.doc))
		})
	}
	var in checkpoints.AppendInput
	if err := json.Unmarshal([]byte(tests[1].doc), &in); err != nil {
		t.Fatal(err)
	}
	if err := in.Validate(); err != nil || in.ExpectedHead != "c" || in.Writer.Fence != 3 {
		t.Fatalf("decoded append input = %+v, Validate = %v", in, err)
	}
	var fork checkpoints.ForkInput
	if err := json.Unmarshal([]byte(`{"createdAt":"soon"}`), &fork); !errors.Is(err, checkpoints.ErrInvalidEntry) {
		t.Fatalf("fork input with a bad time: err = %v, want ErrInvalidEntry", err)
	}
}

// TestLeaseJSON: a lease encodes as the contract's
// SandboxCheckpointWriterLease data.
func TestLeaseJSON(t *testing.T) {
	now := time.UnixMilli(1764511387123).UTC()
	s := memory.New(checkpoints.Options{Now: func() time.Time { return now }, LeaseDuration: 30 * time.Second, RenewAfter: 10 * time.Second})
	defer s.Close()
	l, err := s.AcquireWriter(context.Background(), "thread-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"threadId":"thread-a","ownerToken":"` + l.OwnerToken + `","fence":1,"expiresAt":1764511417123,"renewAfterMs":10000}`
	sameJSON(t, "lease", b, []byte(want))
}
