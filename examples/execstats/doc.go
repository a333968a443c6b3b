// Package execstats is an example projection to copy: exec statistics from
// the ledger (count, duration p50/p95 and exit codes per image, session name
// and day) in SQLite or Postgres, exactly once through projections.SQLHandler.
//
// It reads sandbox.created, exec.started and exec.completed only (the filter
// is pushed down to JetStream). An exec's image is the one its sandbox's
// sandbox.created records ("" where none is recorded: a ledger the TypeScript
// SDK wrote, a restore of a snapshot of unknown origin); its duration is the
// completed entry's Ts minus its started entry's Ts (same sandbox, step and
// branch); its day is the UTC date of completion. The session name (the name a
// sandbox is recorded under, usually its job or template) splits an image's
// figures further. A sandbox's entries all fall in one partition, so the
// projection partitions.
//
// Definition describes the projection for projections.Register; a binary that
// wants it registers it (cmd/projector does). Importing the package registers
// nothing.
//
// Of this module it imports events and projections only.
package execstats
