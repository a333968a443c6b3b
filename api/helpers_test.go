package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/api"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/testenv"
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
	api    *api.Server
	proj   *projections.Projector

	mu sync.Mutex
	ts int64
}

func newEnv(t testing.TB, tok string) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b, err := bus.Open(ctx, bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlite.Open(testenv.SQLitePath(t), sqlite.Config{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	q, err := jobs.OpenQueue(ctx, b.JetStream(), jobs.QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	p := &projections.Projector{Bus: b, Store: store, BatchWait: 5 * time.Millisecond}
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	s, err := api.New(api.Config{Store: store, Bus: b, Queue: q, Token: tok, Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		<-done
		l.Close()
		store.Close()
		b.Close()
	})
	return &env{t: t, bus: b, ledger: l, store: store, queue: q, srv: srv, api: s, proj: p, ts: time.Now().UnixMilli()}
}

// publish appends entries for session (name, id) and waits until they are
// acknowledged; it returns their stream sequences are then known to the caller
// through the projector. Each call gets a later Ts.
func (e *env) publish(name, id string, es ...events.Entry) {
	e.t.Helper()
	ctx := context.Background()
	e.mu.Lock()
	for i := range es {
		e.ts++
		es[i].Ts, es[i].Name, es[i].SandboxID = e.ts, name, id
	}
	e.mu.Unlock()
	if err := e.ledger.AppendBatch(ctx, es); err != nil {
		e.t.Fatal(err)
	}
	if err := e.ledger.Sync(ctx, id); err != nil {
		e.t.Fatal(err)
	}
}

// session publishes a sandbox with n execs (started+completed each), closed or not.
func (e *env) session(name, id string, n int, closed bool) {
	e.t.Helper()
	es := []events.Entry{events.New(0, name, id, events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: id})}
	for i := 1; i <= n; i++ {
		es = append(es,
			events.New(0, name, id, i, events.ExecStarted, events.ExecStartedPayload{Kind: events.KindCommand, Cmd: fmt.Sprintf("echo %d", i)}),
			events.New(0, name, id, i, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte(fmt.Sprintf("%d\n", i)))),
			events.New(0, name, id, i, events.ExecCompleted, events.ExecCompletedPayload{}))
	}
	if closed {
		es = append(es, events.New(0, name, id, events.SandboxLevel, events.SandboxClosed, nil))
	}
	e.publish(name, id, es...)
}

// waitProjected waits until the projector has applied everything published.
func (e *env) waitProjected() {
	e.t.Helper()
	testenv.Eventually(e.t, 10*time.Second, func() error {
		last := e.ledger.LastSeq()
		if got := e.proj.Progress().Offset; got < last {
			return fmt.Errorf("projector offset %d, want %d", got, last)
		}
		return nil
	})
}

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
