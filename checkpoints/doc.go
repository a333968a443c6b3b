// Package checkpoints is a checkpoint store: snapshot lineage for sandboxes and
// threads. It is the Go form of the SandboxCheckpointStore interface of the
// TypeScript package @tanstack/ai-sandbox, with the same error codes
// (SANDBOX_SNAPSHOT_STALE_HEAD, ...).
//
// A thread is a chain of checkpoints. Each checkpoint names its parent; the
// newest one is the thread's head. Appends compare-and-set the head (the caller
// says which head it expects, and the new checkpoint's parent must be that head),
// and only the holder of the thread's writer lease may write. A lease carries a
// fencing token that grows with every acquisition, so a writer whose lease
// expired or was taken over gets ErrWriterLost on every write instead of
// interleaving with its successor. A checkpoint can be forked atomically into an
// empty thread, where it becomes a fork-root.
//
// Checkpoints do not hold file data: their file entries name content-addressed
// blobs (see sandboxd/snapshots for a blob store). ListBlobReferences counts the
// references, and GC deletes the blobs that no checkpoint references.
//
// Additions to the TypeScript interface, all additive: entry kinds symlink and whiteout
// and the fields a filesystem snapshot needs (mode, mtime, owner, symlink
// target, opaque), Checkpoint.ForkedFrom, Store.DeleteCheckpoint (delete any
// checkpoint, not only the head) and Store.Threads. The conversation is kept
// as opaque JSON.
//
// Implementations live in memory, sqlite and postgres; all pass the
// conformance suite in checkpointtest. The postgres store is the one several
// hosts share. Validation, error codes and the lease type live here once.
//
// Of this module it imports nothing: only the standard library.
package checkpoints
