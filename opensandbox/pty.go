package opensandbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/coder/websocket"
)

// PTY sessions: execd's WebSocket terminal (POST /pty, GET /pty/{id}/ws; the
// public repository's components/execd/PTY.md). The shell starts with the first
// WebSocket and may outlive it; output is kept (bounded) for replay from a byte
// offset.

// PTY channel bytes: the first byte of every binary frame.
const (
	ptyChanStdin  byte = 0x00 // client → server
	ptyChanStdout byte = 0x01
	ptyChanStderr byte = 0x02 // pipe mode only
	ptyChanReplay byte = 0x03 // 8-byte big-endian offset, then output bytes
)

// PTYCloseTakenOver is the WebSocket close code of a client evicted by another
// one that attached with PTYAttachOptions.Takeover.
const PTYCloseTakenOver = 4001

// ptyReadLimit bounds one frame from the server (execd sends at most 32 KiB of
// output a frame, a replay at most its 1 MiB buffer).
const ptyReadLimit = 2<<20 + 64

// PTYRequest creates a PTY session (POST /pty).
type PTYRequest struct {
	// Cwd is the working directory; empty for execd's default.
	Cwd string
	// Command runs this (through execd's shell, "-c") instead of an
	// interactive shell; the session ends when it exits.
	Command string
}

// PTYStatus is GET /pty/{id}.
type PTYStatus struct {
	SessionID    string `json:"session_id"`
	Running      bool   `json:"running"`
	OutputOffset int64  `json:"output_offset"` // bytes of output so far
}

// CreatePTY creates a PTY session and returns its id. The shell starts when the
// first client attaches. Never retried.
func (e *Execd) CreatePTY(ctx context.Context, req PTYRequest) (string, error) {
	w := struct {
		Cwd     string `json:"cwd,omitempty"`
		Command string `json:"command,omitempty"`
	}{req.Cwd, req.Command}
	var out struct {
		SessionID string `json:"session_id"`
	}
	if err := e.unary(ctx, request{method: "POST", path: "/pty", json: w}, &out); err != nil {
		return "", fmt.Errorf("create pty: %w", err)
	}
	if out.SessionID == "" {
		return "", fmt.Errorf("create pty: %w: no session_id in the answer", ErrMalformedStream)
	}
	return out.SessionID, nil
}

// PTYStatus returns a session's state. ErrNotFound if unknown.
func (e *Execd) PTYStatus(ctx context.Context, id string) (*PTYStatus, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: pty status: empty session id", ErrInvalidRequest)
	}
	var out PTYStatus
	if err := e.unary(ctx, request{method: "GET", path: "/pty/" + pathEscape(id), idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("pty status %s: %w", id, err)
	}
	return &out, nil
}

// DeletePTY ends a session: its process group is killed and an attached client
// is disconnected. ErrNotFound if unknown.
func (e *Execd) DeletePTY(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: delete pty: empty session id", ErrInvalidRequest)
	}
	if err := e.unary(ctx, request{method: "DELETE", path: "/pty/" + pathEscape(id), idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete pty %s: %w", id, err)
	}
	return nil
}

// PTYAttachOptions are the query of GET /pty/{id}/ws.
type PTYAttachOptions struct {
	// Pipe runs the session's process on plain pipes instead of a terminal
	// (pty=0): stderr then arrives apart from stdout. Only the attach that
	// starts the process chooses.
	Pipe bool
	// Since asks for the output kept from this byte offset (GET PTYStatus's
	// OutputOffset, or the offset a client has read to) as a replay event
	// before the live output. 0 replays all that is kept.
	Since int64
	// Takeover evicts the client attached now (closed with PTYCloseTakenOver)
	// instead of failing with ErrConflict.
	Takeover bool
}

// PTYEventKind is the kind of a PTYEvent.
type PTYEventKind string

const (
	PTYStdout     PTYEventKind = "stdout" // terminal output (stdout and stderr on a terminal)
	PTYStderr     PTYEventKind = "stderr" // pipe mode only
	PTYReplay     PTYEventKind = "replay" // kept output from Offset, sent before live output
	PTYExit       PTYEventKind = "exit"   // the process ended: ExitCode; the last event
	PTYErrorFrame PTYEventKind = "error"  // the server reports a problem: Code, Message
	PTYPong       PTYEventKind = "pong"   // the answer to Ping
)

// PTYEvent is one frame from the server.
type PTYEvent struct {
	Kind     PTYEventKind
	Data     []byte // output bytes (stdout, stderr, replay)
	Offset   int64  // replay: byte offset of Data[0] in the session's output
	ExitCode int    // exit
	Code     string // error: e.g. STDIN_WRITE_FAILED, INVALID_FRAME
	Message  string // error
}

