package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ConfigError reports an OTEL_* variable whose value cannot be used.
type ConfigError struct {
	Var    string
	Value  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("telemetry: %s=%q: %s", e.Var, e.Value, e.Reason)
}

// Setup reads the OTEL_* variables through getenv and, when traces are to be
// exported, installs a global tracer provider exporting over OTLP/HTTP in
// batches. service is the service name used when OTEL_SERVICE_NAME is unset.
// The returned shutdown flushes and stops the exporter (a no-op when tracing
// is off); call it before the process exits. Setup itself does no network I/O.
func Setup(ctx context.Context, service string, getenv func(string) string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	endpoint, err := traceEndpoint(getenv)
	if err != nil || endpoint == "" {
		return func(context.Context) error { return nil }, err
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(endpoint)}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		h, err := parseHeaders(v, getenv(v))
		if err != nil {
			return nil, err
		}
		if len(h) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(h))
		}
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	res, err := serviceResource(service, getenv)
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// traceEndpoint returns the URL traces are exported to, or "" when tracing is off.
func traceEndpoint(getenv func(string) string) (string, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return "", nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return "", nil
	default:
		return "", &ConfigError{Var: "OTEL_TRACES_EXPORTER", Value: exp, Reason: `only "otlp" and "none" are supported`}
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" && p != "http/protobuf" {
			return "", &ConfigError{Var: v, Value: p, Reason: `only "http/protobuf" is supported`}
		}
	}
	name, raw := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	base := false
	if raw == "" {
		name, raw, base = "OTEL_EXPORTER_OTLP_ENDPOINT", strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")), true
	}
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", &ConfigError{Var: name, Value: raw, Reason: "must be an absolute http(s) URL"}
	}
	if base {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	return u.String(), nil
}

// parseHeaders parses the OTLP headers format: key=value pairs separated by
// commas, values URL-encoded.
func parseHeaders(name, raw string) (map[string]string, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	h := map[string]string{}
	for _, kv := range strings.Split(raw, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, &ConfigError{Var: name, Value: raw, Reason: "want key=value pairs separated by commas"}
		}
		val, err := url.QueryUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, &ConfigError{Var: name, Value: raw, Reason: "bad escape in the value of " + k}
		}
		h[k] = val
	}
	return h, nil
}

// serviceResource describes the process: service.name from OTEL_SERVICE_NAME
// (else service), plus OTEL_RESOURCE_ATTRIBUTES.
func serviceResource(service string, getenv func(string) string) (*resource.Resource, error) {
	if s := strings.TrimSpace(getenv("OTEL_SERVICE_NAME")); s != "" {
		service = s
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", service)}
	if raw := getenv("OTEL_RESOURCE_ATTRIBUTES"); strings.TrimSpace(raw) != "" {
		kv, err := parseHeaders("OTEL_RESOURCE_ATTRIBUTES", raw)
		if err != nil {
			return nil, err
		}
		for k, v := range kv {
			if k != "service.name" {
				attrs = append(attrs, attribute.String(k, v))
			}
		}
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return res, nil
}
