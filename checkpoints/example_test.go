package checkpoints_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/storeurl"
)

// A program of its own opens a store by URL (here a SQLite file; a
// postgres:// URL opens one that several hosts share), appends a lineage
// under a writer lease, reads it back and forks it.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "checkpoints-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := storeurl.Open(ctx, "sqlite://"+filepath.ToSlash(filepath.Join(dir, "checkpoints.db")), checkpoints.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// One writer per thread: its lease guards every write.
	lease, err := store.AcquireWriter(ctx, "thread-a")
	if err != nil {
		log.Fatal(err)
	}
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	files := []checkpoints.Entry{
		{Path: "workspace", Kind: checkpoints.KindDir},
		{Path: "workspace/main.go", Kind: checkpoints.KindFile, BlobKey: "sha256:9f86d081884c7d65", Size: 42},
	}
	head, err := store.Append(ctx, checkpoints.AppendInput{
		Checkpoint: &checkpoints.Checkpoint{ID: "c1", ThreadID: "thread-a", CreatedAt: at, Reason: checkpoints.ReasonAutomatic, Files: files},
		Writer:     lease.Writer, // ExpectedHead "": the thread is empty
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = store.Append(ctx, checkpoints.AppendInput{
		Checkpoint: &checkpoints.Checkpoint{ID: "c2", ThreadID: "thread-a", ParentID: head, CreatedAt: at.Add(time.Minute),
			Reason: checkpoints.ReasonNamed, Label: "tests pass", SourceRunID: "run-1", Files: files},
		ExpectedHead: head,
		Writer:       lease.Writer,
	})
	if err != nil {
		log.Fatal(err)
	}
	// An append that expects an older head loses the compare-and-set.
	_, err = store.Append(ctx, checkpoints.AppendInput{
		Checkpoint:   &checkpoints.Checkpoint{ID: "c3", ThreadID: "thread-a", ParentID: head, Reason: checkpoints.ReasonAutomatic},
		ExpectedHead: head,
		Writer:       lease.Writer,
	})
	fmt.Println("stale append:", errors.Is(err, checkpoints.ErrStaleHead))

	lineage, err := store.List(ctx, "thread-a")
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range lineage {
		fmt.Printf("%s parent=%q reason=%s label=%q\n", c.ID, c.ParentID, c.Reason, c.Label)
	}

	// Fork the named checkpoint into an empty thread, under that thread's lease.
	dst, err := store.AcquireWriter(ctx, "thread-b")
	if err != nil {
		log.Fatal(err)
	}
	root, err := checkpoints.Fork(ctx, store, checkpoints.ForkInput{
		SourceThreadID: "thread-a", SourceCheckpointID: "c2",
		DestinationThreadID: "thread-b", DestinationCheckpointID: "b1",
		CreatedAt: at.Add(2 * time.Minute), Writer: dst.Writer,
	})
	if err != nil {
		log.Fatal(err)
	}
	doc, err := json.Marshal(root) // the contract's JSON
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(doc))
	refs, err := store.ListBlobReferences(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(refs)
	// Releasing a lease lets another writer take the thread at once.
	if err := errors.Join(lease.Release(ctx), dst.Release(ctx)); err != nil {
		log.Fatal(err)
	}
	// Output:
	// stale append: true
	// c1 parent="" reason=automatic label=""
	// c2 parent="c1" reason=named label="tests pass"
	// {"id":"b1","threadId":"thread-b","parentCheckpointId":null,"createdAt":1796464920000,"reason":"fork-root","label":"tests pass","sourceRunId":"run-1","forkedFrom":"c2","files":[{"path":"workspace","kind":"dir"},{"path":"workspace/main.go","kind":"file","blobKey":"sha256:9f86d081884c7d65","size":42}],"conversation":[],"artifacts":[]}
	// [{sha256:9f86d081884c7d65 3}]
}
