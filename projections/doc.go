// Package projections keeps read models from the ledger stream. A Projector is
// a durable JetStream pull consumer that applies the ledger to an
// adapters.ProjectionStore in batches (bounded in size and time), each batch in
// one transaction together with the consumer's offset, and acknowledges only
// after the commit. Redelivery is harmless: the store skips stream sequences it
// already holds. A message that does not decode is parked on the dead-letter
// subject and counted; the worker goes on. While the database is down it
// retries with exponential backoff.
//
// Delivery order is what makes the offset sound, so every run recreates the
// durable consumer at the store's offset (a reused one would deliver past the
// messages a crashed predecessor had in flight), and a gap in the consumer's
// delivery sequence (a consumer leader change on a replicated stream) ends the
// session: the batch before the gap is committed and the consumer recreated.
// One projector per consumer name at a time.
//
// Rebuild projects the whole history from sequence 1 into a fresh store, and
// Verify compares two projections row for row.
//
// The projector's decoder is where a message enters the system: it validates
// every entry (an invalid one is parked), and a store of this module then
// applies the batch without validating it again (see the adapters package
// doc); any other ProjectionStore gets ApplyBatch.
//
// This package imports events, adapters, internal/validated and bus; never a
// database driver, the SDK or cmd.
package projections
