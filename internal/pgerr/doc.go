// Package pgerr tells a Postgres outage from a refusal, for the module's
// Postgres stores (the ledger's and the checkpoints'): an error that says the
// server could not be reached, is shutting down or starting up, or lost the
// connection, as opposed to one the server gave a statement.
//
// Of this module it imports nothing: it is a leaf.
package pgerr
