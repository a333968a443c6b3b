package projectorcmd

import "errors"

var (
	// ErrNoSource is returned by rebuild, verify and partitions when no
	// stream was named: no --nats, NATS_URL or --nats-dir of an existing store.
	ErrNoSource = errors.New("no ledger stream named")
	// ErrEmptyStream is returned by rebuild and verify when the stream holds
	// no entries (or none from --from on).
	ErrEmptyStream = errors.New("the ledger stream has no entries")
	// ErrNoTarget is returned by verify and partitions when the target
	// database does not exist.
	ErrNoTarget = errors.New("no projection target")
)
