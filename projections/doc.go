// Package projections keeps read models from the ledger stream.
//
// A projection is a Handler: Apply(ctx, Batch) stores a batch of entries
// together with its offset, Offset(ctx, key) reads the offset back. A Runtime
// runs one: a durable JetStream pull consumer recreated at the handler's
// offset on every session, batches bounded in size and time (a batch grows
// up to MaxBatchSize while the previous one is still being applied: a group
// commit, so a store that falls behind catches up), retries with
// backoff while the handler fails, dead-letter parking of messages that do not
// decode and of entries the handler declares poison (Poison), Prometheus
// metrics, Progress, a Filter (events and literal sandbox ids pushed down into
// the consumer's filter subjects; sandbox and name patterns matched by the
// runtime; with no pushed-down filter the consumer has no filter subject at
// all, which spares the server a subject match per message), partitions by sandbox (Partitioning: each partition its own
// consumer and offset key, every sandbox's entries applied in order by one
// worker), and a graceful stop when Run's ctx is done.
//
// Exactly once: a handler that stores its offset in the same transaction as
// its rows (SQLHandler does for database/sql) applies every entry once across
// crashes and redeliveries, because the runtime resumes after the stored
// offset and the handler skips a batch at or below it. A handler that cannot
// gets at least once and must make Apply idempotent (by Entry.Seq). Each
// SQLHandler keeps its offsets in a table of its own, named after its
// projection (OffsetTableName), so projections share a database with each
// other and with the product's tables; a handler that reports a
// configuration it cannot work with (ErrInvalidConfig: an offset table of
// another shape) stops its Runtime instead of being retried.
//
// Delivery order is what makes the offset sound, so every session recreates
// the durable consumer at the handler's offset (a reused one would deliver past
// the messages a crashed predecessor had in flight), and a gap in the
// consumer's delivery sequence (a consumer leader change on a replicated
// stream) ends the session: the batch before the gap is committed and the
// consumer recreated. One runtime per consumer name (per partition) at a time.
//
// Partitions are chosen by the runtime, not by the stream: each partition's
// consumer reads the projection's filter subjects and passes over other
// partitions' sandboxes after parsing only the subject (nothing is decoded or
// applied twice); the stream's subject layout and its other readers are
// untouched.
//
// The lag (Progress.Lag, alineo_projector_lag_events) is the consumer's
// pending plus unacknowledged count, read every LagInterval, so it is true
// while the store is down.
//
// The product's tables are one projection (TablesHandler over an
// adapters.ProjectionStore; Projector runs it). Projections are registered by
// name (Register, Lookup) for cmd/projector. RebuildHandler projects the
// history from sequence 1 (or RebuildOptions.From) into a fresh target beside
// the live one with a progress bar and an ETA, and a Runtime on that target
// continues from where it stopped; Verify compares two product stores row for
// row, and a Definition's Verify two targets of its projection.
//
// The projector's decoder is where a message enters the system: it validates
// every entry (an invalid one is parked), and a store of this module then
// applies the batch without validating it again (see the adapters package
// doc); any other ProjectionStore gets ApplyBatch.
//
// A Runtime is three goroutines in a pipeline: a reader (the next message,
// its sequences parsed from the reply subject, partition and filters decided
// from the subject), a collector (decoding each new message with a
// bus.Decoder, which reuses the strings messages repeat, and batching) and a
// committer (applying one batch while the next is collected).
//
// Of this module it imports adapters, bus, events, internal/spans and
// internal/validated only; never a database driver, the SDK or cmd.
package projections
