// Package execd is the per-sandbox execution daemon of sandboxd: an HTTP handler that speaks the
// OpenSandbox execd API (commands, sessions, code and code contexts, the /pty terminal, files,
// directories, metrics, the /proxy/{port} reverse proxy) with the exact command-stream format of
// the real execd, so unmodified OpenSandbox clients work against it.
//
// The sandbox init process serves a *Server on a loopback listener inside the sandbox's namespaces
// (Config.Root = "/"); in development (--no-isolation) it runs on the host with Config.Root set to
// the sandbox's directory. Every file-API path and command cwd resolves under Root, following
// symlinks component by component inside Root, so no path or link (`..`, `/`, `../..`) leaves it:
// like a chroot, `/../x` is Root/x. In --no-isolation mode this confines the file API and the
// starting cwd only; the commands themselves see the host.
//
// Wire-format decisions (API-NOTES §6.1 of the OpenSandbox notes):
//   - Stream events are bare JSON objects each followed by a blank line: `init` first, a `ping`
//     right after it and then every Config.PingInterval, exactly one terminal `error` or
//     `execution_complete`. Unlike the real execd, the response ends right after the terminal
//     event (no post-completion grace sleep); every known client reads to EOF or stops at the
//     terminal event, and the sleep would add a second to every command. Events are flushed as
//     they come, but for those written back to back: `init` goes with the first `ping`, and the
//     terminal event with the response's end, in one write each (a background command's whole
//     answer too), so a client is woken once for them, not once each.
//   - Output is one `stdout`/`stderr` event per line, newline stripped; `\n`, `\r` and `\r\n` end a
//     line; an empty line is sent as "\n"; an unterminated last line is flushed at exit. A line
//     whose event would be longer than Config.MaxLine bytes on the wire (default 4 MiB, the
//     official Go SDK's limit) is split into several events at UTF-8 character boundaries.
//   - Bytes that are not valid UTF-8 are sent the way the real (Go) execd sends them: `text` is the
//     encoding/json rendering, where each invalid byte becomes U+FFFD. As an additive extension,
//     such an event also carries `data`, the exact line bytes in standard base64, so a client that
//     wants the original bytes (the alineo ledger does) can recover them. Other clients ignore it.
//   - Session runs follow the real execd: each run is a fresh shell; the exported variables and
//     the working directory the previous run ended with are carried over (plain variables are not).
//   - Errors are JSON {code, message} with the execd codes, 401 included (code UNAUTHORIZED; the
//     real execd sends {"error": ...} there). /code with a Jupyter language other than python
//     answers 500 RUNTIME_ERROR as the real execd without Jupyter does; python runs with python3
//     when it is installed.
//   - Code contexts (POST /code/context) are stateful without Jupyter. A python (python3) or
//     javascript (js, node) context is one long-lived interpreter (python3, node) running a small
//     driver (driver.py, driver.js) that keeps one namespace across runs; a shell context is a
//     bash session. A run in a context streams what a Jupyter kernel's does: stdout and stderr as
//     raw chunks, then `execution_count`, a `result` event {results: {text}} with the value of the
//     code's last expression (Python's repr, Node's util.inspect) when it has one, and `error`
//     {ename, evalue, traceback} for an exception (class, message, the interpreter's traceback),
//     which ends the run, else `execution_complete`. The traceback is in the error event only, not
//     on stderr. DELETE /code interrupts a context's run (SIGINT: Python's KeyboardInterrupt); the
//     context survives. A context of another language answers 501 NOT_SUPPORTED (it needs Jupyter).
//   - /pty is the real execd's terminal: POST /pty creates a session, GET /pty/{id}/ws attaches a
//     WebSocket with execd's framing (binary frames: a channel byte, then stdin, stdout, stderr or
//     replay bytes; JSON text frames for resize, signal, ping and exit). The session's process (a
//     bash, or the given command, on a pseudo-terminal, or on pipes in pipe mode) starts with the
//     first WebSocket and outlives a detached client; its last MiB of output is kept for replay
//     (?since=), and ?takeover=1 evicts the attached client.
//   - Commands run in their own process group. A timeout, a client disconnect, DELETE /command and
//     Close kill the whole group. Processes a command left running after it exited (`server &`)
//     are not tracked; in an isolated sandbox the PID namespace ends them.
//
// Metrics describe the cgroup execd runs in (the sandbox's cgroup when isolated); without a
// readable cgroup they fall back to /proc/stat and /proc/meminfo, i.e. the machine. In
// --no-isolation mode they therefore describe the parent's cgroup or the host, not one sandbox.
//
// Of this module it imports sandboxd/internal/oomscore and sandboxd/internal/proctree only (and
// the standard library, github.com/coder/websocket and golang.org/x/sys/unix for the /pty
// terminal). It must not import sandboxd or any other alineo package: it runs inside the sandbox
// and knows nothing of the lifecycle server.
package execd
