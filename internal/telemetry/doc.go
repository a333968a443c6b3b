// Package telemetry turns on OpenTelemetry tracing in the services from the
// standard OTEL_* environment variables: traces are exported over OTLP/HTTP
// (protobuf) when an OTLP endpoint is configured, and tracing is off (no
// provider installed, spans cost nothing) when none is.
//
// The variables read:
//
//	OTEL_SDK_DISABLED=true              off, whatever else is set
//	OTEL_TRACES_EXPORTER                "otlp" (default when an endpoint is set) or "none"
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT  full URL of the traces endpoint, e.g. http://collector:4318/v1/traces
//	OTEL_EXPORTER_OTLP_ENDPOINT         base URL; "/v1/traces" is appended
//	OTEL_EXPORTER_OTLP_PROTOCOL         only "http/protobuf" (the default) is supported
//	OTEL_EXPORTER_OTLP_HEADERS          (and _TRACES_HEADERS) key=value,... sent with every export
//	OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
//
// The W3C trace-context propagator is installed either way, so a trace context
// that arrives (in a ledger message's headers, say) is carried on.
//
// Of this module it imports nothing: only the standard library and
// OpenTelemetry's SDK and OTLP exporter, which no library package of this
// module links.
package telemetry
