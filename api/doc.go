// Package api is the HTTP API of cmd/api: the read model (sandboxes, their
// events and checkpoints, environments), job submission and status on the
// jobs queue, the live audit stream (Server-Sent Events from the ledger
// stream, resumable with Last-Event-ID), Prometheus metrics, the OpenAPI 3
// document and a server-rendered dashboard.
//
// # Auth
//
// With Config.Token set, every /v1 route but /v1/openapi.json needs
// "Authorization: Bearer <token>", or the alineo_token cookie holding it;
// without either the answer is 401 with a JSON error. The dashboard uses the
// cookie, which GET /login?token=<token> sets (HttpOnly, SameSite=Strict)
// before redirecting to the dashboard; EventSource then sends it with the live
// tail's request. The cookie authorizes reads only: a write (POST, DELETE)
// needs the Authorization header (401 without it), a body of Content-Type
// application/json (415 otherwise) and, when the request has an Origin
// header, this server's own origin (403 otherwise), so a page of another
// origin (another port of 127.0.0.1, as sandboxd's proxy serves sandboxes'
// pages) cannot make a signed-in browser write. /healthz and /metrics are
// open (scrapers and probes carry no token). With no Token everything is
// open but for the JSON and Origin checks of writes.
//
// # Live stream
//
// /v1/events/stream sends each ledger entry as one SSE event whose id is its
// ledger sequence. Streams that start live (no Last-Event-ID, no from) share
// one bus subscription per filter, encoded once per event; each has a bounded
// queue (Config.StreamBuffer), and one that falls that far behind gets
// "event: error" and is closed, to resume with Last-Event-ID. A stream that
// resumes replays its own subscription from that sequence, exactly.
//
// # Errors
//
// Every error is JSON: {"code": "...", "message": "..."} (plus "field" for a
// bad job spec), with 400 for bad input, 401, 404 for unknown ids, 503 when a
// dependency (the store, the bus) fails.
//
// # Client
//
// Client (NewClient) is a Go client of the read routes, the jobs routes and
// the live stream (Client.Stream reconnects and resumes with Last-Event-ID);
// cmd/alineo is built on it. Package apitest runs a real Server for tests of
// clients.
//
// This package imports events, adapters, bus and jobs; never a database
// driver, sandboxd or cmd.
package api
