// Package postgres is a checkpoints.Store in a Postgres database, on a pgx/v5
// pool. Any number of Store values, in any number of processes and hosts, may
// share one database: that is what makes a snapshot taken on one host
// restorable on another.
//
// Every write runs in one transaction that first locks the thread's lease row
// (SELECT ... FOR UPDATE), so the writer check, the head compare-and-set and
// the write are atomic against every other writer of the thread, wherever it
// runs. AcquireWriter is a single upsert that takes an empty or expired lease
// and raises its fence in the same statement. Lease expiry is judged by the
// store's clock (checkpoints.Options.Now), so hosts sharing a database need
// clocks within a small fraction of the lease duration of each other.
//
// Tables are those of the SQLite store (prefix alineo_checkpoint), so the
// database may be the ledger's own. Open migrates them with idempotent
// statements under a transaction-scoped advisory lock: several processes may
// start at once. Checkpoint bodies are kept as JSON text, not JSONB, so that a
// checkpoint reads back byte for byte (JSONB refuses \u0000 and reorders keys).
//
// Every session sets idle_in_transaction_session_timeout to the lease
// duration (unless the DSN sets it): a process stopped inside a write
// transaction would otherwise keep its thread's lease row locked, and no other
// process could take the thread over.
//
// Driver errors are translated at the boundary: a duplicate checkpoint id
// becomes checkpoints.ErrDuplicateID, whichever store inserted it first; no
// caller inspects a pgx error.
//
// Of this module it imports checkpoints and internal/pgerr only (the
// outage classification it shares with the ledger's Postgres store), and pgx
// and the standard library; never sandboxd or the ledger adapters.
package postgres
