// Package testenv hands tests and development tools raw resources: a temp SQLite
// path, an ephemeral Postgres server, embedded NATS servers (one node or a
// 3-node cluster), a real S3 server (versitygw, as a process) and an
// in-process sandboxd. It returns raw handles (a path, a
// DSN, a URL, a *nats.Conn) so no adapter forms an import cycle with it.
//
// It also finds the module's fixtures (testdata/, FixturesDir and Fixture).
//
// Of this module it imports internal/testutil and sandboxd only: a package
// whose own tests (in the package, not _test) use testenv must not be
// imported by it, or those tests would form an import cycle, so testenv
// imports neither a store, the bus, the SDK nor anything above them.
package testenv
