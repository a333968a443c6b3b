package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
)

// streamFilter reads the filter of /v1/events/stream: sandbox=ID, event=NAME
// (repeatable or comma-separated), and the resume position: the Last-Event-ID
// header (or lastEventId query parameter) resumes after that sequence; from=SEQ
// starts at SEQ; neither starts with the next new event.
func streamFilter(r *http.Request) (bus.Filter, *Error) {
	q := r.URL.Query()
	f := bus.Filter{SandboxID: q.Get("sandbox")}
	if f.SandboxID != "" {
		if _, err := events.SandboxSubject(events.DefaultSubjectPrefix, f.SandboxID); err != nil {
			return f, badRequest("sandbox", "invalid sandbox id "+strconv.Quote(f.SandboxID))
		}
	}
	for _, v := range q["event"] {
		for name := range strings.SplitSeq(v, ",") {
			ev := events.Event(strings.TrimSpace(name))
			if ev == "" {
				continue
			}
			if !ev.Known() {
				return f, badRequest("event", "unknown event "+strconv.Quote(string(ev)))
			}
			f.Events = append(f.Events, ev)
		}
	}
	last := r.Header.Get("Last-Event-ID")
	field := "Last-Event-ID"
	if last == "" {
		last, field = q.Get("lastEventId"), "lastEventId"
	}
	if last != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(last), 10, 64)
		if err != nil {
			return f, badRequest(field, field+" must be a ledger sequence, got "+strconv.Quote(last))
		}
		f.FromSeq = n + 1
	} else if from := q.Get("from"); from != "" {
		n, err := strconv.ParseUint(from, 10, 64)
		if err != nil || n == 0 {
			return f, badRequest("from", "from must be a ledger sequence >= 1, got "+strconv.Quote(from))
		}
		f.FromSeq = n
	}
	return f, nil
}

// stream serves the live audit stream as Server-Sent Events. Each event is
// "id: <ledger sequence>" and "data: <the entry as JSON>".
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Bus == nil {
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "no event bus configured"})
		return
	}
	f, e := streamFilter(r)
	if e != nil {
		writeError(w, e)
		return
	}
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "too many open streams"})
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	seq, err := s.cfg.Bus.Subscribe(ctx, f)
	if err != nil {
		if errors.Is(err, events.ErrInvalidSubject) {
			writeError(w, badRequest("", err.Error()))
			return
		}
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: err.Error()})
		return
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 1000\n: connected\n\n"); err != nil {
		return
	}
	if err := rc.Flush(); err != nil {
		return
	}
	s.m.streams.Inc()
	defer s.m.streams.Dec()

	// The subscription is read by its own goroutine into a bounded channel so
	// heartbeats go out while no event comes; a slow client blocks the reader,
	// which stops pulling (flow control), never buffering without bound.
	type item struct {
		e   events.Entry
		err error
	}
	ch := make(chan item, 64)
	go func() {
		defer close(ch)
		for e, err := range seq {
			select {
			case ch <- item{e, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	hb := time.NewTicker(s.cfg.Heartbeat)
	defer hb.Stop()
	var buf []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-hb.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		case it, ok := <-ch:
			// Write every event already queued before flushing, so a burst
			// costs one flush.
			buf = buf[:0]
			var failed error
			count := 0
			for ok {
				if it.err != nil {
					failed = it.err
					break
				}
				buf = appendEvent(buf, it.e)
				count++
				if len(buf) > 64<<10 {
					break
				}
				select {
				case it, ok = <-ch:
				default:
					ok = false
				}
			}
			if len(buf) > 0 {
				if _, err := w.Write(buf); err != nil {
					s.m.dropped.Inc()
					return
				}
			}
			if failed != nil {
				s.m.dropped.Inc()
				fmt.Fprintf(w, "event: error\ndata: %s\n\n", jsonString(failed.Error()))
				_ = rc.Flush()
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			if count == 0 { // the channel closed: the subscription ended
				return
			}
			s.m.streamed.Add(float64(count))
		}
	}
}

// appendEvent appends one SSE event: the entry's ledger sequence as its id and
// the entry as JSON (one line) as its data.
func appendEvent(buf []byte, e events.Entry) []byte {
	data, err := json.Marshal(e)
	if err != nil {
		return buf
	}
	buf = append(buf, "id: "...)
	buf = strconv.AppendUint(buf, e.Seq, 10)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, data...)
	return append(buf, "\n\n"...)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
