// Package cli is the wiring the alineo commands (cmd/executor, cmd/api and
// the projector's command line, projections/projectorcmd) share: opening the
// bus (with the fleet's NATS credentials, TLS, replicas and retention:
// NATSFlags) and the read-model store from flags and the conventional
// variables, tracing, and serving Prometheus metrics and a health answer. It
// holds no logic of its own and is imported only by commands; it lives under
// internal/ rather than cmd/internal/ so that projectorcmd, which users import
// to build a projector of their own, can use it. It links neither the SDK nor
// sandboxd: a user's projector binary carries neither.
//
// Of this module it imports adapters, adapters/postgres, adapters/sqlite,
// bus, events, internal/metricsrv and internal/telemetry only.
package cli
