package checkpointtest

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
)

//go:embed testdata/legacy-checkpoints.json
var legacyCheckpoints []byte

// LegacyCheckpoints returns a JSON array of two checkpoints of thread "sbx-1"
// as this module wrote them before it spoke the contract's JSON: json.Marshal
// with the struct tags of that time (createdAt an RFC 3339 string with
// nanoseconds, parentCheckpointId, an empty file's size and an empty
// conversation left out, artifacts null). SQL stores of that time hold such
// bodies.
func LegacyCheckpoints() []byte { return bytes.Clone(legacyCheckpoints) }

// LegacyRow is a row of the alineo_checkpoints table, and its blob
// references, as the SQL stores wrote it before the contract's JSON.
type LegacyRow struct {
	ID, ThreadID, ParentID string
	// CreatedAt is the created_at column: Unix nanoseconds.
	CreatedAt int64
	// Body is the body column, as json.Marshal wrote it then.
	Body string
	// BlobRefs are the alineo_checkpoint_blob_refs rows of the checkpoint.
	BlobRefs map[string]int
}

// LegacyRows returns the rows of LegacyCheckpoints in the order they were
// appended. The thread's head is the last one.
func LegacyRows(t testing.TB) []LegacyRow {
	t.Helper()
	var docs []json.RawMessage
	if err := json.Unmarshal(legacyCheckpoints, &docs); err != nil {
		t.Fatal(err)
	}
	var rows []LegacyRow
	for _, doc := range docs {
		// Decode with the field names of the time, independently of the
		// package's codec.
		var v struct {
			ID        string    `json:"id"`
			ThreadID  string    `json:"threadId"`
			ParentID  string    `json:"parentCheckpointId"`
			CreatedAt time.Time `json:"createdAt"`
			Files     []struct {
				Kind    string `json:"kind"`
				BlobKey string `json:"blobKey"`
			} `json:"files"`
			Artifacts []struct {
				BlobKey string `json:"blobKey"`
			} `json:"artifacts"`
		}
		if err := json.Unmarshal(doc, &v); err != nil {
			t.Fatal(err)
		}
		r := LegacyRow{ID: v.ID, ThreadID: v.ThreadID, ParentID: v.ParentID, CreatedAt: v.CreatedAt.UnixNano(),
			Body: string(doc), BlobRefs: map[string]int{}}
		for _, f := range v.Files {
			if f.Kind == "file" {
				r.BlobRefs[f.BlobKey]++
			}
		}
		for _, a := range v.Artifacts {
			r.BlobRefs[a.BlobKey]++
		}
		rows = append(rows, r)
	}
	return rows
}

// LegacyFactory returns a store over a database that already holds rows
// (with its head row pointing at the last one), as a database written before
// the contract's JSON holds them. The suite closes the store.
type LegacyFactory func(t *testing.T, rows []LegacyRow, opts checkpoints.Options) checkpoints.Store

// RunLegacy checks that a store reads checkpoints written before the
// contract's JSON, appends after them, re-parents them, and writes what it
// rewrites in the contract's JSON.
func RunLegacy(t *testing.T, f LegacyFactory) {
	ctx := context.Background()
	clock := NewClock()
	rows := LegacyRows(t)
	s := f(t, rows, checkpoints.Options{Now: clock.Now, LeaseDuration: leaseDuration, RenewAfter: renewAfter})
	t.Cleanup(func() { _ = s.Close() })

	var want []checkpoints.Checkpoint
	if err := json.Unmarshal(legacyCheckpoints, &want); err != nil {
		t.Fatalf("decode the legacy checkpoints: %v", err)
	}
	list, err := s.List(ctx, "sbx-1")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if got := ids(list); got != "snap-1,snap-2" {
		t.Fatalf("List = %s, want snap-1,snap-2", got)
	}
	for i, c := range list {
		sameCheckpoint(t, "List["+c.ID+"]", c, &want[i])
	}
	first, err := s.Get(ctx, "snap-1")
	if err != nil {
		t.Fatalf("Get(snap-1): %v", err)
	}
	if got, want := first.CreatedAt, time.Date(2026, 11, 30, 14, 3, 7, 123000000, time.UTC); !got.Equal(want) {
		t.Fatalf("CreatedAt = %v, want %v", got, want)
	}
	if got := first.Files[1]; got.Kind != checkpoints.KindFile || got.Size != 0 || got.BlobKey == "" {
		t.Fatalf("empty file = %+v", got)
	}
	refs, err := s.ListBlobReferences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(refs), 3; got != want {
		t.Fatalf("ListBlobReferences = %v, want %d keys", refs, want)
	}

	l, err := s.AcquireWriter(ctx, "sbx-1")
	if err != nil {
		t.Fatal(err)
	}
	c3 := checkpoint("snap-3", "sbx-1", "snap-2", "k1")
	if _, err := s.Append(ctx, checkpoints.AppendInput{Checkpoint: c3, ExpectedHead: "snap-2", Writer: l.Writer}); err != nil {
		t.Fatalf("Append after the legacy head: %v", err)
	}
	// Deleting snap-2 rewrites snap-3 only (its parent); deleting snap-1
	// rewrites snap-2's legacy body.
	if err := s.DeleteCheckpoint(ctx, checkpoints.DeleteHeadInput{ThreadID: "sbx-1", CheckpointID: "snap-1", Writer: l.Writer}); err != nil {
		t.Fatalf("DeleteCheckpoint(snap-1): %v", err)
	}
	second, err := s.Get(ctx, "snap-2")
	if err != nil {
		t.Fatal(err)
	}
	want[1].ParentID = ""
	sameCheckpoint(t, "re-parented snap-2", second, &want[1])
	if _, err := s.Get(ctx, "snap-1"); !errors.Is(err, checkpoints.ErrCheckpointNotFound) {
		t.Fatalf("Get(snap-1) after delete: err = %v, want CHECKPOINT_NOT_FOUND", err)
	}
	if h, err := s.Head(ctx, "sbx-1"); err != nil || h != "snap-3" {
		t.Fatalf("Head = %q, %v; want snap-3", h, err)
	}
}
