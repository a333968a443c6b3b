package groupcommit

import (
	"context"
	"errors"
	"sync"

	"github.com/alineo-labs/alineo/internal/workers"
)

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("group commit closed")

// Config tunes a Committer. The zero value is valid.
type Config struct {
	// MaxInFlight bounds the commits running at once. Default 1: one writer.
	MaxInFlight int
	// MaxItems bounds the appends of one batch. Default 256.
	MaxItems int
	// MaxWeight bounds the summed weight of one batch (entries, say); a
	// batch always takes its first append, whatever its weight. Default 4096.
	MaxWeight int
}

// Commit commits items, all or nothing. ctx is the caller's for an append
// committed alone, and a context of the writer's, not cancelled by any one
// caller, for a batch.
type Commit[T any] func(ctx context.Context, items []T) error

// Committer groups the appends of a store into commits. Safe for concurrent use.
type Committer[T any] struct {
	commit Commit[T]
	weight func(T) int
	cfg    Config

	mu       sync.Mutex
	queue    []*request[T]
	inFlight int           // commits running (alone or batches)
	closed   bool          // Do refuses new appends
	idle     chan struct{} // closed when inFlight drops to 0 after Close
}

type request[T any] struct {
	item  T
	done  chan error // buffered: receives the item's result
	taken bool       // in a batch; guarded by Committer.mu
}

// New returns a Committer running commit; weight gives an item's share of
// Config.MaxWeight (nil: 1 each).
func New[T any](commit Commit[T], weight func(T) int, cfg Config) *Committer[T] {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1
	}
	if cfg.MaxItems <= 0 {
		cfg.MaxItems = 256
	}
	if cfg.MaxWeight <= 0 {
		cfg.MaxWeight = 4096
	}
	if weight == nil {
		weight = func(T) int { return 1 }
	}
	return &Committer[T]{commit: commit, weight: weight, cfg: cfg}
}

// Do commits item, alone when no commit is waiting for a slot, or in the
// next batch, and returns its result. It returns ErrClosed after Close. If
// ctx ends while item is still queued, it is dropped and Do returns ctx's
// error; once it is in a batch being committed, Do returns ctx's error at
// once and the commit goes on (its outcome is then unknown to the caller, as
// for any commit whose ctx ends midway).
func (c *Committer[T]) Do(ctx context.Context, item T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if c.inFlight < c.cfg.MaxInFlight && len(c.queue) == 0 {
		c.inFlight++
		c.mu.Unlock()
		err := c.commit(ctx, []T{item})
		c.next(ctx)
		return err
	}
	r := &request[T]{item: item, done: make(chan error, 1)}
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !r.taken {
		c.drop(r)
		return ctx.Err()
	}
	select {
	case err := <-r.done: // committed meanwhile
		return err
	default:
		return ctx.Err()
	}
}

// drop removes r from the queue. Called with c.mu held.
func (c *Committer[T]) drop(r *request[T]) {
	for i, q := range c.queue {
		if q == r {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			return
		}
	}
}

// next runs after a commit: it hands what was queued meanwhile to a writer
// goroutine, which goes on while appends are queued, or marks the commit's
// slot free. The writer runs on a worker, with ctx's profiler labels: its
// commits go deep, and a new goroutine's stack would be grown, by copying,
// for every batch.
func (c *Committer[T]) next(ctx context.Context) {
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.release()
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	workers.Go(ctx, c.write)
}

// release frees a commit's slot. Called with c.mu held.
func (c *Committer[T]) release() {
	c.inFlight--
	if c.inFlight == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// write commits batches, each of what is queued when it starts, until the
// queue is empty. It holds one commit slot.
func (c *Committer[T]) write() {
	ctx := context.Background()
	for {
		batch := c.take()
		if batch == nil {
			return
		}
		items := make([]T, len(batch))
		for i, r := range batch {
			items[i] = r.item
		}
		err := c.commit(ctx, items)
		if err == nil || len(batch) == 1 {
			for _, r := range batch {
				r.done <- err
			}
			continue
		}
		// All or nothing failed: find out whose append fails, in order.
		for _, r := range batch {
			r.done <- c.commit(ctx, []T{r.item})
		}
	}
}

// take returns the next batch, marked taken, or nil (having freed the
// writer's slot) when nothing is queued.
func (c *Committer[T]) take() []*request[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.release()
		return nil
	}
	n, w := 0, 0
	for n < len(c.queue) && n < c.cfg.MaxItems {
		w += c.weight(c.queue[n].item)
		if n > 0 && w > c.cfg.MaxWeight {
			break
		}
		n++
	}
	batch := make([]*request[T], n)
	copy(batch, c.queue)
	for _, r := range batch {
		r.taken = true
	}
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	return batch
}

// Queued returns the number of appends waiting for a commit to start.
func (c *Committer[T]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// Close makes Do refuse new appends with ErrClosed and waits until every
// append queued or being committed has its result: what was accepted is
// committed (or fails) before Close returns. Idempotent.
func (c *Committer[T]) Close() {
	c.mu.Lock()
	c.closed = true
	if c.inFlight == 0 {
		c.mu.Unlock()
		return
	}
	if c.idle == nil {
		c.idle = make(chan struct{})
	}
	idle := c.idle
	c.mu.Unlock()
	<-idle
}
