package opensandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EndpointConfig configures a direct per-sandbox client (NewExecd, NewEgress): the
// endpoint to talk to and the same knobs as Config. The zero value of every field
// but Endpoint.URL is valid.
type EndpointConfig struct {
	Endpoint       Endpoint
	HTTPClient     *http.Client
	Logger         *slog.Logger
	Retry          RetryConfig
	RequestTimeout time.Duration
}

func (cfg EndpointConfig) transport() (*transport, error) {
	u, err := url.Parse(cfg.Endpoint.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: endpoint URL %q must be an absolute http(s) URL", ErrInvalidRequest, cfg.Endpoint.URL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = strings.TrimRight(u.RawPath, "/")
	u.RawQuery, u.Fragment = "", ""
	h := http.Header{}
	for k, v := range cfg.Endpoint.Headers {
		h.Set(k, v)
	}
	return newTransport(u, h, transportConfig{
		HTTPClient: cfg.HTTPClient, Logger: cfg.Logger, Retry: cfg.Retry, RequestTimeout: cfg.RequestTimeout,
	}), nil
}

func (c *Client) endpointConfig(ep Endpoint) EndpointConfig {
	retry := c.t.retry
	if retry.MaxRetries == 0 {
		retry.MaxRetries = -1 // already defaulted: 0 means disabled here
	}
	timeout := c.t.timeout
	if timeout == 0 {
		timeout = -1
	}
	return EndpointConfig{Endpoint: ep, HTTPClient: c.t.hc, Logger: c.t.log, Retry: retry, RequestTimeout: timeout}
}

// Execd is a client for one sandbox's execd API. Safe for concurrent use. It tracks
// its open streams and metric watches; Close cancels them all (uploads and download
// bodies are bounded by their own contexts instead).
type Execd struct {
	t   *transport
	cfg EndpointConfig // what it was made from, for Reopen

	mu       sync.Mutex
	closed   bool
	inflight map[any]func() // open streams and watches, by key, with their cancel
	wg       sync.WaitGroup // background drains
}

// NewExecd returns an execd client for an endpoint you already have (e.g. from
// GetEndpoint, or a local execd). It does not contact the server; see WaitReady.
func NewExecd(cfg EndpointConfig) (*Execd, error) {
	t, err := cfg.transport()
	if err != nil {
		return nil, err
	}
	return &Execd{t: t, cfg: cfg, inflight: map[any]func(){}}, nil
}

// Reopen returns a new client on e's endpoint with e's settings, closed or
// not: a sandbox keeps its endpoints across a pause, so a client closed by
// a pause is reopened without resolving the endpoint again. It does not
// contact the server; see WaitReady.
func (e *Execd) Reopen() (*Execd, error) { return NewExecd(e.cfg) }

// Execd resolves the sandbox's execd endpoint (port 44772, or the server proxy with
// Config.UseServerProxy) and waits until execd answers /ping, bounded by ctx and
// Config.ExecdReadyTimeout. A wait that gives up returns an error wrapping ErrNotReady
// and the last probe error. The caller must Close the returned client.
func (c *Client) Execd(ctx context.Context, sandboxID string) (*Execd, error) {
	ep, err := c.GetEndpoint(ctx, sandboxID, ExecdPort)
	if err != nil {
		return nil, fmt.Errorf("execd of %s: %w", sandboxID, err)
	}
	ex, err := NewExecd(c.endpointConfig(ep))
	if err != nil {
		return nil, fmt.Errorf("execd of %s: %w", sandboxID, err)
	}
	wctx := ctx
	if c.execdReadyTimeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, c.execdReadyTimeout)
		defer cancel()
	}
	if err := ex.WaitReady(wctx); err != nil {
		ex.Close()
		return nil, fmt.Errorf("execd of %s: %w", sandboxID, err)
	}
	return ex, nil
}

// URL returns the execd base URL.
func (e *Execd) URL() string { return e.t.base.String() }

// Close cancels every open stream and metric watch, waits for background drains to
// stop, and makes further calls fail with ErrClosed. Idempotent.
func (e *Execd) Close() error {
	e.mu.Lock()
	e.closed = true
	cancels := make([]func(), 0, len(e.inflight))
	for _, c := range e.inflight {
		cancels = append(cancels, c)
	}
	e.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	e.wg.Wait()
	return nil
}

func (e *Execd) track(key any, cancel func()) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.inflight[key] = cancel
	return true
}

