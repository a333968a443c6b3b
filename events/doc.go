// Package events defines the ledger: the Entry every part of alineo writes and
// reads, the stable event names of the storage format, a documented payload type
// for each event, the JSON codec used on the bus, validation with typed errors,
// and the NATS subject names of the ledger stream. Beside its own names it takes
// extension events: the names other programs append to the same ledger (see
// Event.Extension), in one grammar, with a JSON payload of bounded size.
//
// The event names and the JSON field names of the payloads are a storage format
// shared with the TypeScript SDK: they are never derived from Go type names, and
// a new field is only ever added, never renamed.
//
// Of this module it imports nothing: only the standard library.
package events
