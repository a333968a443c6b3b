// Package bus is the fleet-mode ledger: JetStream. It opens (or embeds) a NATS
// server, creates the ledger stream idempotently, and provides Ledger, an
// adapters.Ledger whose appends publish to the stream, plus ordered replay of
// one sandbox's subject and live subscriptions. The read model (details,
// listings, environments) is not the bus's: a projector (package projections)
// keeps it in an adapters.Store from the stream.
//
// # Subjects
//
// An entry of sandbox <id> is published on alineo.ledger.<id>.<event>
// (events.Subject), its session name in the Alineo-Name header and a
// deterministic Nats-Msg-Id, <epoch>.<n> (the writer's epoch, below, is a
// stream sequence and so unique in the stream), so a retried publish is
// stored once within the stream's duplicate window.
//
// # One writer per sandbox: fences
//
// Each sandbox has a fence subject, alineo.fence.<id>, in the same stream. A
// writer claims a sandbox by publishing a fence message there (expecting the
// subject to be empty, or, for Takeover, expecting the fence it replaces); the
// stream sequence of its fence is its epoch. Every ledger publish then carries
// Nats-Expected-Last-Subject-Sequence = epoch with
// Nats-Expected-Last-Subject-Sequence-Subject = the fence subject, so the
// server itself rejects (error 10071) any publish of a writer whose fence has
// been replaced: a stale writer gets adapters.ErrFenced and its events are never
// interleaved with the new writer's. Unlike a KV lease checked by the client,
// the check happens inside the stream, in stream order, and costs no round trip:
// publishes stay pipelined. On a replicated stream the server refuses a second
// in-flight publish checking the same subject (error 10164, whoever sends it),
// so there each Append publishes synchronously, retrying 10164, timeouts and
// leader elections with the same message id; sandboxes proceed in parallel.
// Fence messages carry Nats-TTL: never so retention by age never removes them.
//
// A first Append claims the sandbox without waiting: the fence goes into the
// async-publish window like an entry and the sandbox's appends queue behind
// it (bounded by the window size) until its acknowledgement gives the epoch,
// so starting a new sandbox does not drain the pipeline. A refused claim drops
// what was queued and fails the writer with ErrFenced, at the next Append or
// at the barrier, until a Takeover.
//
// Release drops a sandbox's writer state (a long-running executor writes
// many sandboxes); the same Ledger re-claims its own fence under a new epoch.
//
// # Barrier
//
// Append returns once the message is handed to the bounded async-publish
// window; Sync(ctx, sandboxID) returns once every event of that sandbox
// published so far is acknowledged by the stream (Flush does it for all).
// AppendBatch publishes and then waits like Sync, once for the whole batch;
// so does the SDK's hand-over (AppendValidated), even for one entry, so that
// what the SDK records is in the stream when its write returns. A failed publish makes the
// sandbox's writer fail every later call with the same error, so no event is
// ever stored after a lost one; Takeover starts a new epoch.
//
// # Reads
//
// ReadAll, LastCheckpoint and ListCheckpoints read the sandbox's subject
// (after Sync, so a writer reads its own writes) with batched direct gets, or
// with an ordered consumer where the stream does not allow them (a stream an
// older release created, until Config.UpdateStreams) or the session is
// interleaved with other sandboxes' messages (readDirect says how). Direct
// gets may be answered by a stale replica: reads stop at the leader's last
// sequence, and the fence reads ask the leader (LastMsg). When retention
// took the start of a session (its first entry still in the stream is not
// its sandbox.created), or reached into it while it was read, the entries
// older than the stream's first come from LedgerConfig.Projection (the
// projected tables); without one a truncated history is ErrHistoryTruncated.
// Subscribe delivers entries from any stream sequence, then live. Messages
// projectors cannot decode are parked on alineo.dlq.ledger, kept by the
// <stream>_DLQ stream.
//
// # Validation
//
// Append and AppendBatch validate every entry (events.Validate) and refuse an
// invalid one with an error wrapping adapters.ErrInvalidEntry, publishing
// nothing; the SDK's ledger writer, which validated its entries already,
// hands them over through AppendValidated instead. DecodeValidMsg is the
// projector's front: what it accepts is not validated again by the store.
//
// Of this module it imports adapters, events, internal/streammsg and
// internal/validated only, and
// nats.go and the nats-server library; never projections, the SDK or any
// database driver.
package bus
