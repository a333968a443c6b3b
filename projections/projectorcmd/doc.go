// Package projectorcmd is the projector's command line, for a binary of your
// own that runs your projections: Main runs every Definition registered with
// projections.Register, with the subcommands and flags of cmd/projector (which
// is Main over the example projections).
//
//	package main
//
//	import (
//		"example.com/mine/stats"
//		"github.com/alineo-labs/alineo/projections"
//		"github.com/alineo-labs/alineo/projections/projectorcmd"
//	)
//
//	func main() {
//		projections.Register(stats.Definition())
//		projectorcmd.Main()
//	}
//
// The subcommands:
//
//	projector [run]      follow the stream as a durable consumer (the default)
//	projector rebuild    project the history into the target and exit
//	projector verify     rebuild into memory and compare with the target row for row
//	projector partitions print each partition's offset, lag and the projector holding it
//	projector list       print the registered projections
//
// with --projection NAME (default tables: the product's tables), --nats URL
// (NATS_URL; run alone starts an embedded server under --nats-dir when it is
// empty), the fleet's NATS flags (credentials, TLS, replicas), --sqlite PATH
// (default ./alineo.db) or --postgres DSN (DATABASE_URL or PG*), --consumer,
// --partitions N and --partition I, --from SEQ (rebuild), --metrics ADDR
// (run; ALINEO_METRICS_ADDR, default 127.0.0.1:9464) and --progress (run).
// Flags go before or after the subcommand; --version prints the versions of
// the binary's module and of this one.
//
// rebuild, verify and partitions read an existing stream: they refuse to
// start without an explicit source (--nats, NATS_URL or the --nats-dir of a
// store that exists; ErrNoSource), and a stream without entries ends them
// with ErrEmptyStream (exit 1) rather than a report of 0 entries. verify and
// partitions also need a target that exists (ErrNoTarget).
//
// Of this module it imports adapters/sqlite, bus, internal/cli,
// internal/usage and projections only: neither the SDK nor sandboxd, which a
// projector binary has no use for.
package projectorcmd
