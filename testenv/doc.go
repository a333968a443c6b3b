// Package testenv hands tests and development tools raw resources: a temp SQLite
// path, an ephemeral Postgres server, embedded NATS servers (one node or a
// 3-node cluster), a real S3 server (versitygw, as a process) and an
// in-process sandboxd. It returns raw handles (a path, a
// DSN, a URL, a *nats.Conn) so no adapter forms an import cycle with it.
//
// It may import every package of the module but cmd/*.
package testenv
