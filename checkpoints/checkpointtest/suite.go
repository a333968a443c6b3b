package checkpointtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
)

// Factory returns a new, empty store using opts (whose clock the suite
// controls). The suite closes it.
type Factory func(t *testing.T, opts checkpoints.Options) checkpoints.Store

// SharedFactory returns two stores over the same state (for SQLite, two
// Store values on one file), both using opts.
type SharedFactory func(t *testing.T, opts checkpoints.Options) (a, b checkpoints.Store)

// Clock is a manual clock for Options.Now. Safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

const (
	leaseDuration = 30 * time.Second
	renewAfter    = 10 * time.Second
)

type env struct {
	t     *testing.T
	ctx   context.Context
	clock *Clock
	s     checkpoints.Store
}

func newEnv(t *testing.T, f Factory) *env {
	t.Helper()
	clock := NewClock()
	s := f(t, checkpoints.Options{Now: clock.Now, LeaseDuration: leaseDuration, RenewAfter: renewAfter})
	t.Cleanup(func() { _ = s.Close() })
	return &env{t: t, ctx: context.Background(), clock: clock, s: s}
}

func (e *env) acquire(thread string) *checkpoints.Lease {
	e.t.Helper()
	l, err := e.s.AcquireWriter(e.ctx, thread)
	if err != nil {
		e.t.Fatalf("AcquireWriter(%q): %v", thread, err)
	}
	return l
}

func (e *env) append(l *checkpoints.Lease, c *checkpoints.Checkpoint) {
	e.t.Helper()
	head, err := e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: c, ExpectedHead: c.ParentID, Writer: l.Writer})
	if err != nil {
		e.t.Fatalf("Append(%s): %v", c.ID, err)
	}
	if head != c.ID {
		e.t.Fatalf("Append(%s) head = %q, want %q", c.ID, head, c.ID)
	}
}

func (e *env) head(thread string) string {
	e.t.Helper()
	h, err := e.s.Head(e.ctx, thread)
	if err != nil {
		e.t.Fatalf("Head(%q): %v", thread, err)
	}
	return h
}

func wantCode(t *testing.T, what string, err error, want *checkpoints.Error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %s", what, err, want.Code)
	}
	var ce *checkpoints.Error
	if !errors.As(err, &ce) || ce.Code != want.Code {
		t.Fatalf("%s: errors.As code = %v, want %s", what, ce, want.Code)
	}
}

// checkpoint returns a valid checkpoint with a few entries.
func checkpoint(id, thread, parent string, keys ...string) *checkpoints.Checkpoint {
	c := &checkpoints.Checkpoint{
		ID: id, ThreadID: thread, ParentID: parent, Reason: checkpoints.ReasonAutomatic,
		Files: []checkpoints.Entry{{Path: "work", Kind: checkpoints.KindDir, Mode: 0o755}},
	}
	for i, k := range keys {
		c.Files = append(c.Files, checkpoints.Entry{Path: fmt.Sprintf("work/f%d", i), Kind: checkpoints.KindFile, BlobKey: k, Size: int64(i), Mode: 0o644})
	}
	return c
}

