package api_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/api/apitest"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/projections"
)

const token = "s3cret-token"

// env is a running API on a fresh NATS, projector and SQLite read model.
type env struct {
	t      testing.TB
	bus    *bus.Bus
	ledger *bus.Ledger
	store  *sqlite.Store
	queue  *jobs.Queue
	srv    *httptest.Server
	proj   *projections.Projector

	x *apitest.Env
}

func newEnv(t testing.TB, tok string) *env {
	t.Helper()
	x := apitest.New(t, tok)
	return &env{t: t, bus: x.Bus, ledger: x.Ledger, store: x.Store, queue: x.Queue, srv: x.Server, proj: x.Proj, x: x}
}

// publish appends entries for session (name, id), each with a later Ts, and
// waits until they are acknowledged.
func (e *env) publish(name, id string, es ...events.Entry) { e.x.Publish(name, id, es...) }

// session publishes a sandbox with n execs (started+completed each), closed or not.
func (e *env) session(name, id string, n int, closed bool) { e.x.Session(name, id, n, closed) }

// waitProjected waits until the projector has applied everything published.
func (e *env) waitProjected() { e.x.WaitProjected() }

// do sends a request with the token (when tok != "") and decodes a JSON answer into v.
func (e *env) do(method, path, tok string, body io.Reader, v any) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	if v != nil && len(data) > 0 {
		if err := json.Unmarshal(data, v); err != nil {
			e.t.Fatalf("%s %s: decode %q: %v", method, path, data, err)
		}
	}
	return resp
}

// sseEvent is one event read from a stream.
type sseEvent struct {
	ID    string
	Data  string
	Event string
}

// sseStream reads events from an open stream.
type sseStream struct {
	resp *http.Response
	ch   chan sseEvent
}

func (e *env) openStream(path, lastID string) *sseStream {
	e.t.Helper()
	req, err := http.NewRequest("GET", e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e.t.Fatalf("stream %s: %d %s", path, resp.StatusCode, b)
	}
	s := &sseStream{resp: resp, ch: make(chan sseEvent, 1024)}
	go func() {
		defer close(s.ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Data != "" || ev.Event != "" {
					s.ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.ID = line[4:]
			case strings.HasPrefix(line, "data: "):
				ev.Data = line[6:]
			case strings.HasPrefix(line, "event: "):
				ev.Event = line[7:]
			}
		}
	}()
	return s
}

// next returns the next event, failing after timeout.
func (s *sseStream) next(t testing.TB, timeout time.Duration) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-s.ch:
		if !ok {
			t.Fatal("stream ended")
		}
		return ev
	case <-time.After(timeout):
		t.Fatalf("no event within %v", timeout)
	}
	return sseEvent{}
}

func (s *sseStream) close() { s.resp.Body.Close() }

func busFilter(sandbox string) bus.Filter { return bus.Filter{SandboxID: sandbox} }
