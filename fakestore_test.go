package alineo

import (
	"context"
	"sync"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// fakeStore records entries in memory. Hooks let a test slow down or fail
// chosen writes. Methods it does not implement panic through the nil interface.
type fakeStore struct {
	adapters.Store

	// before is called before each entry is stored; a non-nil error fails it.
	before func(e events.Entry) error

	mu      sync.Mutex
	entries []events.Entry
	batches int
}

func (s *fakeStore) Append(ctx context.Context, e events.Entry) error {
	if err := events.Validate(e); err != nil {
		return err
	}
	if s.before != nil {
		if err := s.before(e); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e.Seq = uint64(len(s.entries) + 1)
	s.entries = append(s.entries, e)
	return nil
}

func (s *fakeStore) AppendBatch(ctx context.Context, es []events.Entry) error {
	for _, e := range es {
		if err := events.Validate(e); err != nil {
			return err
		}
		if s.before != nil {
			if err := s.before(e); err != nil {
				return err
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches++
	for _, e := range es {
		e.Seq = uint64(len(s.entries) + 1)
		s.entries = append(s.entries, e)
	}
	return nil
}

func (s *fakeStore) ReadAll(ctx context.Context, name, sandboxID string) ([]events.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []events.Entry
	for _, e := range s.entries {
		if e.Name == name && e.SandboxID == sandboxID {
			out = append(out, e)
		}
	}
	return out, nil
}

func (s *fakeStore) all() []events.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]events.Entry(nil), s.entries...)
}
