package checkpointtest

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/checkpoints"
)

//go:embed testdata/tanstack-checkpoints.json
var tanStackCheckpoints []byte

// TanStackCheckpoints returns a JSON array of checkpoints written, member for
// member, from the contract's checkpoint-store.d.ts (SandboxCheckpoint,
// SandboxSnapshotEntry, SandboxSnapshotArtifact, ModelMessage): two of thread
// "thread-a", the second a child of the first, and the fork-root of thread
// "thread-b". It uses none of this module's additions, so every checkpoint
// in it encodes back to the same JSON.
func TanStackCheckpoints() []byte { return bytes.Clone(tanStackCheckpoints) }

// SameJSON reports whether a and b are the same JSON value: the same members
// with the same values, whatever their order and spacing. Numbers compare by
// their text, so 1 and 1.0 differ.
func SameJSON(a, b []byte) (bool, error) {
	va, err := decodeJSON(a)
	if err != nil {
		return false, err
	}
	vb, err := decodeJSON(b)
	if err != nil {
		return false, err
	}
	return reflect.DeepEqual(va, vb), nil
}

func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode %.60s: %w", b, err)
	}
	return v, nil
}

// testTanStackJSON appends the TanStack fixture's checkpoints, as decoded
// from their JSON, and checks that Get and List give back the same JSON.
func testTanStackJSON(t *testing.T, f Factory) {
	e := newEnv(t, f)
	var docs []json.RawMessage
	if err := json.Unmarshal(tanStackCheckpoints, &docs); err != nil {
		t.Fatal(err)
	}
	leases := map[string]*checkpoints.Lease{}
	byThread := map[string][]json.RawMessage{}
	for _, doc := range docs {
		var c checkpoints.Checkpoint
		if err := json.Unmarshal(doc, &c); err != nil {
			t.Fatalf("decode %s: %v", doc, err)
		}
		if leases[c.ThreadID] == nil {
			leases[c.ThreadID] = e.acquire(c.ThreadID)
		}
		e.append(leases[c.ThreadID], &c)
		byThread[c.ThreadID] = append(byThread[c.ThreadID], doc)

		got, err := e.s.Get(e.ctx, c.ID)
		if err != nil {
			t.Fatalf("Get(%s): %v", c.ID, err)
		}
		sameDoc(t, "Get("+c.ID+")", got, doc)
	}
	for thread, want := range byThread {
		list, err := e.s.List(e.ctx, thread)
		if err != nil {
			t.Fatalf("List(%s): %v", thread, err)
		}
		if len(list) != len(want) {
			t.Fatalf("List(%s) = %s, want %d checkpoints", thread, ids(list), len(want))
		}
		for i, c := range list {
			sameDoc(t, fmt.Sprintf("List(%s)[%d]", thread, i), c, want[i])
		}
	}
}

func sameDoc(t *testing.T, what string, c *checkpoints.Checkpoint, want []byte) {
	t.Helper()
	got, err := json.Marshal(c)
	if err != nil {
		t.Fatalf("%s: encode: %v", what, err)
	}
	same, err := SameJSON(got, want)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !same {
		t.Fatalf("%s: JSON differs from the fixture\n got %s\nwant %s", what, got, strings.Join(strings.Fields(string(want)), " "))
	}
}
