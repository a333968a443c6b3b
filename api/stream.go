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
// (repeatable or comma-separated; a known event in either vocabulary or an
// extension event), and the resume position: the Last-Event-ID
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
			ev := events.Event(strings.TrimSpace(name)).Canonical() // the bus carries the dotted names
			if ev == "" {
				continue
			}
			if !ev.Valid() { // a known event or an extension event
				return f, badRequest("event", "unknown event "+strconv.Quote(string(ev))+": "+events.CheckEvent(ev).Error())
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
	var frames <-chan frame
	if f.FromSeq == 0 {
		// Live from now: share one bus subscription per filter.
		ch, leave, err := s.hub.join(s, f)
		if err != nil {
			s.subscribeError(w, err)
			return
		}
		defer leave()
		frames = ch
	} else {
		// A resume replays this stream's own history, exactly.
		seq, err := s.cfg.Bus.Subscribe(ctx, f)
		if err != nil {
			s.subscribeError(w, err)
			return
		}
		ch := make(chan frame, 64)
		go func() {
			defer close(ch)
			for e, err := range seq {
				fr := frame{err: err}
				if err == nil {
					fr.data = appendEvent(nil, e)
				}
				select {
				case ch <- fr:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
		frames = ch
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

	hb := time.NewTicker(s.cfg.Heartbeat)
	defer hb.Stop()
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
		case fr, ok := <-frames:
			// Write every frame already queued before flushing, so a burst
			// costs one flush.
			count := 0
			for ok {
				if fr.err != nil {
					s.m.dropped.Inc()
					fmt.Fprintf(w, "event: error\ndata: %s\n\n", jsonString(fr.err.Error()))
					_ = rc.Flush()
					return
				}
				if _, err := w.Write(fr.data); err != nil {
					s.m.dropped.Inc()
					return
				}
				count++
				if count >= 256 {
					break
				}
				select {
				case fr, ok = <-frames:
				default:
					ok = false
				}
			}
			if count == 0 {
				// The feed ended: this stream fell too far behind a shared
				// feed, or the server is stopping. The client resumes with
				// Last-Event-ID, on a replay of its own.
				s.m.dropped.Inc()
				fmt.Fprint(w, "event: error\ndata: \"stream ended; reconnect with Last-Event-ID\"\n\n")
				_ = rc.Flush()
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			s.m.streamed.Add(float64(count))
		}
	}
}

func (s *Server) subscribeError(w http.ResponseWriter, err error) {
	if errors.Is(err, events.ErrInvalidSubject) {
		writeError(w, badRequest("", err.Error()))
		return
	}
	writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: err.Error()})
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