// PTY is one client attached to a PTY session's WebSocket. Write, Resize,
// Signal, Ping and Close are safe for concurrent use; Next must be called from
// one goroutine at a time. Closing a PTY (or its Execd) detaches: the session's
// process keeps running until it exits or DeletePTY.
type PTY struct {
	ex        *Execd
	conn      *websocket.Conn
	sessionID string
	mode      string

	// Owned by the reader (Next).
	queued []PTYEvent // events read while attaching, delivered first
	ended  bool
	err    error

	closed    atomic.Bool
	closeOnce sync.Once
}

// ptyServerFrame is a JSON text frame from the server.
type ptyServerFrame struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Mode      string `json:"mode"`
	ExitCode  *int   `json:"exit_code"`
	Error     string `json:"error"`
	Code      string `json:"code"`
}

// AttachPTY opens the WebSocket of session id and waits for the server's
// connected frame (which follows the replay, if any: Next returns it first).
// The process starts now if it had not. Errors: ErrNotFound for an unknown
// session, ErrConflict while another client is attached (unless Takeover), a
// *PTYError (START_FAILED) when the process could not start. Close the PTY
// when done; closing ex closes it too.
func (e *Execd) AttachPTY(ctx context.Context, id string, opts PTYAttachOptions) (*PTY, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: attach pty: empty session id", ErrInvalidRequest)
	}
	if e.isClosed() {
		return nil, ErrClosed
	}
	q := url.Values{}
	if opts.Pipe {
		q.Set("pty", "0")
	}
	if opts.Since > 0 {
		q.Set("since", strconv.FormatInt(opts.Since, 10))
	}
	if opts.Takeover {
		q.Set("takeover", "1")
	}
	target := e.t.url("/pty/"+pathEscape(id)+"/ws", q)
	switch {
	case strings.HasPrefix(target, "https://"):
		target = "wss://" + strings.TrimPrefix(target, "https://")
	case strings.HasPrefix(target, "http://"):
		target = "ws://" + strings.TrimPrefix(target, "http://")
	}
	hdr := e.t.headers.Clone()
	hdr.Set("User-Agent", userAgent)
	conn, resp, err := websocket.Dial(ctx, target, &websocket.DialOptions{HTTPClient: e.t.hc, HTTPHeader: hdr})
	if err != nil {
		if resp != nil && resp.StatusCode >= 300 && resp.Body != nil && resp.Request != nil {
			return nil, fmt.Errorf("attach pty %s: %w", id, readAPIError(resp))
		}
		return nil, fmt.Errorf("attach pty %s: %w", id, err)
	}
	conn.SetReadLimit(ptyReadLimit)
	p := &PTY{ex: e, conn: conn, sessionID: id}
	if !e.track(p, func() { _ = p.Close() }) {
		_ = conn.CloseNow()
		return nil, ErrClosed
	}
	if err := p.awaitConnected(ctx); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("attach pty %s: %w", id, err)
	}
	return p, nil
}

// awaitConnected reads up to the connected frame, queueing what comes first.
func (p *PTY) awaitConnected(ctx context.Context) error {
	for {
		ev, f, err := p.read(ctx)
		if err != nil {
			return err
		}
		switch {
		case f != nil && f.Type == "connected":
			p.mode = f.Mode
			return nil
		case ev.Kind == PTYErrorFrame:
			return &PTYError{SessionID: p.sessionID, Code: ev.Code, Message: ev.Message}
		case ev.Kind != "":
			p.queued = append(p.queued, ev)
		}
	}
}

// SessionID returns the session's id.
func (p *PTY) SessionID() string { return p.sessionID }

// Mode returns "pty" or "pipe", as the server's connected frame said.
func (p *PTY) Mode() string { return p.mode }

// Next returns the next event. After the exit event it returns io.EOF. A
// connection that ends without an exit event is an error wrapping
// ErrStreamTruncated (and ErrConflict when another client took the session
// over); after Close, ErrClosed. Errors repeat once returned. Cancelling ctx
// closes the connection (the WebSocket library's rule): read with a ctx that
// lives as long as the terminal, not with a per-read timeout.
func (p *PTY) Next(ctx context.Context) (PTYEvent, error) {
	if len(p.queued) > 0 {
		ev := p.queued[0]
		p.queued = p.queued[1:]
		return ev, nil
	}
	if p.ended {
		return PTYEvent{}, io.EOF
	}
	if p.err != nil {
		return PTYEvent{}, p.err
	}
	for {
		ev, _, err := p.read(ctx)
		if err != nil {
			p.err = err
			return PTYEvent{}, err
		}
		if ev.Kind == "" {
			continue // connected again, or a frame of a later protocol
		}
		if ev.Kind == PTYExit {
			p.ended = true
			_ = p.Close()
		}
		return ev, nil
	}
}

