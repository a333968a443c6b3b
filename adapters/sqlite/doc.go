// Package sqlite is the SQLite adapters.Store (both the Ledger and the
// ReadModel) and adapters.ProjectionStore, on modernc.org/sqlite (pure Go,
// driver name "sqlite").
//
// The tables, columns and composite index are those of the TypeScript SDK's
// SQLite adapter, so a ledger written by the TypeScript SDK reads back here and the other way
// round. The additions (a unique ledger_seq column, the alineo_sandbox_details
// summary table, alineo_projection_offsets, a fingerprint column on
// alineo_environments, a summarised marker and a nullable actor column on
// alineo_events) come from the
// same idempotent migration, run inside an immediate transaction so that several processes may start at once.
//
// A Store opens nothing until first used. It then creates missing parent
// folders, migrates, switches on WAL, and keeps one writer connection (every
// write is an immediate transaction) beside a pool of readers. The first
// file-backed Store of a process makes SQLite commit with fdatasync(2), as
// SQLite's own Linux builds do, for every database of the process (see
// modernc.org/sqlite's Fdatasync): the same durability, cheaper commits.
// A connection of its own copies the WAL into the database in the background
// (passive checkpoints, paced by the WAL's growth), so that the writer's
// automatic checkpoint, which runs in a commit's path and bounds the WAL (at
// 4000 frames, 16 MB of 4 KB pages), finds the frames copied and synced
// already.
//
// Entries read back ordered by (ts, id). Their Seq is the row id, or for rows a
// projector wrote through ApplyBatch, the ledger (stream) sequence kept in the
// unique ledger_seq column. Sandbox details are served from the summary table,
// kept in the transaction of every write, never aggregated over the entries.
//
// # Sharing the database with the TypeScript SDK
//
// Every read accepts both vocabularies (events.Event.Canonical): the dotted
// names of the storage docs and the names the TypeScript SDK 0.2.0 writes
// (sandbox_created, exec_start, exec_event, exec_complete, checkpoint_created,
// ...). Config.Vocabulary chooses what the store writes: events.Dotted
// (default) or events.TypeScript, exactly the TypeScript SDK's names and
// payload fields, for a database both SDKs write.
//
// The summary is kept by every write of this store, which also marks its rows
// (summarised). Rows another process appends past it (the TypeScript SDK keeps
// no summary) are unmarked and held by the partial index
// alineo_events_unsummarised; every details read probes that index first and,
// when it holds rows, folds them into the summary and marks them in one immediate transaction, so
// listings, GetSandboxDetails and a Resume see every session whoever appended
// it. A caught-up summary costs one probe of an empty index. A database
// migrated from a version without the marker has its summary rebuilt from
// every row once. Rows another process deletes are not noticed (DeleteSandbox
// of this store drops the details with the rows).
//
// The older single-column indexes alineo_events_sandbox_id and
// alineo_events_name (the TypeScript SDK's) are left as they are where they
// exist, and never created: the TypeScript SDK's connect() creates them again
// on every open, so dropping them would make each of its opens rebuild them
// over the whole table. They cost a little on each insert; every read of this
// store uses the composite index either way.
//
// Append, AppendBatch and ApplyBatch validate every entry (events.Validate)
// and refuse an invalid one with an error wrapping adapters.ErrInvalidEntry;
// entries this module's SDK and projector validated already come through
// AppendValidated and ApplyValidated and are not validated again.
//
// Of this module it imports adapters, adapters/internal/..., events and
// internal/validated only, and the driver; never the bus or the SDK.
package sqlite
