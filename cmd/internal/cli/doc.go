// Package cli is the wiring the alineo binaries (executor, projector, api)
// share: opening the bus (with the fleet's NATS credentials, TLS, replicas
// and retention: NATSFlags), the read-model store and an in-process sandboxd
// from flags and the conventional variables, and serving Prometheus metrics.
// It holds no logic of its own and is imported only by cmd/*.
//
// Of this module it imports adapters, adapters/postgres, adapters/sqlite,
// bus, cmd/internal/telemetry, events, jobs and sandboxd only.
package cli