// read reads one frame: an event, or (for JSON frames without one) the frame.
func (p *PTY) read(ctx context.Context) (PTYEvent, *ptyServerFrame, error) {
	typ, b, err := p.conn.Read(ctx)
	if err != nil {
		return PTYEvent{}, nil, p.readError(ctx, err)
	}
	if typ == websocket.MessageBinary {
		return decodeBinaryFrame(b)
	}
	var f ptyServerFrame
	if err := json.Unmarshal(b, &f); err != nil {
		return PTYEvent{}, nil, fmt.Errorf("%w: pty %s: text frame %q: %w", ErrMalformedStream, p.sessionID, truncate(b, 64), err)
	}
	switch f.Type {
	case "exit":
		if f.ExitCode == nil {
			return PTYEvent{}, nil, fmt.Errorf("%w: pty %s: exit frame without exit_code", ErrMalformedStream, p.sessionID)
		}
		return PTYEvent{Kind: PTYExit, ExitCode: *f.ExitCode}, &f, nil
	case "error":
		return PTYEvent{Kind: PTYErrorFrame, Code: f.Code, Message: f.Error}, &f, nil
	case "pong":
		return PTYEvent{Kind: PTYPong}, &f, nil
	}
	return PTYEvent{}, &f, nil
}

func decodeBinaryFrame(b []byte) (PTYEvent, *ptyServerFrame, error) {
	if len(b) == 0 {
		return PTYEvent{}, nil, nil
	}
	data := b[1:]
	switch b[0] {
	case ptyChanStdout:
		return PTYEvent{Kind: PTYStdout, Data: data}, nil, nil
	case ptyChanStderr:
		return PTYEvent{Kind: PTYStderr, Data: data}, nil, nil
	case ptyChanReplay:
		if len(data) < 8 {
			return PTYEvent{}, nil, fmt.Errorf("%w: replay frame of %d bytes", ErrMalformedStream, len(b))
		}
		return PTYEvent{Kind: PTYReplay, Offset: int64(binary.BigEndian.Uint64(data[:8])), Data: data[8:]}, nil, nil
	}
	return PTYEvent{}, nil, nil // a channel of a later protocol
}

func (p *PTY) readError(ctx context.Context, err error) error {
	if p.ex.isClosed() {
		return ErrClosed
	}
	var ce websocket.CloseError
	switch {
	case errors.As(err, &ce) && ce.Code == PTYCloseTakenOver:
		return fmt.Errorf("%w: pty %s: %w: taken over by another client", ErrStreamTruncated, p.sessionID, ErrConflict)
	case ctx.Err() != nil:
		return fmt.Errorf("pty %s: %w", p.sessionID, ctx.Err())
	case p.closed.Load():
		return ErrClosed
	}
	return fmt.Errorf("%w: pty %s: %w", ErrStreamTruncated, p.sessionID, err)
}

// Write sends b to the process's stdin (one binary frame).
func (p *PTY) Write(ctx context.Context, b []byte) error {
	frame := make([]byte, 1+len(b))
	frame[0] = ptyChanStdin
	copy(frame[1:], b)
	if err := p.conn.Write(ctx, websocket.MessageBinary, frame); err != nil {
		return fmt.Errorf("pty %s: write stdin: %w", p.sessionID, err)
	}
	return nil
}

// Resize sets the terminal's size (ignored in pipe mode).
func (p *PTY) Resize(ctx context.Context, cols, rows int) error {
	if cols <= 0 || rows <= 0 || cols > 0xffff || rows > 0xffff {
		return fmt.Errorf("%w: pty resize: %dx%d is not a terminal size", ErrInvalidRequest, cols, rows)
	}
	return p.control(ctx, map[string]any{"type": "resize", "cols": cols, "rows": rows})
}

// Signal sends a signal by name (SIGINT, SIGTERM, SIGKILL, SIGQUIT, SIGHUP) to
// the terminal's foreground process group.
func (p *PTY) Signal(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("%w: pty signal: empty name", ErrInvalidRequest)
	}
	return p.control(ctx, map[string]any{"type": "signal", "signal": name})
}

// Ping asks for a pong event.
func (p *PTY) Ping(ctx context.Context) error {
	return p.control(ctx, map[string]any{"type": "ping"})
}

func (p *PTY) control(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: pty frame: %w", ErrInvalidRequest, err)
	}
	if err := p.conn.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("pty %s: send %s: %w", p.sessionID, b, err)
	}
	return nil
}

// Close detaches from the session (a normal WebSocket close); the process
// keeps running. Idempotent.
func (p *PTY) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		p.ex.untrack(p)
		// Close waits (bounded by the library's 5 s) for the server's close
		// frame; a server that has gone is cut off at once.
		if err := p.conn.Close(websocket.StatusNormalClosure, ""); err != nil {
			_ = p.conn.CloseNow()
		}
	})
	return nil
}

// PTYError is an error frame the server sent instead of connecting (e.g.
// START_FAILED: the shell could not start).
type PTYError struct {
	SessionID string
	Code      string
	Message   string
}

func (e *PTYError) Error() string {
	return fmt.Sprintf("opensandbox: pty %s: %s: %s", e.SessionID, e.Code, e.Message)
}
