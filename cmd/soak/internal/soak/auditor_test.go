package soak

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/events"
)

// sseServer serves 1..total as exec.started events, cutting each connection
// after cut events; a reconnection resumes after its Last-Event-ID (or from
// ?from=). It records each request's resume point.
type sseServer struct {
	total, cut int
	mu         sync.Mutex
	resumes    []string
}

func (s *sseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.resumes = append(s.resumes, r.Header.Get("Last-Event-ID")+"|"+r.URL.Query().Get("from"))
	s.mu.Unlock()
	next := 1
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		n, _ := strconv.Atoi(last)
		next = n + 1
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "retry: 1000\n: connected\n\n")
	w.(http.Flusher).Flush()
	for sent := 0; next <= s.total; next, sent = next+1, sent+1 {
		if sent == s.cut {
			fmt.Fprint(w, "event: error\ndata: \"stream ended; reconnect with Last-Event-ID\"\n\n")
			return
		}
		fmt.Fprintf(w, ": keep-alive\n\nid: %d\ndata: {\"seq\":%d,\"event\":\"exec.started\"}\n\n", next, next)
		w.(http.Flusher).Flush()
	}
	<-r.Context().Done()
}

func TestAuditorResumesWithLastEventID(t *testing.T) {
	srv := &sseServer{total: 25, cut: 7}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	a := &auditor{name: "a", api: ts.URL, filter: []events.Event{events.ExecStarted}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.run(ctx) }()
	err := poll(context.Background(), "auditor saw 25", 30*time.Second, 20*time.Millisecond, func() (bool, error) {
		return len(a.log().Seen) >= 25, nil
	})
	cancel()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	var want []Seen
	for i := 1; i <= 25; i++ {
		want = append(want, Seen{Seq: uint64(i), Event: events.ExecStarted})
	}
	if p := compareSeen(a.log().Seen, want); p != "" {
		t.Fatalf("auditor: %s", p)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	// Live first, then resumed after 7, 14, 21.
	if len(srv.resumes) < 4 || srv.resumes[0] != "|" || srv.resumes[1] != "7|" || srv.resumes[2] != "14|" || srv.resumes[3] != "21|" {
		t.Fatalf("resume points %q, want live, then 7, 14, 21", srv.resumes)
	}
	if a.log().Reconnects < 3 {
		t.Fatalf("reconnects %d, want at least 3", a.log().Reconnects)
	}
}
