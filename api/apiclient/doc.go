// Package apiclient is the Go client of the HTTP API (package api) that
// cmd/alineo is built on: the read routes (sandboxes, their events), the jobs
// routes (list, status, submit, cancel, retry), the executors and the live
// stream, which Client.Stream
// follows across dropped connections by resuming with Last-Event-ID. Package
// apitest runs a real server to test it against.
//
// Of this module it imports adapters, events, jobs and api/wire only; never
// api or bus, so that a program built on it links no NATS server.
package apiclient
