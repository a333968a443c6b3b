// Package alineo is the SDK: a Client that creates sandboxes on an OpenSandbox
// server, a Sandbox handle for each one, and an Exec handle for each command,
// where everything that happens is appended to a ledger (an adapters.Ledger:
// a memory, SQLite or Postgres store, the bus ledger, or your own) before the
// caller sees it. Listings and environments come from a read model
// (adapters.ReadModel), which a store also is.
//
//	client, err := alineo.New(alineo.Options{BaseURL: url, Adapter: store})
//	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host"})
//	defer sb.Close(ctx)
//	res, err := sb.Exec(ctx, "npm ci").Wait()                       // the whole result
//	err = sb.Exec(ctx, "npm test").Pipe(os.Stdout)                  // stream it somewhere
//	for chunk, err := range sb.Exec(ctx, "npm test").Stdout() { … } // chunk by chunk
//
// The ledger rules, which are the TypeScript SDK's (@alineo-labs/sandbox), so
// either SDK reads a ledger the other wrote:
//   - sandbox.created once the container is Running; sandbox.paused, sandbox.resumed
//     and sandbox.closed at StepIndex -1.
//   - Each Exec or ExecCode call takes the handle's next step number (1, 2, 3…)
//     when it is called, failed calls included; its events carry it as StepIndex.
//   - exec.started when the call is made; every exec.output chunk is in the ledger
//     before any consumer sees it; exec.completed before a strict failure is raised.
//   - Writes from one handle keep their order and take their timestamp when they
//     are made; a failed write fails only its own caller (and the later rows of
//     the same exec, so a completion is never recorded with output missing).
//
// Output: execd sends one event per line; an exec.output row (and the chunk a
// reader gets) holds one or more whole lines of one stream. An idle ledger
// records each line on its own as it arrives; while the ledger is busy, the
// lines that arrive meanwhile are merged into the next row. Bytes that are not
// UTF-8 are kept exactly (the row's data field) when the server sends them, as
// sandboxd does. What an interpreter reports of code (ExecCode with a
// Language, CodeContext.Run) besides its output, the value of its last
// expression and its exception, is recorded as the TypeScript SDK records
// execd's result and error events: exec.output rows of type "result" and
// "error", written with exec.completed; an exception's traceback is also a
// stderr row.
//
// Of this module it imports adapters, events, internal/spans,
// internal/validated, internal/workers, opensandbox and redact only; never the server
// (sandboxd): a program without an OpenSandbox server starts sandboxd
// in-process and passes its URL as Options.BaseURL.
package alineo
