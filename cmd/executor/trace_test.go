package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/testenv"
)

// TestRunJobExportsTraces: with OTEL_EXPORTER_OTLP_ENDPOINT set, a job's
// spans (the job's, the SDK's, the in-process projector's) reach an OTLP/HTTP
// collector by the time the executor returns.
func TestRunJobExportsTraces(t *testing.T) {
	var mu sync.Mutex
	names := map[string]int{}
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names[s.Name]++
				}
			}
		}
		mu.Unlock()
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	defer col.Close()
	dir := t.TempDir()
	env := map[string]string{"OPEN_SANDBOX_URL": testenv.Sandboxd(t), "OTEL_EXPORTER_OTLP_ENDPOINT": col.URL}
	out := &testutil.SyncBuffer{}
	err := run(context.Background(), []string{"run", "--nats-dir", filepath.Join(dir, "nats"), "--sqlite", filepath.Join(dir, "a.db"),
		writeSpec(t, helloJob)}, func(k string) string { return env[k] }, out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	for name, want := range map[string]int{"job.run": 1, "job.step": 3, "sandbox.run": 1, "sandbox.exec": 2} {
		if names[name] != want {
			t.Errorf("collector got %d %s spans, want %d (all: %v)", names[name], name, want, names)
		}
	}
	if names["projection.apply"] == 0 {
		t.Errorf("collector got no projection.apply span (all: %v)", names)
	}
}
