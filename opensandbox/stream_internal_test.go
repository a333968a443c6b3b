package opensandbox

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestStreamDrainsOnlyWhatIsLeft: a stream whose terminal event comes with
// the response's end (sandboxd's execd writes them in one write) has read
// the whole response by the terminal event, and starts no drain; one whose
// server keeps the response open after it (the real execd) drains the rest
// in the background.
func TestStreamDrainsOnlyWhatIsLeft(t *testing.T) {
	var drains atomic.Int64
	testHookDrain = func() { drains.Add(1) }
	t.Cleanup(func() { testHookDrain = nil })
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `{"type":"init","text":"c1"}`+"\n\n")
		_, _ = io.WriteString(w, `{"type":"ping","text":"pong"}`+"\n\n")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, `{"type":"stdout","text":"hi"}`+"\n\n")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, `{"type":"execution_complete","execution_time":1}`+"\n\n")
		if !strings.HasPrefix(r.URL.Path, "/hold/") {
			return // the last event goes with the response's end
		}
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		path   string
		drains int64
	}{{"/end", 0}, {"/hold", 1}, {"/end", 0}} {
		ex, err := NewExecd(EndpointConfig{Endpoint: Endpoint{URL: srv.URL + tc.path}})
		if err != nil {
			t.Fatal(err)
		}
		before := drains.Load()
		s, err := ex.RunCommand(context.Background(), CommandRequest{Command: "echo hi"})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := s.Wait(); err != nil || res.ExitCode != 0 {
			t.Fatalf("%q: Wait = %+v, %v", tc.path, res, err)
		}
		if got := drains.Load() - before; got != tc.drains {
			t.Errorf("%q: %d drains started, want %d", tc.path, got, tc.drains)
		}
		ex.Close()
	}
}