func (e *Execd) untrack(key any) {
	e.mu.Lock()
	delete(e.inflight, key)
	e.mu.Unlock()
}

// testHookDrain, set by tests only, is called for each drain started.
var testHookDrain func()

// startDrain runs s.drain in the background, tracked by Close. It reports false if
// the client is closed (the caller then cancels at once).
func (e *Execd) startDrain(s *Stream) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	if testHookDrain != nil {
		testHookDrain()
	}
	e.inflight[s] = s.cancel
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		s.drain()
		e.untrack(s)
	}()
	return true
}

func (e *Execd) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// Ping checks execd once (GET /ping).
func (e *Execd) Ping(ctx context.Context) error {
	if e.isClosed() {
		return ErrClosed
	}
	return e.t.do(ctx, request{method: "GET", path: "/ping"}, nil)
}

// WaitReady probes /ping (on the schedule of WaitRunning, at most 2 s apart, each probe
// at most 5 s) until it answers, ctx ends (error wrapping ErrNotReady and the last
// probe error) or a probe gets 401, 403 or 404, which waiting cannot fix.
func (e *Execd) WaitReady(ctx context.Context) error {
	bo := pollBackOff(2 * time.Second)
	var last error // the last probe that ended before ctx did
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := e.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil && last != nil {
			err = last // cut short by ctx: the probe before it says why execd is not ready
		}
		last = err
		if errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrForbidden) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrClosed) {
			return fmt.Errorf("%w: execd %s: %w", ErrNotReady, e.URL(), err)
		}
		e.t.log.DebugContext(ctx, "opensandbox: execd not ready", "url", e.URL(), "attempt", attempt, "err", err)
		if serr := sleepCtx(ctx, bo.NextBackOff()); serr != nil {
			return fmt.Errorf("%w: execd %s after %d probes: %w (last error: %w)", ErrNotReady, e.URL(), attempt, serr, err)
		}
	}
}

// openStream sends a POST that answers with an event stream. The request lives as
// long as ctx and the stream; it is never retried and has no timeout of its own.
func (e *Execd) openStream(ctx context.Context, op string, r request) (*Stream, error) {
	if e.isClosed() {
		return nil, ErrClosed
	}
	sctx, cancel := context.WithCancel(ctx)
	r.accept = "text/event-stream"
	resp, err := e.t.send(sctx, r)
	if err != nil {
		cancel()
		return nil, err
	}
	s := newStream(sctx, cancel, op, resp, e)
	if !e.track(s, func() { s.Close() }) {
		s.Close()
		return nil, ErrClosed
	}
	return s, nil
}

// CommandRequest runs a shell command (POST /command).
type CommandRequest struct {
	Command string
	Cwd     string            // working directory; must exist
	Envs    map[string]string // extra environment
	// Timeout kills the command after this long (sent in ms; the kill ends the stream
	// with exit code -1). 0 means no limit.
	Timeout time.Duration
	// Background starts the command detached: the stream carries only init, ping and
	// execution_complete; read output with CommandLogs, poll CommandStatus.
	Background bool
	UID        *int // run as this user
	GID        *int // needs UID
	// ExactOutput asks for output as chunks of exact bytes (the server's
	// extension, sandboxd's; HeaderExactOutput) instead of execd's lines with
	// their terminators stripped. A server without the extension ignores it:
	// Stream.Exact says which format came.
	ExactOutput bool
}

// exactHeader is the request header of a stream that asks for exact output.
func exactHeader(on bool) http.Header {
	if !on {
		return nil
	}
	return exactOn
}

// exactOn is exactHeader's header, shared by every request: the transport
// copies its values' slices into a request's own header, which never
// changes them.
var exactOn = http.Header{HeaderExactOutput: {"1"}}

type commandWire struct {
	Command    string            `json:"command"`
	Cwd        string            `json:"cwd,omitempty"`
	Background bool              `json:"background,omitempty"`
	Timeout    int64             `json:"timeout,omitempty"`
	UID        *int              `json:"uid,omitempty"`
	GID        *int              `json:"gid,omitempty"`
	Envs       map[string]string `json:"envs,omitempty"`
}

func timeoutMillis(d time.Duration) (int64, error) {
	if d < 0 {
		return 0, fmt.Errorf("%w: negative timeout %v", ErrInvalidRequest, d)
	}
	if d == 0 {
		return 0, nil
	}
	return max(1, int64((d+time.Millisecond-1)/time.Millisecond)), nil
}

