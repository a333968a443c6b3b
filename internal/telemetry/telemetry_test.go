package telemetry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// collector is an OTLP/HTTP traces endpoint that keeps the spans' names and
// the services that sent them.
type collector struct {
	mu       sync.Mutex
	spans    []string
	services []string
	headers  http.Header
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.headers = r.Header.Clone()
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.Resource.GetAttributes() {
			if a.Key == "service.name" {
				c.services = append(c.services, a.Value.GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, s.Name)
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func TestSetupExportsOverOTLPHTTP(t *testing.T) {
	col := &collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()

	shutdown, err := Setup(context.Background(), "alineo-test", env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL,
		"OTEL_EXPORTER_OTLP_HEADERS":  "x-team=alineo,authorization=Bearer%20t0k",
		"OTEL_SERVICE_NAME":           "executor-7",
	}))
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("test").Start(context.Background(), "sandbox.exec")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown (flush): %v", err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.spans) != 1 || col.spans[0] != "sandbox.exec" {
		t.Fatalf("collector got spans %q, want [sandbox.exec]", col.spans)
	}
	if len(col.services) != 1 || col.services[0] != "executor-7" {
		t.Errorf("service.name = %q, want executor-7 (OTEL_SERVICE_NAME)", col.services)
	}
	if col.headers.Get("X-Team") != "alineo" || col.headers.Get("Authorization") != "Bearer t0k" {
		t.Errorf("export headers = %v, want x-team and the unescaped authorization", col.headers)
	}
}

func TestSetupOff(t *testing.T) {
	before := otel.GetTracerProvider()
	for name, vars := range map[string]map[string]string{
		"nothing set":   {},
		"sdk disabled":  {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
		"exporter none": {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
	} {
		shutdown, err := Setup(context.Background(), "x", env(vars))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if otel.GetTracerProvider() != before {
			t.Fatalf("%s: a tracer provider was installed", name)
		}
		if err := shutdown(context.Background()); err != nil {
			t.Fatalf("%s: shutdown: %v", name, err)
		}
	}
}

func TestSetupBadConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		vars map[string]string
		bad  string
	}{
		"grpc":         {map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		"zipkin":       {map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"},
		"relative url": {map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		"bad headers":  {map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "OTEL_EXPORTER_OTLP_HEADERS"},
	} {
		_, err := Setup(context.Background(), "x", env(tc.vars))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Var != tc.bad {
			t.Errorf("%s: err = %v, want a *ConfigError for %s", name, err, tc.bad)
		}
	}
}

func TestTraceEndpoint(t *testing.T) {
	for _, tc := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://c:4318/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c/otel/"}, "https://c/otel/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://base", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:9/custom"}, "http://c:9/custom"},
	} {
		got, err := traceEndpoint(env(tc.vars))
		if err != nil || got != tc.want {
			t.Errorf("traceEndpoint(%v) = %q, %v; want %q", tc.vars, got, err, tc.want)
		}
	}
}
