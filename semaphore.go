package alineo

import (
	"container/list"
	"context"
	"sync"
)

// semaphore is a FIFO counting semaphore. A released slot is handed directly to
// the longest waiter, so no caller can slip in between and the count never
// exceeds the cap. A nil *semaphore has no limit.
type semaphore struct {
	max int

	mu      sync.Mutex
	held    int
	waiters list.List // of chan struct{}, closed when the slot is handed over
}

func newSemaphore(max int) *semaphore {
	if max <= 0 {
		return nil
	}
	return &semaphore{max: max}
}

// acquire takes a slot, waiting in FIFO order. It returns ctx.Err() if ctx is
// done first, and then holds no slot.
func (s *semaphore) acquire(ctx context.Context) error {
	if s == nil {
		return ctx.Err()
	}
	s.mu.Lock()
	if s.held < s.max && s.waiters.Len() == 0 {
		s.held++
		s.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	elem := s.waiters.PushBack(ready)
	s.mu.Unlock()

	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		select {
		case <-ready:
			// The slot was handed over just as ctx ended: pass it on.
			s.mu.Unlock()
			s.release()
		default:
			s.waiters.Remove(elem)
			s.mu.Unlock()
		}
		return ctx.Err()
	}
}

// release returns a slot, handing it to the first waiter if there is one.
func (s *semaphore) release() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if front := s.waiters.Front(); front != nil {
		s.waiters.Remove(front)
		close(front.Value.(chan struct{}))
		return
	}
	if s.held > 0 {
		s.held--
	}
}

// inUse returns the number of slots held.
func (s *semaphore) inUse() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// waiting returns the number of callers waiting for a slot.
func (s *semaphore) waiting() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiters.Len()
}
