// Package postgres is the Postgres adapters.Store (both the Ledger and the
// ReadModel) and adapters.ProjectionStore, on a pgx/v5 pool.
//
// The tables, columns and composite index are those of the TypeScript SDK's
// Postgres adapter (BIGSERIAL ids, BIGINT timestamps, a JSONB payload), so a ledger written by
// the TypeScript SDK reads back here and the other way round. The additions (a
// unique ledger_seq column, the alineo_sandbox_details summary table,
// alineo_projection_offsets, a fingerprint column on alineo_environments and
// a summarised marker and a nullable actor column on alineo_events) come from
// the same idempotent migration, run under pg_advisory_xact_lock so
// that several processes may start at once.
//
// A Store connects on first use, not in Open. Errors are translated at the
// boundary: a unique violation wraps adapters.ErrConflict, a server that cannot
// be reached or went away wraps adapters.ErrUnavailable, and the same Store
// works again once the server is back.
//
// JSONB normalises JSON text (key order, white space, number spelling): a
// payload reads back as the same JSON value, not the same bytes. The JSON
// literal null and an absent payload (SQL NULL) stay distinct.
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
// when it holds rows, folds them into the summary and marks them one catch-up at a time across processes (an advisory lock), so
// listings, GetSandboxDetails and a Resume see every session whoever appended
// it. A caught-up summary costs one probe of an empty index. The probe reads
// above the last row the store folded (the index keeps the dead entries of
// folded rows until a vacuum), and the whole index once a second: a row whose
// transaction took its id before another that committed first lists within
// that second. A database
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
// The TypeScript SDK's Postgres adapter stores every payload as a JSONB string
// holding the JSON text; such a payload reads as the JSON it holds. This store
// writes JSONB objects in either vocabulary.
//
// Append, AppendBatch and ApplyBatch validate every entry (events.Validate)
// and refuse an invalid one with an error wrapping adapters.ErrInvalidEntry;
// entries this module's SDK and projector validated already come through
// AppendValidated and ApplyValidated and are not validated again.
//
// Of this module it imports adapters, adapters/internal/..., events,
// internal/pgerr and internal/validated only, and pgx; never the bus or the
// SDK.
package postgres
