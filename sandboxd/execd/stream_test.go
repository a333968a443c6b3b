package execd_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/execd"
)

// streamEvent is an event of the execd command stream as API-NOTES §6.1 describes it.
type streamEvent struct {
	Type           string         `json:"type"`
	Text           string         `json:"text"`
	Data           string         `json:"data"`
	ExecutionTime  int64          `json:"execution_time"`
	ExecutionCount int            `json:"execution_count"`
	Results        map[string]any `json:"results"`
	Timestamp      int64          `json:"timestamp"`
	Error          *struct {
		Ename     string   `json:"ename"`
		Evalue    string   `json:"evalue"`
		Traceback []string `json:"traceback"`
	} `json:"error"`
}

var errBadStream = errors.New("bad stream")

// streamReader parses the wire format of §6.1: bare JSON objects, each followed by a blank
// line (`<json>\n\n`), no `data:`/`event:` prefixes, `type` inside the object.
type streamReader struct {
	br      *bufio.Reader
	longest int // longest event line seen, without its newline
}

func newStreamReader(r io.Reader) *streamReader {
	return &streamReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next event, io.EOF at a clean end, or an error wrapping errBadStream.
func (sr *streamReader) Next() (streamEvent, error) {
	line, err := sr.br.ReadBytes('\n')
	if err == io.EOF && len(line) == 0 {
		return streamEvent{}, io.EOF
	}
	if err != nil {
		return streamEvent{}, fmt.Errorf("%w: truncated event %.80q: %v", errBadStream, line, err)
	}
	blank, err := sr.br.ReadBytes('\n')
	if err != nil || string(blank) != "\n" {
		return streamEvent{}, fmt.Errorf("%w: event %.80q not followed by a blank line (got %.20q, %v)", errBadStream, line, blank, err)
	}
	sr.longest = max(sr.longest, len(line)-1)
	if len(line) < 2 || line[0] != '{' {
		return streamEvent{}, fmt.Errorf("%w: not a bare JSON object: %.80q", errBadStream, line)
	}
	var ev streamEvent
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&ev); err != nil {
		return streamEvent{}, fmt.Errorf("%w: %v", errBadStream, err)
	}
	if dec.More() {
		return streamEvent{}, fmt.Errorf("%w: trailing data after object", errBadStream)
	}
	if ev.Type == "" {
		return streamEvent{}, fmt.Errorf("%w: event without type: %.80q", errBadStream, line)
	}
	return ev, nil
}

// parseStream reads a whole stream and checks the invariants of §6.1: init first, pings say
// pong, exactly one terminal event, and it is the last one.
func parseStream(r io.Reader) ([]streamEvent, error) {
	sr := newStreamReader(r)
	var evs []streamEvent
	for {
		ev, err := sr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("%w: empty stream", errBadStream)
	}
	if evs[0].Type != "init" || evs[0].Text == "" {
		return evs, fmt.Errorf("%w: first event %+v, want init with an id", errBadStream, evs[0])
	}
	terminals := 0
	for i, ev := range evs {
		switch ev.Type {
		case "ping":
			if ev.Text != "pong" {
				return evs, fmt.Errorf("%w: ping text %q", errBadStream, ev.Text)
			}
		case "execution_complete", "error":
			terminals++
			if i != len(evs)-1 {
				return evs, fmt.Errorf("%w: terminal event %d of %d", errBadStream, i, len(evs))
			}
		}
		if ev.Timestamp == 0 {
			return evs, fmt.Errorf("%w: event %d has no timestamp", errBadStream, i)
		}
	}
	if terminals != 1 {
		return evs, fmt.Errorf("%w: %d terminal events", errBadStream, terminals)
	}
	return evs, nil
}

// result summarises a parsed stream.
type result struct {
	id       string
	stdout   []string
	stderr   []string
	exitCode int
	evalue   string
	trace    []string
	events   []streamEvent
}

func summarize(evs []streamEvent) result {
	res := result{id: evs[0].Text, events: evs}
	for _, ev := range evs {
		switch ev.Type {
		case "stdout":
			res.stdout = append(res.stdout, ev.Text)
		case "stderr":
			res.stderr = append(res.stderr, ev.Text)
		case "error":
			res.evalue = ev.Error.Evalue
			res.trace = ev.Error.Traceback
			fmt.Sscan(ev.Error.Evalue, &res.exitCode)
		}
	}
	return res
}

func FuzzStreamReader(f *testing.F) {
	f.Add([]byte("{\"type\":\"init\",\"text\":\"x\",\"timestamp\":1}\n\n{\"type\":\"execution_complete\",\"timestamp\":2}\n\n"))
	f.Add([]byte("{\"type\":\"stdout\"}\n"))
	f.Add([]byte("data: {}\n\n"))
	f.Add([]byte("{\"type\":\"x\"} {}\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := parseStream(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, errBadStream) {
				t.Fatalf("error %v does not wrap errBadStream", err)
			}
			return
		}
		// A stream that parsed must re-encode to events that parse the same way.
		var buf bytes.Buffer
		for _, ev := range evs {
			j, _ := json.Marshal(ev)
			buf.Write(j)
			buf.WriteString("\n\n")
		}
		again, err := parseStream(&buf)
		if err != nil || len(again) != len(evs) {
			t.Fatalf("re-parse: %d events, %v; want %d", len(again), err, len(evs))
		}
	})
}

