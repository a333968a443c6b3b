package api

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
)

// frame is one encoded SSE event, shared read-only by every stream it goes
// to, or the error that ended the subscription.
type frame struct {
	data []byte
	err  error
}

// hub shares one bus subscription among the live streams with the same
// filter, so N auditors tailing the ledger cost one consumer and one encoding
// per event. Each stream has a bounded queue; a stream that falls
// DefaultStreamBuffer frames behind is cut off (its queue closed) and
// resumes with Last-Event-ID on a replay of its own, so nothing is lost.
type hub struct {
	mu    sync.Mutex
	feeds map[string]*feed
}

type feed struct {
	subs   map[chan frame]struct{}
	cancel context.CancelFunc
}

func filterKey(f bus.Filter) string {
	evs := make([]string, 0, len(f.Events))
	for _, e := range f.Events {
		evs = append(evs, string(e))
	}
	slices.Sort(evs)
	return f.SandboxID + "|" + strings.Join(slices.Compact(evs), ",")
}

// join adds a live stream for f and returns its queue and the function that
// removes it. The queue is closed when the stream is cut off or the feed
// ends; an error frame precedes a failed feed's close.
func (h *hub) join(s *Server, f bus.Filter) (<-chan frame, func(), error) {
	key := filterKey(f)
	ch := make(chan frame, s.cfg.StreamBuffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.feeds == nil {
		h.feeds = map[string]*feed{}
	}
	fd := h.feeds[key]
	if fd == nil {
		ctx, cancel := context.WithCancel(context.Background())
		seq, err := s.cfg.Bus.Subscribe(ctx, f)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		fd = &feed{subs: map[chan frame]struct{}{}, cancel: cancel}
		h.feeds[key] = fd
		go h.run(key, fd, seq)
	}
	fd.subs[ch] = struct{}{}
	leave := func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := fd.subs[ch]; ok {
			delete(fd.subs, ch)
			close(ch)
		}
		if len(fd.subs) == 0 && h.feeds[key] == fd {
			delete(h.feeds, key)
			fd.cancel()
		}
	}
	return ch, leave, nil
}

// run fans the feed's entries out until its subscription ends.
func (h *hub) run(key string, fd *feed, seq func(func(events.Entry, error) bool)) {
	for e, err := range seq {
		fr := frame{err: err}
		if err == nil {
			fr.data = appendEvent(nil, e)
		}
		h.mu.Lock()
		for ch := range fd.subs {
			select {
			case ch <- fr:
			default: // too far behind: cut it off
				delete(fd.subs, ch)
				close(ch)
			}
		}
		h.mu.Unlock()
		if err != nil {
			break
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range fd.subs {
		delete(fd.subs, ch)
		close(ch)
	}
	if h.feeds[key] == fd {
		delete(h.feeds, key)
	}
	fd.cancel()
}
