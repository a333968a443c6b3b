package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/testenv"
)

// recorder is a Commit that records each batch and can hold a commit until
// released; fail makes every commit holding a chosen item fail.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	hold    map[int]chan struct{} // item -> released when closed
	started chan int              // the first item of each commit, as it starts
	fail    map[int]bool
}

func newRecorder() *recorder {
	return &recorder{hold: map[int]chan struct{}{}, started: make(chan int, 100), fail: map[int]bool{}}
}

func (r *recorder) holdItem(i int) chan struct{} {
	ch := make(chan struct{})
	r.mu.Lock()
	r.hold[i] = ch
	r.mu.Unlock()
	return ch
}

func (r *recorder) commit(ctx context.Context, items []int) error {
	r.started <- items[0]
	r.mu.Lock()
	var wait []chan struct{}
	for _, it := range items {
		if ch, ok := r.hold[it]; ok {
			wait = append(wait, ch)
		}
	}
	r.mu.Unlock()
	for _, ch := range wait {
		<-ch
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, it := range items {
		if r.fail[it] {
			return fmt.Errorf("item %d refused", it)
		}
	}
	r.batches = append(r.batches, slices.Clone(items))
	return nil
}

func (r *recorder) committed() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// doAsync runs Do(item) in a goroutine; its result arrives on the channel.
func doAsync(c *Committer[int], ctx context.Context, item int) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- c.Do(ctx, item) }()
	return ch
}

// queued waits until n appends are queued.
func queued(t *testing.T, c *Committer[int], n int) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if got := len(c.queue); got != n {
			return fmt.Errorf("%d appends queued, want %d", got, n)
		}
		return nil
	})
}

func TestAloneCommitsAtOnce(t *testing.T) {
	r := newRecorder()
	c := New(r.commit, nil, Config{})
	for i := range 3 {
		if err := c.Do(context.Background(), i); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := r.committed(), [][]int{{0}, {1}, {2}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches = %v, want %v", got, want)
	}
}

// Appends arriving while a commit is in flight share the next one; an
// append arriving while that one is in flight is not in it, and the earlier
// ones do not wait for it.
func TestBatchesFormWhileACommitIsInFlight(t *testing.T) {
	r := newRecorder()
	c := New(r.commit, nil, Config{})
	release0 := r.holdItem(0)
	first := doAsync(c, context.Background(), 0)
	<-r.started
	var waiting []<-chan error
	for i := 1; i <= 3; i++ {
		waiting = append(waiting, doAsync(c, context.Background(), i))
		queued(t, c, i)
	}
	release1 := r.holdItem(1)
	close(release0)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if got := <-r.started; got != 1 {
		t.Fatalf("second commit starts with %d, want 1", got)
	}
	late := doAsync(c, context.Background(), 4)
	queued(t, c, 1)
	close(release1)
	for _, ch := range waiting {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-late; err != nil {
		t.Fatal(err)
	}
	if got, want := r.committed(), [][]int{{0}, {1, 2, 3}, {4}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches = %v, want %v", got, want)
	}
}

func TestFailedBatchFailsOnlyItsCulprit(t *testing.T) {
	r := newRecorder()
	r.fail[2] = true
	c := New(r.commit, nil, Config{})
	release := r.holdItem(0)
	first := doAsync(c, context.Background(), 0)
	<-r.started
	var results []<-chan error
	for i := 1; i <= 3; i++ {
		results = append(results, doAsync(c, context.Background(), i))
		queued(t, c, i)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, ch := range results {
		err := <-ch
		if item := i + 1; (err != nil) != (item == 2) {
			t.Errorf("item %d: err = %v", item, err)
		}
	}
	if got, want := r.committed(), [][]int{{0}, {1}, {3}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches = %v, want %v", got, want)
	}
}

func TestBatchBounds(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
		want [][]int
	}{
		{"items", Config{MaxItems: 2}, [][]int{{0}, {1, 2}, {3, 4}, {5}}},
		{"weight", Config{MaxWeight: 5}, [][]int{{0}, {1, 2}, {3}, {4}, {5}}}, // weight of i is i
		{"first whatever its weight", Config{MaxWeight: 1}, [][]int{{0}, {1}, {2}, {3}, {4}, {5}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRecorder()
			c := New(r.commit, func(i int) int { return i }, tt.cfg)
			release := r.holdItem(0)
			first := doAsync(c, context.Background(), 0)
			<-r.started
			var results []<-chan error
			for i := 1; i <= 5; i++ {
				results = append(results, doAsync(c, context.Background(), i))
				queued(t, c, i)
			}
			close(release)
			<-first
			for _, ch := range results {
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
			}
			if got := r.committed(); !slices.EqualFunc(got, tt.want, slices.Equal) {
				t.Fatalf("batches = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCancelledWhileQueuedIsDropped(t *testing.T) {
	r := newRecorder()
	c := New(r.commit, nil, Config{})
	release := r.holdItem(0)
	first := doAsync(c, context.Background(), 0)
	<-r.started
	ctx, cancel := context.WithCancel(context.Background())
	dropped := doAsync(c, ctx, 1)
	queued(t, c, 1)
	kept := doAsync(c, context.Background(), 2)
	queued(t, c, 2)
	cancel()
	if err := <-dropped; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Do = %v, want context.Canceled", err)
	}
	close(release)
	if err := errors.Join(<-first, <-kept); err != nil {
		t.Fatal(err)
	}
	if got, want := r.committed(), [][]int{{0}, {2}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches = %v, want %v", got, want)
	}
}

func TestCloseFlushesAndRefuses(t *testing.T) {
	r := newRecorder()
	c := New(r.commit, nil, Config{})
	release := r.holdItem(0)
	first := doAsync(c, context.Background(), 0)
	<-r.started
	pending := doAsync(c, context.Background(), 1)
	queued(t, c, 1)
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	testenv.Eventually(t, 5*time.Second, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.closed {
			return errors.New("Close has not started")
		}
		return nil
	})
	if err := c.Do(context.Background(), 9); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close = %v, want ErrClosed", err)
	}
	select {
	case <-closed:
		t.Fatal("Close returned with a commit in flight and an append queued")
	default:
	}
	close(release)
	<-closed
	if err := errors.Join(<-first, <-pending); err != nil {
		t.Fatal(err)
	}
	if got, want := r.committed(), [][]int{{0}, {1}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches = %v, want %v", got, want)
	}
	c.Close() // idempotent
}

// With two commits in flight at most, the first two appends commit at once,
// each alone, and the third waits for a slot.
func TestMaxInFlight(t *testing.T) {
	r := newRecorder()
	c := New(r.commit, nil, Config{MaxInFlight: 2})
	r0, r1 := r.holdItem(0), r.holdItem(1)
	a, b := doAsync(c, context.Background(), 0), doAsync(c, context.Background(), 1)
	<-r.started
	<-r.started
	third := doAsync(c, context.Background(), 2)
	queued(t, c, 1)
	close(r1)
	if err := errors.Join(<-b, <-third); err != nil {
		t.Fatal(err)
	}
	close(r0)
	if err := <-a; err != nil {
		t.Fatal(err)
	}
	if got, want := r.committed(), [][]int{{1}, {2}, {0}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches = %v, want %v", got, want)
	}
}
