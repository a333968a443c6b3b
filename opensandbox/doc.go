// Package opensandbox is a typed HTTP client for the three OpenSandbox APIs: the
// lifecycle API (sandboxes, endpoints, snapshots), the execd API that runs inside each
// sandbox (commands, sessions, code, files, metrics) and the egress sidecar API
// (network policy, credential vault).
//
// A Client talks to the lifecycle server. Client.Execd and Client.Egress resolve a
// sandbox's endpoint for the execd (44772) or egress (18080) port, directly or through
// the server proxy (Config.UseServerProxy), and return per-sandbox clients.
//
// Design points, each a deliberate departure from the official Go SDK:
//   - No client-wide timeout: unary calls get Config.RequestTimeout through their
//     context, command streams live exactly as long as their context and are never cut
//     by a timer.
//   - Retries (exponential backoff) only for idempotent calls (GET, PUT, DELETE and
//     PATCH of absolute values); a POST that creates something is sent exactly once.
//   - A command stream ends at its terminal event (execution_complete or error) without
//     waiting for the server to close the response; the exit code comes from the error
//     event's evalue; a stream that ends without a terminal event is an error wrapping
//     ErrStreamTruncated, never exit 0.
//   - Waits for a state poll a tenth of the time waited, at least 250 µs apart; the
//     ...AndWait calls (PauseAndWait, ResumeAndWait, CreateSnapshotAndWait) ask the
//     server to answer once the transition is done, with the resource (Prefer:
//     return=representation, wait=N, RFC 7240): one call on sandboxd, the call and
//     the poll on a server that ignores the preference.
//   - Uploads are streamed multipart bodies; downloads are streamed and support ranges.
//   - The PTY terminal, which the official SDK does not wrap: CreatePTY, PTYStatus,
//     DeletePTY, and AttachPTY, a WebSocket client of execd's framing (stdin, resize,
//     signal, ping; output, replay from a byte offset, exit; takeover). Cancelling the
//     ctx of PTY.Next closes the connection (the WebSocket library's rule).
//
// Errors: every non-2xx response becomes an *APIError, which matches the sentinels
// ErrNotFound, ErrConflict, ... with errors.Is.
//
// Of this module it imports nothing: only the standard library,
// github.com/cenkalti/backoff/v4 and github.com/coder/websocket (the PTY
// terminal; the module sandboxd's execd serves it with).
package opensandbox