// env is a test server over loopback.
type env struct {
	t    *testing.T
	srv  *execd.Server
	http *httptest.Server
	root string
}

func newEnv(t *testing.T, cfg execd.Config) *env {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	s, err := execd.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.Close()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &env{t: t, srv: s, http: hs, root: cfg.Root}
}

func (e *env) do(method, path string, body any, hdr ...string) *http.Response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.http.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// stream posts body to path and parses the whole event stream.
func (e *env) stream(path string, body any) result {
	e.t.Helper()
	resp := e.do("POST", path, body)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("POST %s: status %d: %s", path, resp.StatusCode, b)
	}
	if got, want := resp.Header.Get("Content-Type"), "text/event-stream"; got != want {
		e.t.Fatalf("Content-Type = %q, want %q", got, want)
	}
	evs, err := parseStream(resp.Body)
	if err != nil {
		e.t.Fatalf("POST %s: %v (events %+v)", path, err, evs)
	}
	return summarize(evs)
}

func (e *env) run(cmd string) result {
	e.t.Helper()
	return e.stream("/command", map[string]any{"command": cmd})
}

// wantError checks an error response: status and JSON {code, message}.
func wantError(t *testing.T, resp *http.Response, status int, code string) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status = %d, want %d (body %s)", resp.StatusCode, status, b)
	}
	var body struct{ Code, Message string }
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("error body %q is not JSON: %v", b, err)
	}
	if body.Code != code || body.Message == "" {
		t.Fatalf("error body = %+v, want code %q and a message", body, code)
	}
}

// wantUnauthorized checks the real execd's 401: {"error": "Unauthorized: ..."}.
func wantUnauthorized(t *testing.T, resp *http.Response) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status = %d, want 401 (body %s)", resp.StatusCode, b)
	}
	var body struct{ Error string }
	if err := json.Unmarshal(b, &body); err != nil || !strings.HasPrefix(body.Error, "Unauthorized: invalid or missing header "+execd.TokenHeader) {
		t.Fatalf("401 body = %q, want {\"error\": \"Unauthorized: ...\"}", b)
	}
	if got, want := resp.Header.Get("Content-Type"), "application/json; charset=utf-8"; got != want {
		t.Fatalf("401 Content-Type = %q, want %q", got, want)
	}
}

// wantNotFoundPage checks gin's answer to an unknown route.
func wantNotFoundPage(t *testing.T, resp *http.Response) {
	t.Helper()
	b := wantStatus(t, resp, http.StatusNotFound)
	if got, ct := string(b), resp.Header.Get("Content-Type"); got != "404 page not found" || ct != "text/plain" {
		t.Fatalf("unknown route: %q (%s), want text/plain \"404 page not found\"", got, ct)
	}
}

func wantStatus(t *testing.T, resp *http.Response, status int) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status = %d, want %d (body %s)", resp.StatusCode, status, b)
	}
	return b
}

func newHTTPServer(t *testing.T, h http.Handler) *httptest.Server {
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs
}

// writeCounter is a listener whose connections count their writes.
type writeCounter struct {
	net.Listener
	writes atomic.Int64
}

func (l *writeCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, writes: &l.writes}, nil
}

type countedConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestStreamWrites: events the client cannot act on apart reach it in one
// write, each a wake-up of the client: the headers, init and first ping in
// the first; the last event with the end of the response; a background
// command's whole answer in one. Output in between is flushed as it comes.
func TestStreamWrites(t *testing.T) {
	s, err := execd.New(execd.Config{Root: t.TempDir(), PingInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s)
	lc := &writeCounter{Listener: hs.Listener}
	hs.Listener = lc
	hs.Start()
	t.Cleanup(func() {
		hs.Close()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	e := &env{t: t, srv: s, http: hs}
	for _, tc := range []struct {
		body   map[string]any
		writes int64
		events []string
	}{
		{map[string]any{"command": "true"}, 2, []string{"init", "ping", "execution_complete"}},
		{map[string]any{"command": "echo hi"}, 3, []string{"init", "ping", "stdout", "execution_complete"}},
		{map[string]any{"command": "exit 3"}, 2, []string{"init", "ping", "error"}},
		{map[string]any{"command": "sleep 30", "background": true}, 1, []string{"init", "ping", "execution_complete"}},
	} {
		before := lc.writes.Load()
		res := e.stream("/command", tc.body)
		var types []string
		for _, ev := range res.events {
			types = append(types, ev.Type)
		}
		if !slices.Equal(types, tc.events) {
			t.Errorf("%v: events %v, want %v", tc.body, types, tc.events)
		}
		if got := lc.writes.Load() - before; got != tc.writes {
			t.Errorf("%v: %d writes, want %d", tc.body, got, tc.writes)
		}
	}
}
