// Package api is the HTTP API of cmd/api: the read model (sandboxes, their
// events and checkpoints, environments), job submission, status, cancel and
// retry on the jobs queue, the queue's executors, the live audit stream (Server-Sent Events from the ledger
// stream, resumable with Last-Event-ID), Prometheus metrics, the OpenAPI 3
// document and a server-rendered dashboard.
//
// # Auth
//
// Tokens name users with a role (Users, from a token file: ParseTokens; the
// single Config.Token is one admin named AdminName). A role allows what the
// ones below it do: RoleRead the dashboard, listings, details and the stream;
// RoleWrite also submit, cancel and retry jobs and delete sandboxes;
// RoleAdmin also the executors (GET /v1/executors, /ui/executors). With
// tokens, every /v1 route but /v1/openapi.json needs
// "Authorization: Bearer <token>", or the alineo_token cookie holding it;
// without a known token the answer is 401 with a JSON error, for a user below
// the route's role 403. Tokens are kept as SHA-256 hashes, compared in
// constant time, and never logged. The user is recorded as who did what: a
// job's Submitter, CanceledBy and RetriedBy, and so the actor of its entries;
// a delete is logged with it. The dashboard uses the
// cookie, which GET /login?token=<token> sets (HttpOnly, SameSite=Strict)
// before redirecting to the dashboard; EventSource then sends it with the live
// tail's request. The cookie authorizes reads only: a write (POST, DELETE)
// needs the Authorization header (401 without it), a body of Content-Type
// application/json (415 otherwise) and, when the request has an Origin
// header, this server's own origin (403 otherwise), so a page of another
// origin (another port of 127.0.0.1, as sandboxd's proxy serves sandboxes'
// pages) cannot make a signed-in browser write. /healthz and /metrics are
// open (scrapers and probes carry no token). With no Token and no Users
// everything is open (every request AnonymousName's, an admin's) but for the
// JSON and Origin checks of writes.
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
// # Dashboard
//
// Server-rendered pages with one embedded script and stylesheet
// (/ui/assets/, no CDN; the CSP allows no inline script) that follow the live
// stream:
//
//   - / lists the sessions, newest first, 200 a page; filters are links
//     and forms, each keeping the others (status, name, run, the sessions
//     with a failed exec, a range of start times, and the event shown in the
//     live tail). Rows and the header figures (shown, running, completed,
//     execs) change as sandbox.created, exec.completed and sandbox.closed
//     arrive; a new sandbox the filters admit appears on top without a
//     reload. The failed-exec filter (an exit code not 0, an error, or
//     interrupted) reads each session from the ledger, at most 1000 a page.
//   - /ui/sandboxes/{name}/{id} is a session: its header (status, execs,
//     completion) live, how it came to be (resumed from, forked from,
//     restored from, spawned from an environment), and a timeline grouping
//     each exec (command, start, duration, exit-code badge, stdout and
//     stderr as terminal text with ANSI colours, the first 4 KiB, live while
//     it runs) between checkpoint, pause, resume and close markers; the raw
//     events one click away. An exec without exec.completed in a session
//     that closed reads as interrupted (its attempt died), not running.
//   - /ui/sandboxes/{name}/{id}/execs/{step} is one exec: command, exit code,
//     duration, and stdout and stderr exactly as recorded (CR kept), the
//     first 64 KiB rendered and the rest paged from
//     GET /v1/sandboxes/{name}/{id}/execs/{step}/output, which answers the
//     exact bytes.
//   - /ui/runs/{run} is the tree of the sessions sharing a run id: a resume
//     under the sandbox it resumed, a fork or a restore under the sandbox
//     whose checkpoint it started from, environments at the roots; each
//     node names itself, then where it came from.
//   - /ui/jobs lists the jobs (state, worker, attempt, steps done, checkpoint,
//     sandbox), refreshed every 2 s, and submits a spec; /ui/jobs/{id} shows
//     a job's attempts, which sandbox each ran in and the takeover that
//     ended it, cancels it (two clicks; a running job stops before its next
//     step) and retries a failed or canceled one as a new job.
//   - /ui/executors lists the queue's workers (GET /v1/executors): live,
//     draining, silent (missed three heartbeats) or unknown (a running job
//     names it, it keeps no presence record), their jobs and last heartbeat,
//     refreshed every 2 s.
//
// Writes from the dashboard (submit, cancel or retry a job, delete a
// session) send "Authorization: Bearer" with the token the user signed in
// with, kept in the tab's sessionStorage; without one the page asks for it.
// Empty lists and failures (404, a read model or queue that is down: 503)
// have pages of their own.
//
// # Errors
//
// Every error is JSON: {"code": "...", "message": "..."} (plus "field" for a
// bad job spec), with 400 for bad input, 401, 404 for unknown ids, 409 for a
// job whose state refuses the write (cancel a settled job, retry one that
// did not fail), 503 when a dependency (the store, the bus) fails.
//
// # Client
//
// The Go client of the read routes, the jobs routes and the live stream is
// package apiclient (cmd/alineo is built on it); the JSON bodies both sides
// share (Error, SandboxList, EventPage, JobList) are defined in package wire
// and re-exported here. Package apitest runs a real Server for tests of
// clients.
//
// Of this module it imports adapters, api/wire, audit, bus, events and jobs only;
// never a database driver, sandboxd or cmd.
package api
