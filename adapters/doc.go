// Package adapters defines the storage contract of alineo in two halves, with
// the shared types they return:
//
//   - Ledger, the append-only event log: Append, AppendBatch, a session's
//     entries in order (ReadAll), its checkpoints (LastCheckpoint,
//     ListCheckpoints), DeleteSandbox and Close.
//   - ReadModel, what is derived from the log and kept beside it: the
//     sessions' details and the listings over them (GetSandboxDetails,
//     ListSandboxDetails, ListAllSandboxDetails), and the environment records.
//   - Store, both together: the storage interface of the product's
//     documentation (IStorageAdapter), as the memory, sqlite and postgres
//     stores implement it.
//
// ProjectionStore is what a projector writes a bus ledger into. Scanner is
// what a Ledger may add to hand a session's entries on as it reads them
// (the bus ledger does); Client.Resume reads a long session so.
//
// # Where the line runs
//
// A method belongs to the Ledger when an append-only log answers it by
// reading one session's entries: everything Client.Resume and a replay need.
// Checkpoints are entries (sandbox.checkpoint_created), so their lookups are
// Ledger methods; DeleteSandbox removes a session's entries, so it is one too
// (a Store also drops the session's details with them). A method belongs to
// the ReadModel when it answers across sessions (listings, filters, newest
// first) or keeps what is not an event (environment records): a log could
// only answer it by reading everything. A session's details are derived
// from its entries, and GetSandboxDetails sits with the listings that return
// them; a client with a Ledger alone derives them from ReadAll.
//
// So a backend implements what it serves and nothing else: the bus ledger
// (package bus) is a Ledger whose appends publish to JetStream, and the
// tables a projector keeps from it are the ReadModel; a custom ledger, such as
// a JSON-lines file, implements the seven Ledger methods and gets recording
// and resume. The SDK takes a Ledger and, optionally, a ReadModel (a Store
// serves as both); without one, listings fail with ErrNoReadModel.
//
// # Validation happens once, at the front
//
// An entry is checked with events.Validate where it enters the system, and
// not again on its way to the database:
//
//   - the SDK's ledger writer validates every entry it records, then hands
//     the store the validated batch;
//   - the projector validates every message as it decodes it (an invalid one
//     is parked), then hands the store the validated batch;
//   - a store's public Append, AppendBatch and ApplyBatch validate, since
//     they receive entries from anywhere: an invalid entry from outside the
//     SDK is refused with an error wrapping ErrInvalidEntry and nothing is
//     written.
//
// The hand-over of a validated batch is a method taking a type only this
// module can build (AppendValidated and ApplyValidated on the stores and the
// bus ledger, whose argument is made by validating or by the front that did),
// rather than a flag in the context: the proof travels with the entries and
// cannot be forged by a caller outside the module, and a store cannot be told
// that a batch was checked when it was not. Validating at the front and again
// in every store would cost two parses of every payload; trusting a store's
// caller blindly would let an invalid entry from outside in. A type that
// embeds one of the module's stores (to wrap its Append, say) does not
// inherit the hand-over: the SDK and the projector call its own Append and
// ApplyBatch. A custom Ledger needs none of
// this: the SDK validates before it calls Append, and a custom Append that
// also takes entries from elsewhere validates them itself.
//
// Implementations live in the subpackages memory, sqlite and postgres; every
// Store passes both halves of the conformance suite in adaptertest, and the
// bus ledger passes its Ledger half.
//
// Of this module it imports events only, and otherwise the standard library.
package adapters