func canon(t *testing.T, c *checkpoints.Checkpoint) string {
	t.Helper()
	d := c.Clone()
	if d.Files == nil {
		d.Files = []checkpoints.Entry{}
	}
	if d.Artifacts == nil {
		d.Artifacts = []checkpoints.Artifact{}
	}
	d.CreatedAt = d.CreatedAt.UTC()
	for i := range d.Artifacts {
		d.Artifacts[i].CreatedAt = d.Artifacts[i].CreatedAt.UTC()
	}
	if len(d.Conversation) > 0 {
		var v any
		if err := json.Unmarshal(d.Conversation, &v); err != nil {
			t.Fatalf("conversation: %v", err)
		}
		d.Conversation, _ = json.Marshal(v)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sameCheckpoint(t *testing.T, what string, got, want *checkpoints.Checkpoint) {
	t.Helper()
	if g, w := canon(t, got), canon(t, want); g != w {
		t.Fatalf("%s:\n got %s\nwant %s", what, g, w)
	}
}

// WithoutFork returns s without its fork capability, as a store that cannot
// fork atomically is: for testing what a caller does with one.
func WithoutFork(s checkpoints.LineageStore) checkpoints.LineageStore { return withoutFork{s} }

// withoutFork has the methods of LineageStore only, whatever its store has.
type withoutFork struct{ checkpoints.LineageStore }

// Run runs the conformance suite against stores made by f.
func Run(t *testing.T, f Factory) {
	t.Run("AppendGetList", func(t *testing.T) { testAppendGetList(t, f) })
	t.Run("TanStackJSON", func(t *testing.T) { testTanStackJSON(t, f) })
	t.Run("HeadCAS", func(t *testing.T) { testHeadCAS(t, f) })
	t.Run("DuplicateID", func(t *testing.T) { testDuplicateID(t, f) })
	t.Run("InvalidInput", func(t *testing.T) { testInvalidInput(t, f) })
	t.Run("NotFound", func(t *testing.T) { testNotFound(t, f) })
	t.Run("Leases", func(t *testing.T) { testLeases(t, f) })
	t.Run("LeaseExpiry", func(t *testing.T) { testLeaseExpiry(t, f) })
	t.Run("DeleteHead", func(t *testing.T) { testDeleteHead(t, f) })
	t.Run("DeleteCheckpoint", func(t *testing.T) { testDeleteCheckpoint(t, f) })
	t.Run("BlobReferences", func(t *testing.T) { testBlobReferences(t, f) })
	t.Run("Fork", func(t *testing.T) { testFork(t, f) })
	t.Run("ForkCapability", func(t *testing.T) { testForkCapability(t, f) })
	t.Run("GC", func(t *testing.T) { testGC(t, f) })
	t.Run("ConcurrentAcquireRounds", func(t *testing.T) {
		e := newEnv(t, f)
		concurrentRounds(t, e.clock, []checkpoints.Store{e.s})
	})
	t.Run("ConcurrentAppenders", func(t *testing.T) {
		e := newEnv(t, f)
		concurrentAppenders(t, []checkpoints.Store{e.s})
	})
	t.Run("Closed", func(t *testing.T) { testClosed(t, f) })
}

// RunShared runs the concurrency cases with goroutines split across two
// stores over the same state.
func RunShared(t *testing.T, f SharedFactory) {
	open := func(t *testing.T) (*Clock, checkpoints.Store, checkpoints.Store) {
		clock := NewClock()
		a, b := f(t, checkpoints.Options{Now: clock.Now, LeaseDuration: leaseDuration, RenewAfter: renewAfter})
		t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
		return clock, a, b
	}
	t.Run("SeeEachOther", func(t *testing.T) {
		ctx := context.Background()
		_, a, b := open(t)
		la, err := a.AcquireWriter(ctx, "t1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.AcquireWriter(ctx, "t1"); !errors.Is(err, checkpoints.ErrWriterConflict) {
			t.Fatalf("second store AcquireWriter: err = %v, want WRITER_CONFLICT", err)
		}
		c := checkpoint("c1", "t1", "", "k1")
		if _, err := a.Append(ctx, checkpoints.AppendInput{Checkpoint: c, Writer: la.Writer}); err != nil {
			t.Fatal(err)
		}
		if h, err := b.Head(ctx, "t1"); err != nil || h != "c1" {
			t.Fatalf("other store Head = %q, %v; want c1", h, err)
		}
		got, err := b.Get(ctx, "c1")
		if err != nil {
			t.Fatal(err)
		}
		if got.CreatedAt.IsZero() {
			t.Fatal("CreatedAt not set")
		}
		c.CreatedAt = got.CreatedAt
		sameCheckpoint(t, "Get from other store", got, c)
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lb, err := b.AcquireWriter(ctx, "t1")
		if err != nil {
			t.Fatalf("AcquireWriter after release: %v", err)
		}
		if lb.Fence <= la.Fence {
			t.Fatalf("fence = %d after %d, want greater", lb.Fence, la.Fence)
		}
		if _, err := a.Append(ctx, checkpoints.AppendInput{Checkpoint: checkpoint("c2", "t1", "c1"), ExpectedHead: "c1", Writer: la.Writer}); !errors.Is(err, checkpoints.ErrWriterLost) {
			t.Fatalf("superseded writer append: err = %v, want WRITER_LOST", err)
		}
	})
	t.Run("ConcurrentAcquireRounds", func(t *testing.T) {
		clock, a, b := open(t)
		concurrentRounds(t, clock, []checkpoints.Store{a, b})
	})
	t.Run("ConcurrentAppenders", func(t *testing.T) {
		_, a, b := open(t)
		concurrentAppenders(t, []checkpoints.Store{a, b})
	})
}
