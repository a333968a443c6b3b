// Package audit verifies the ledger's hash chains (docs/architecture.md
// §4.10): every session's entries, read in append order, must each hash to
// their Hash and name the entry before them as PrevHash. A Verifier takes a
// ledger's entries one at a time (from any Scanner: the SQLite and Postgres
// stores stream them), keeps a few fields per session, not the entries, and
// reports each session as unchained (written without a chain: the
// TypeScript SDK), chained, or broken at its first entry that breaks.
// Anchors, the sessions' heads copied elsewhere, catch a rewrite of a whole
// chain, which the chain alone cannot.
//
// Of this module it imports events and internal/streammsg only; it reads the
// bus with nats.go's client, not package bus.
package audit
