package alineo

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
)

// batchStore records the events of every AppendBatch call.
type batchStore struct {
	*memory.Store

	mu      sync.Mutex
	batches [][]events.Event
}

func (s *batchStore) AppendBatch(ctx context.Context, es []events.Entry) error {
	b := make([]events.Event, len(es))
	for i, e := range es {
		b[i] = e.Event
	}
	s.mu.Lock()
	s.batches = append(s.batches, b)
	s.mu.Unlock()
	return s.Store.AppendBatch(ctx, es)
}

func TestExecLastOutputAndCompletedInOneBatch(t *testing.T) {
	f := newFakeServer(t)
	st := &batchStore{Store: memory.New()}
	c, err := New(Options{BaseURL: f.URL, Adapter: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "ubuntu"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	res, err := sb.Exec(ctx, "echo hi").Wait()
	if err != nil || res.Stdout != "hi\n" {
		t.Fatalf("Wait = %+v, %v; want stdout \"hi\\n\"", res, err)
	}
	st.mu.Lock()
	batches := slices.Clone(st.batches)
	st.mu.Unlock()
	want := []events.Event{events.ExecOutput, events.ExecCompleted}
	if !slices.ContainsFunc(batches, func(b []events.Event) bool { return slices.Equal(b, want) }) {
		t.Fatalf("batches = %v, want one of them %v", batches, want)
	}
}

func TestExecFailedLastOutputKeepsCompletedOut(t *testing.T) {
	f := newFakeServer(t)
	boom := errors.New("boom")
	st := &failingStore{Store: memory.New(), fail: func(e events.Entry) error {
		if e.Event == events.ExecOutput {
			return boom
		}
		return nil
	}}
	c := newFakeClient(t, f, st)
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "ubuntu"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	ex := sb.Exec(ctx, "echo hi")
	_, err = ex.Wait()
	var se *SandboxError
	if !errors.As(err, &se) || !errors.Is(err, boom) {
		t.Fatalf("Wait err = %v, want a *SandboxError wrapping boom", err)
	}
	if got := ex.ExitCode(); got != -1 {
		t.Errorf("ExitCode = %d, want -1 (exec.completed not recorded)", got)
	}
	got := describe(rows(t, c, sb))
	if !strings.Contains(got, "exec.started 1") || strings.Contains(got, "exec.output") || strings.Contains(got, "exec.completed") {
		t.Fatalf("ledger:\n%s\nwant exec.started 1 and no exec.output or exec.completed", got)
	}
}

// commitLog records the entries of each commit (Append or AppendBatch).
type commitLog struct {
	*memory.Store
	mu      sync.Mutex
	commits [][]events.Event
}

func (s *commitLog) Append(ctx context.Context, e events.Entry) error {
	s.log(e)
	return s.Store.Append(ctx, e)
}

func (s *commitLog) AppendBatch(ctx context.Context, es []events.Entry) error {
	s.log(es...)
	return s.Store.AppendBatch(ctx, es)
}

func (s *commitLog) log(es ...events.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c []events.Event
	for _, e := range es {
		c = append(c, e.Event)
	}
	s.commits = append(s.commits, c)
}

func (s *commitLog) since(n int) [][]events.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commits[n:])
}

// TestExecCommitsPerExec: a short command is recorded in two commits, the
// fewest a durable record needs: exec.started (the intent: after a crash the
// ledger shows the exec began, whatever it did), then its output with
// exec.completed together (the result, durable before Wait returns it).
func TestExecCommitsPerExec(t *testing.T) {
	defer func(d time.Duration) { outputLinger = d }(outputLinger)
	outputLinger = time.Minute // the completion always follows: no timing in the count
	f := newFakeServer(t)
	store := &commitLog{Store: memory.New()}
	c, err := New(Options{BaseURL: f.URL, Adapter: store})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "ubuntu"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	for i := range 3 {
		n := len(store.since(0))
		if res, err := sb.Exec(ctx, "echo hi").Wait(); err != nil || res.Stdout != "hi\n" {
			t.Fatalf("exec %d = %+v, %v", i, res, err)
		}
		want := [][]events.Event{{events.ExecStarted}, {events.ExecOutput, events.ExecCompleted}}
		if got := store.since(n); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("exec %d was committed as %v, want %v", i, got, want)
		}
	}
}