// RunCommand starts a command and returns its event stream. Startup failures
// (bad cwd, missing command) come back as *APIError (ErrBadRequest). A nonzero exit
// is not an error: it is in the stream's Result. The stream lives as long as ctx (no
// client timeout applies); close it when done.
func (e *Execd) RunCommand(ctx context.Context, req CommandRequest) (*Stream, error) {
	if strings.TrimSpace(req.Command) == "" {
		return nil, fmt.Errorf("%w: run command: empty command", ErrInvalidRequest)
	}
	if req.GID != nil && req.UID == nil {
		return nil, fmt.Errorf("%w: run command: gid needs uid", ErrInvalidRequest)
	}
	ms, err := timeoutMillis(req.Timeout)
	if err != nil {
		return nil, fmt.Errorf("run command: %w", err)
	}
	w := commandWire{Command: req.Command, Cwd: req.Cwd, Background: req.Background, Timeout: ms,
		UID: req.UID, GID: req.GID, Envs: req.Envs}
	s, err := e.openStream(ctx, "command", request{method: "POST", path: "/command", json: w, header: exactHeader(req.ExactOutput)})
	if err != nil {
		return nil, fmt.Errorf("run command: %w", err)
	}
	return s, nil
}

// CodeContext names a code-interpreter context (Jupyter kernel).
type CodeContext struct {
	ID       string `json:"id,omitempty"`
	Language string `json:"language,omitempty"`
}

// CodeRequest runs code (POST /code). With no Context.Language execd runs it as a
// shell command; languages need a Jupyter-enabled image.
type CodeRequest struct {
	Code    string
	Context *CodeContext
	// ExactOutput: see CommandRequest.ExactOutput.
	ExactOutput bool
}

// RunCode runs code and returns its event stream (see RunCommand).
func (e *Execd) RunCode(ctx context.Context, req CodeRequest) (*Stream, error) {
	if req.Code == "" {
		return nil, fmt.Errorf("%w: run code: empty code", ErrInvalidRequest)
	}
	w := struct {
		Code    string       `json:"code"`
		Context *CodeContext `json:"context,omitempty"`
	}{req.Code, req.Context}
	s, err := e.openStream(ctx, "code", request{method: "POST", path: "/code", json: w, header: exactHeader(req.ExactOutput)})
	if err != nil {
		return nil, fmt.Errorf("run code: %w", err)
	}
	return s, nil
}

// CreateCodeContext creates a code context for language (POST /code/context).
// Never retried.
func (e *Execd) CreateCodeContext(ctx context.Context, language, cwd string) (CodeContext, error) {
	if language == "" {
		return CodeContext{}, fmt.Errorf("%w: create code context: empty language", ErrInvalidRequest)
	}
	w := struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd,omitempty"`
	}{language, cwd}
	var out CodeContext
	if err := e.unary(ctx, request{method: "POST", path: "/code/context", json: w}, &out); err != nil {
		return CodeContext{}, fmt.Errorf("create code context: %w", err)
	}
	return out, nil
}

