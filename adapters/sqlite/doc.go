// Package sqlite is the SQLite adapters.Store (both the Ledger and the
// ReadModel) and adapters.ProjectionStore, on modernc.org/sqlite (pure Go,
// driver name "sqlite").
//
// The tables, columns and composite index are those of the TypeScript SDK's
// SQLite adapter, so a ledger written by the TypeScript SDK reads back here and the other way
// round. The additions (a unique ledger_seq column, the alineo_sandbox_details
// summary table, alineo_projection_offsets and a fingerprint column on
// alineo_environments) come from the same idempotent migration, run inside an
// immediate transaction so that several processes may start at once.
//
// A Store opens nothing until first used. It then creates missing parent
// folders, migrates, switches on WAL, and keeps one writer connection (every
// write is an immediate transaction) beside a pool of readers.
//
// Entries read back ordered by (ts, id). Their Seq is the row id, or for rows a
// projector wrote through ApplyBatch, the ledger (stream) sequence kept in the
// unique ledger_seq column. Sandbox details are served from the summary table,
// kept in the transaction of every write, never aggregated over the entries.
//
// Append, AppendBatch and ApplyBatch validate every entry (events.Validate)
// and refuse an invalid one with an error wrapping adapters.ErrInvalidEntry;
// entries this module's SDK and projector validated already come through
// AppendValidated and ApplyValidated and are not validated again.
//
// It imports events, adapters (and adapters/internal), internal/validated and
// the driver; never the bus or the SDK.
package sqlite
