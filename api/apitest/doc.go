// Package apitest runs a real API server for tests of its clients (cmd/alineo):
// package api's Server over an embedded NATS (testenv), a projector and a
// SQLite read model, with helpers to publish sessions and wait until they are
// projected. It is imported by tests only.
//
// Of this module it imports adapters/sqlite, api, bus, events, jobs,
// projections and testenv only.
package apitest