// ListCodeContexts lists code contexts, of one language if language is not empty.
func (e *Execd) ListCodeContexts(ctx context.Context, language string) ([]CodeContext, error) {
	q := url.Values{}
	if language != "" {
		q.Set("language", language)
	}
	var out []CodeContext
	if err := e.unary(ctx, request{method: "GET", path: "/code/contexts", query: q, idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list code contexts: %w", err)
	}
	return out, nil
}

// DeleteCodeContext deletes a code context. ErrNotFound if unknown.
func (e *Execd) DeleteCodeContext(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: delete code context: empty id", ErrInvalidRequest)
	}
	if err := e.unary(ctx, request{method: "DELETE", path: "/code/contexts/" + pathEscape(id), idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete code context %s: %w", id, err)
	}
	return nil
}

// InterruptCode interrupts the code running in a context (DELETE /code?id=).
func (e *Execd) InterruptCode(ctx context.Context, contextID string) error {
	if contextID == "" {
		return fmt.Errorf("%w: interrupt code: empty context id", ErrInvalidRequest)
	}
	q := url.Values{"id": {contextID}}
	if err := e.unary(ctx, request{method: "DELETE", path: "/code", query: q, idempotent: true}, nil); err != nil {
		return fmt.Errorf("interrupt code %s: %w", contextID, err)
	}
	return nil
}

// Interrupt stops a running command by id (the init event's text; DELETE
// /command?id=). Execd answers an unknown id with 500 RUNTIME_ERROR.
func (e *Execd) Interrupt(ctx context.Context, commandID string) error {
	if commandID == "" {
		return fmt.Errorf("%w: interrupt: empty command id", ErrInvalidRequest)
	}
	q := url.Values{"id": {commandID}}
	if err := e.unary(ctx, request{method: "DELETE", path: "/command", query: q, idempotent: true}, nil); err != nil {
		return fmt.Errorf("interrupt command %s: %w", commandID, err)
	}
	return nil
}

// CommandStatus is the state of a command (GET /command/status/{id}).
type CommandStatus struct {
	ID         string     `json:"id"`
	Content    string     `json:"content"` // the command line
	Running    bool       `json:"running"`
	ExitCode   *int       `json:"exit_code,omitempty"` // nil while running
	Error      string     `json:"error,omitempty"`     // e.g. "exit status 7", "signal: terminated"
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// CommandStatus returns a command's status. ErrNotFound if unknown.
func (e *Execd) CommandStatus(ctx context.Context, commandID string) (*CommandStatus, error) {
	if commandID == "" {
		return nil, fmt.Errorf("%w: command status: empty command id", ErrInvalidRequest)
	}
	var out CommandStatus
	if err := e.unary(ctx, request{method: "GET", path: "/command/status/" + pathEscape(commandID), idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("command status %s: %w", commandID, err)
	}
	return &out, nil
}

// CommandLogs is a chunk of a background command's merged stdout and stderr.
type CommandLogs struct {
	Output []byte
	// Cursor is the byte offset to pass to the next call to get only newer output.
	Cursor int64
}

// CommandLogs returns the output of a background command from byte offset cursor on
// (GET /command/{id}/logs?cursor=). Foreground commands answer ErrBadRequest.
func (e *Execd) CommandLogs(ctx context.Context, commandID string, cursor int64) (*CommandLogs, error) {
	if commandID == "" {
		return nil, fmt.Errorf("%w: command logs: empty command id", ErrInvalidRequest)
	}
	if cursor < 0 {
		return nil, fmt.Errorf("%w: command logs: negative cursor %d", ErrInvalidRequest, cursor)
	}
	q := url.Values{"cursor": {strconv.FormatInt(cursor, 10)}}
	var out *CommandLogs
	err := e.raw(ctx, request{method: "GET", path: "/command/" + pathEscape(commandID) + "/logs", query: q,
		idempotent: true, accept: "text/plain"}, func(resp *http.Response) error {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return fmt.Errorf("read logs: %w", err)
		}
		next := cursor + int64(len(b))
		if h := resp.Header.Get("EXECD-COMMANDS-TAIL-CURSOR"); h != "" {
			n, err := strconv.ParseInt(strings.TrimSpace(h), 10, 64)
			if err != nil {
				return fmt.Errorf("bad EXECD-COMMANDS-TAIL-CURSOR %q: %w", h, err)
			}
			next = n
		}
		out = &CommandLogs{Output: b, Cursor: next}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("command logs %s: %w", commandID, err)
	}
	return out, nil
}

// CreateSession starts a shell session (POST /session); cwd may be empty. Only
// exported variables and the working directory carry over between its runs.
func (e *Execd) CreateSession(ctx context.Context, cwd string) (string, error) {
	w := struct {
		Cwd string `json:"cwd,omitempty"`
	}{cwd}
	var out struct {
		SessionID string `json:"session_id"`
	}
	if err := e.unary(ctx, request{method: "POST", path: "/session", json: w}, &out); err != nil {
		return "", fmt.Errorf("create session: %w", err)
	}
	if out.SessionID == "" {
		return "", errors.New("create session: response has no session_id")
	}
	return out.SessionID, nil
}

// SessionRunRequest runs a command in a session.
type SessionRunRequest struct {
	Command string
	Cwd     string
	Timeout time.Duration // 0: no limit
	// ExactOutput: see CommandRequest.ExactOutput.
	ExactOutput bool
}

// RunInSession runs a command in a session and returns its event stream (see
// RunCommand). ErrNotFound if the session is unknown.
func (e *Execd) RunInSession(ctx context.Context, sessionID string, req SessionRunRequest) (*Stream, error) {
	if sessionID == "" {
		return nil, fmt.Errorf("%w: run in session: empty session id", ErrInvalidRequest)
	}
	if strings.TrimSpace(req.Command) == "" {
		return nil, fmt.Errorf("%w: run in session: empty command", ErrInvalidRequest)
	}
	ms, err := timeoutMillis(req.Timeout)
	if err != nil {
		return nil, fmt.Errorf("run in session: %w", err)
	}
	w := struct {
		Command string `json:"command"`
		Cwd     string `json:"cwd,omitempty"`
		Timeout int64  `json:"timeout,omitempty"`
	}{req.Command, req.Cwd, ms}
	s, err := e.openStream(ctx, "session run", request{method: "POST", path: "/session/" + pathEscape(sessionID) + "/run", json: w, header: exactHeader(req.ExactOutput)})
	if err != nil {
		return nil, fmt.Errorf("run in session %s: %w", sessionID, err)
	}
	return s, nil
}

// DeleteSession ends a session. ErrNotFound if unknown.
func (e *Execd) DeleteSession(ctx context.Context, sessionID string) error {
	if sessionID == "" {
		return fmt.Errorf("%w: delete session: empty session id", ErrInvalidRequest)
	}
	if err := e.unary(ctx, request{method: "DELETE", path: "/session/" + pathEscape(sessionID), idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete session %s: %w", sessionID, err)
	}
	return nil
}

// Metrics is a resource sample of the sandbox.
type Metrics struct {
	CPUCount    float64 `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotalMiB float64 `json:"mem_total_mib"`
	MemUsedMiB  float64 `json:"mem_used_mib"`
	Timestamp   int64   `json:"timestamp"` // Unix milliseconds
}

// Metrics returns one sample (GET /metrics; takes about 1 s on execd).
func (e *Execd) Metrics(ctx context.Context) (*Metrics, error) {
	var m Metrics
	if err := e.unary(ctx, request{method: "GET", path: "/metrics", idempotent: true}, &m); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return &m, nil
}

// WatchMetrics streams samples (GET /metrics/watch, about one every 2 s) until ctx
// ends, the server closes, or the loop breaks. A sample the server reports as
// {"error":...} is yielded as an error and the watch goes on; a broken stream yields
// a *StreamError and ends. Close of the Execd ends it too.
func (e *Execd) WatchMetrics(ctx context.Context) iter.Seq2[Metrics, error] {
	return func(yield func(Metrics, error) bool) {
		if e.isClosed() {
			yield(Metrics{}, ErrClosed)
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		key := new(int)
		if !e.track(key, cancel) {
			yield(Metrics{}, ErrClosed)
			return
		}
		defer e.untrack(key)
		resp, err := e.t.send(wctx, request{method: "GET", path: "/metrics/watch", idempotent: true, accept: "text/event-stream"})
		if err != nil {
			yield(Metrics{}, fmt.Errorf("watch metrics: %w", err))
			return
		}
		defer resp.Body.Close()
		fr := newFrameReader(resp.Body)
		defer fr.free()
		for n := 0; ; n++ {
			f, err := fr.next()
			if err != nil {
				if errors.Is(err, io.EOF) && wctx.Err() == nil {
					return // server ended the watch
				}
				se := &StreamError{Op: "metrics watch", Events: n, Err: err}
				var fe *frameError
				if errors.As(err, &fe) {
					se.Err, se.Detail = ErrMalformedStream, fe.detail
				} else if wctx.Err() != nil {
					if ctx.Err() != nil {
						return // the caller's context ended: a normal stop
					}
					se.Err = ErrClosed
				}
				yield(Metrics{}, se)
				return
			}
			var w struct {
				Metrics
				Error string `json:"error"`
			}
			if err := json.Unmarshal(f.data, &w); err != nil {
				yield(Metrics{}, &StreamError{Op: "metrics watch", Events: n, Err: ErrMalformedStream,
					Detail: fmt.Sprintf("sample is not a JSON object (%v): %q", err, truncate(f.data, 64))})
				return
			}
			if w.Error != "" {
				if !yield(Metrics{}, fmt.Errorf("watch metrics: server error: %s", w.Error)) {
					return
				}
				continue
			}
			if !yield(w.Metrics, nil) {
				return
			}
		}
	}
}

// unary runs a JSON call unless the client is closed.
func (e *Execd) unary(ctx context.Context, r request, out any) error {
	if e.isClosed() {
		return ErrClosed
	}
	return e.t.do(ctx, r, out)
}

// raw runs a call bounded by the request timeout and hands the 2xx response to fn.
func (e *Execd) raw(ctx context.Context, r request, fn func(*http.Response) error) error {
	if e.isClosed() {
		return ErrClosed
	}
	if e.t.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.t.timeout)
		defer cancel()
	}
	resp, err := e.t.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return fn(resp)
}
