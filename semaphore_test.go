package alineo

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/testenv"
)

func TestSemaphoreNeverExceedsCap(t *testing.T) {
	const max, goroutines = 3, 100
	s := newSemaphore(max)
	var live, peak atomic.Int32
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			if err := s.acquire(context.Background()); err != nil {
				t.Errorf("acquire: %v", err)
				return
			}
			n := live.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(100 * time.Microsecond)
			live.Add(-1)
			s.release()
		})
	}
	wg.Wait()
	if got := peak.Load(); got > max {
		t.Fatalf("peak = %d, want <= %d", got, max)
	}
	if got := s.inUse(); got != 0 {
		t.Fatalf("in use after all released = %d, want 0", got)
	}
}

func TestSemaphoreFIFO(t *testing.T) {
	s := newSemaphore(1)
	if err := s.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	const n = 10
	order := make(chan int, n)
	for i := range n {
		go func() {
			if err := s.acquire(context.Background()); err != nil {
				t.Errorf("acquire %d: %v", i, err)
				return
			}
			order <- i
			s.release()
		}()
		// Wait until waiter i is queued before starting the next one.
		testenv.Eventually(t, 5*time.Second, func() error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.waiters.Len() != i+1 {
				return errors.New("waiter not queued yet")
			}
			return nil
		})
	}
	s.release()
	for want := range n {
		if got := <-order; got != want {
			t.Fatalf("served %d, want %d (first come first served)", got, want)
		}
	}
}

func TestSemaphoreCancelledWait(t *testing.T) {
	s := newSemaphore(1)
	if err := s.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.acquire(ctx) }()
	testenv.Eventually(t, 5*time.Second, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.waiters.Len() != 1 {
			return errors.New("not queued")
		}
		return nil
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire = %v, want context.Canceled", err)
	}
	s.release()
	if got := s.inUse(); got != 0 {
		t.Fatalf("in use = %d, want 0 (the cancelled waiter must not keep a slot)", got)
	}
	// The slot is free again.
	if err := s.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestSemaphoreNil(t *testing.T) {
	s := newSemaphore(0)
	for range 1000 {
		if err := s.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	s.release()
}
