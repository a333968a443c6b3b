// Package wire is the JSON of the HTTP API: the bodies the server (package
// api) writes and its Go client (package apiclient) reads, defined once so
// that the two cannot drift apart. Package api re-exports them under the same
// names (api.Error, api.SandboxList, ...).
//
// Of this module it imports adapters, events and jobs only (the types the
// bodies carry): never bus, so that a client links no NATS server.
package wire
