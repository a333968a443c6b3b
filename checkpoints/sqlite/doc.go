// Package sqlite is a checkpoints.Store in a SQLite file (modernc.org/sqlite,
// driver "sqlite", no cgo). Several Store values, in one process or several,
// may share a file: every check-and-write runs in one IMMEDIATE transaction on
// a single writer connection per Store, the file is in WAL mode and waits on
// busy_timeout, so the head compare-and-set and the writer lease hold across
// them. Reads use a separate pool.
//
// Tables are prefixed alineo_checkpoint so the file may be the ledger's own.
//
// Of this module it imports checkpoints only, and database/sql, the sqlite
// driver and the standard library.
package sqlite
