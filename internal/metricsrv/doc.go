// Package metricsrv serves a process's Prometheus metrics and its health on
// an address of its own: /metrics (a registry with the Go and process
// collectors) and /healthz (200 {"status":"ok"}, or 503 naming the first
// failed check). The commands share it: internal/cli hands it to the fleet's
// binaries, and cmd/sandboxd, which must not link the bus or the stores,
// uses it directly.
//
// Of this module it imports nothing: only the standard library and
// Prometheus's client.
package metricsrv
