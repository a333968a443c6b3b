package apitest

import (
	"context"
	"fmt"
	"net/http/httptest"
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

// Env is a running API. Its fields are for the test to use; everything is
// stopped by t's cleanup.
type Env struct {
	URL    string // the API's base URL
	Token  string
	Server *httptest.Server
	Bus    *bus.Bus
	Ledger *bus.Ledger
	Store  *sqlite.Store
	Queue  *jobs.Queue
	Proj   *projections.Projector

	t  testing.TB
	mu sync.Mutex
	ts int64
}

// New starts an API requiring token ("" for an open one).
func New(t testing.TB, token string) *Env {
	t.Helper()
	return NewWith(t, token, nil)
}

// NewWith is New with edit applied to the API's Config before it starts
// (nil for none): Users, a Logger.
func NewWith(t testing.TB, token string, edit func(*api.Config)) *Env {
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
	cfg := api.Config{Store: store, Bus: b, Queue: q, Token: token, Heartbeat: time.Second}
	if edit != nil {
		edit(&cfg)
	}
	s, err := api.New(cfg)
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
	return &Env{URL: srv.URL, Token: token, Server: srv, Bus: b, Ledger: l, Store: store, Queue: q, Proj: p,
		t: t, ts: time.Now().UnixMilli()}
}

// Publish appends es to session (name, id), each with a later Ts, and waits
// until the stream has acknowledged them.
func (e *Env) Publish(name, id string, es ...events.Entry) {
	e.t.Helper()
	e.mu.Lock()
	for i := range es {
		e.ts++
		es[i].Ts, es[i].Name, es[i].SandboxID = e.ts, name, id
	}
	e.mu.Unlock()
	ctx := context.Background()
	if err := e.Ledger.AppendBatch(ctx, es); err != nil {
		e.t.Fatal(err)
	}
	if err := e.Ledger.Sync(ctx, id); err != nil {
		e.t.Fatal(err)
	}
}

// Session publishes a sandbox with n commands ("echo 1" ... each started,
// one stdout chunk, completed), and its sandbox.closed when closed.
func (e *Env) Session(name, id string, n int, closed bool) {
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
	e.Publish(name, id, es...)
}

// WaitProjected waits until the projector has applied everything published.
func (e *Env) WaitProjected() {
	e.t.Helper()
	testenv.Eventually(e.t, 10*time.Second, func() error {
		last := e.Ledger.LastSeq()
		if got := e.Proj.Progress().Offset; got < last {
			return fmt.Errorf("projector offset %d, want %d", got, last)
		}
		return nil
	})
}
