// Package checkpoints is a checkpoint store: snapshot lineage for sandboxes and
// threads. It is the Go form of the SandboxCheckpointStore contract of the
// TypeScript package @tanstack/ai-sandbox (checkpoint-store.d.ts), with the
// same documents and the same error codes, and it is usable on its own:
// sandboxd keeps its snapshots in it, and so can any program.
//
// # Lineage
//
// A thread is a chain of checkpoints. Each checkpoint names its parent; the
// newest one is the thread's head. Appends compare-and-set the head (the caller
// says which head it expects, and the new checkpoint's parent must be that head),
// and only the holder of the thread's writer lease may write. A lease carries a
// fencing token that grows with every acquisition, so a writer whose lease
// expired or was taken over gets ErrWriterLost on every write instead of
// interleaving with its successor.
//
// Checkpoints do not hold file data: their file entries and artifacts name
// content-addressed blobs (see sandboxd/snapshots for a blob store).
// ListBlobReferences counts the references, and GC deletes the blobs that no
// checkpoint references.
//
// # Using a store
//
// Open one by URL with checkpoints/storeurl (a SQLite file, or Postgres for
// several hosts), or with checkpoints/sqlite, checkpoints/postgres or
// checkpoints/memory directly. Then, per thread:
//
//	lease, err := store.AcquireWriter(ctx, "thread-1")  // one writer per thread
//	head, err := store.Head(ctx, "thread-1")            // "" for an empty thread
//	_, err = store.Append(ctx, checkpoints.AppendInput{
//		Checkpoint:   &checkpoints.Checkpoint{ID: "c2", ThreadID: "thread-1", ParentID: head, Reason: checkpoints.ReasonNamed},
//		ExpectedHead: head,
//		Writer:       lease.Writer,
//	})
//	list, err := store.List(ctx, "thread-1")            // the lineage, oldest first
//	err = lease.Release(ctx)
//
// A checkpoint forks into an empty thread, where it becomes a fork-root, with
// Fork (or Forker.ForkFromCheckpoint). Forking is the contract's optional
// capability: LineageStore is a store without it, Store one with it (every
// store of this module), IsForkCapable tells them apart, and Fork on a store
// without it returns ErrAtomicForkRequired rather than copying a checkpoint
// with a Get and an Append that another writer could interleave with.
//
// Stores never retry. Every error of the contract is an *Error whose Code is
// the contract's string (SANDBOX_SNAPSHOT_STALE_HEAD, ...); match it with
// errors.Is against the sentinels (ErrStaleHead, ...) or read the code with
// errors.As.
//
// # JSON
//
// Checkpoint, Entry, Artifact, AppendInput, ForkInput, DeleteHeadInput,
// Writer and BlobRef encode and decode as the contract's documents, and a
// Lease encodes as SandboxCheckpointWriterLease's data: times in epoch
// milliseconds, parentCheckpointId and expectedHeadId null when empty, every
// list an array, the optional members (label, sourceRunId) left out when
// empty, a file entry always with blobKey and size. Checkpoint times are kept
// to the millisecond (TruncateTime), so what a store returns is what its JSON
// says. Decoding also reads what this package wrote before it spoke the
// contract, which older SQLite and Postgres stores hold (see
// Checkpoint.UnmarshalJSON), and fails with ErrInvalidEntry on anything else.
//
// # Additions
//
// Additions to the TypeScript interface, all additive and left out of the
// JSON when empty: entry kinds symlink and whiteout and the fields a
// filesystem snapshot needs (mode, mtime, owner, symlink target, opaque,
// holes), Checkpoint.ForkedFrom, Store.DeleteCheckpoint (delete any
// checkpoint, not only the head) and Store.Threads. The conversation is kept
// as opaque JSON (a ModelMessage array).
//
// Implementations live in memory, sqlite and postgres; all pass the
// conformance suite in checkpointtest. The postgres store is the one several
// hosts share. Validation, error codes, the JSON and the lease type live here
// once.
//
// Of this module it imports nothing: only the standard library.
package checkpoints
