// Package postgres is the Postgres adapters.Store (both the Ledger and the
// ReadModel) and adapters.ProjectionStore, on a pgx/v5 pool.
//
// The tables, columns and composite index are those of the TypeScript SDK's
// Postgres adapter (BIGSERIAL ids, BIGINT timestamps, a JSONB payload), so a ledger written by
// the TypeScript SDK reads back here and the other way round. The additions (a
// unique ledger_seq column, the alineo_sandbox_details summary table,
// alineo_projection_offsets and a fingerprint column on alineo_environments)
// come from the same idempotent migration, run under pg_advisory_xact_lock so
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
// Append, AppendBatch and ApplyBatch validate every entry (events.Validate)
// and refuse an invalid one with an error wrapping adapters.ErrInvalidEntry;
// entries this module's SDK and projector validated already come through
// AppendValidated and ApplyValidated and are not validated again.
//
// It imports events, adapters (and adapters/internal), internal/validated and
// pgx; never the bus or the SDK.
package postgres
