package opensandbox_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/opensandbox"
)

// seen is one request as the fake server received it.
type seen struct {
	Method string
	Path   string // escaped path
	Query  map[string][]string
	Header http.Header
	Body   []byte
}

// recorder is an httptest server that records every request and answers with
// handler. Handlers are written from the spec and API-NOTES, not from the client.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newRecorder(t *testing.T, handler func(w http.ResponseWriter, r *http.Request, body []byte)) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, seen{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.Query(),
			Header: r.Header.Clone(), Body: body})
		rec.mu.Unlock()
		handler(w, r, body)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (r *recorder) requests() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.reqs...)
}

func (r *recorder) last(t *testing.T) seen {
	t.Helper()
	reqs := r.requests()
	if len(reqs) == 0 {
		t.Fatal("no request received")
	}
	return reqs[len(reqs)-1]
}

// writeJSON answers status with a raw JSON body.
func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// jsonEqual compares two JSON documents structurally.
func jsonEqual(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: body %q is not JSON: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad want %q: %v", what, want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s body = %s, want %s", what, got, want)
	}
}

// fastRetry keeps retry tests quick.
var fastRetry = opensandbox.RetryConfig{MaxRetries: 3, InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond}

func newClient(t *testing.T, baseURL string, mod ...func(*opensandbox.Config)) *opensandbox.Client {
	t.Helper()
	cfg := opensandbox.Config{BaseURL: baseURL + "/v1", APIKey: "key-1", Retry: fastRetry}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := opensandbox.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func countGoroutines() int {
	http.DefaultClient.CloseIdleConnections()
	if tr, ok := http.DefaultTransport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
	return runtime.NumGoroutine()
}

func itoa(n int) string { return strconv.Itoa(n) }
