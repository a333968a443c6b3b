package adapters

import (
	"context"

	"github.com/alineo-labs/alineo/events"
)

// Ledger is the append-only event log: what a ledger keeps, in order, and
// gives back for replay. Resume needs nothing else: a Ledger alone is enough
// for an SDK client to record sandboxes and resume them.
//
// A Ledger initialises itself lazily on first use (once, even under
// concurrent first use): there is no Connect. All methods are safe for
// concurrent use. After Close every method returns ErrClosed. Ledgers do not
// retry: callers decide. Methods return nil results (not ErrNotFound) where
// there is nothing to return.
type Ledger interface {
	// Append persists e. It returns an error wrapping ErrInvalidEntry if e
	// fails events.Validate, and then writes nothing (see the package doc for
	// who validates). e.Seq is ignored. Appends from one goroutine are read
	// back in the order made.
	Append(ctx context.Context, e events.Entry) error
	// AppendBatch persists es atomically in order: all or nothing. Any invalid
	// entry fails the whole batch with an error wrapping ErrInvalidEntry.
	AppendBatch(ctx context.Context, es []events.Entry) error
	// ReadAll returns the session's entries ordered by (Ts, Seq), each with its
	// Seq (its position in the ledger); none for an unknown session.
	ReadAll(ctx context.Context, name, sandboxID string) ([]events.Entry, error)
	// LastCheckpoint returns the session's newest sandbox.checkpoint_created entry
	// in (Ts, Seq) order, or nil when it has none.
	LastCheckpoint(ctx context.Context, name, sandboxID string) (*events.Entry, error)
	// ListCheckpoints returns the session's checkpoints in (Ts, Seq) order.
	ListCheckpoints(ctx context.Context, name, sandboxID string) ([]CheckpointInfo, error)
	// DeleteSandbox deletes every entry of the session (and, in a Store, its
	// details). Deleting an unknown session is not an error.
	DeleteSandbox(ctx context.Context, name, sandboxID string) error
	// Close releases every resource. It is idempotent.
	Close() error
}

// Scanner is a Ledger that can hand a session's entries to a function as it
// reads them, without holding them all at once. Resume reads a session this
// way when its ledger is one: a long session's entries are mostly its execs',
// of which a replay keeps a few fields, and a slice of them all is what the
// read would otherwise build, only to drop it.
type Scanner interface {
	// ScanAll calls fn with each entry ReadAll would return, in ReadAll's
	// order. *e and its fields stay valid after the call (fn may keep e's
	// payload), but e itself is reused: fn copies what it keeps. An error
	// from fn ends the scan and is returned as it is.
	//
	// When ScanAll cannot hand them so (a writer's clock went back, or the
	// ledger lost entries as they were read), it returns
	// an error wrapping ErrRescan, possibly after handing some of them: the
	// caller drops what it was handed and reads with ReadAll instead.
	ScanAll(ctx context.Context, name, sandboxID string, fn func(e *events.Entry) error) error
}

// ReadModel is what is derived from the ledger and kept beside it: the
// sessions' details, the listings over them, and the environment records
// (which are not ledger events). It answers questions across sessions, which
// an append-only log cannot answer without reading everything.
//
// All methods are safe for concurrent use. After Close every method returns
// ErrClosed. Read models do not retry. Methods return nil results (not
// ErrNotFound) for unknown names.
type ReadModel interface {
	// ListSandboxDetails returns the sessions named name, newest first, filtered by opts.
	ListSandboxDetails(ctx context.Context, name string, opts ListOptions) ([]SandboxDetails, error)
	// ListAllSandboxDetails returns every session, newest first, filtered by opts.
	ListAllSandboxDetails(ctx context.Context, opts ListOptions) ([]SandboxDetails, error)
	// GetSandboxDetails returns one session, or nil when it is unknown.
	GetSandboxDetails(ctx context.Context, name, sandboxID string) (*SandboxDetails, error)
	// GetEnvironment returns the named environment, or nil when it is unknown.
	GetEnvironment(ctx context.Context, name string) (*EnvironmentRecord, error)
	// SaveEnvironment inserts or replaces the environment named rec.Name. A
	// record without a name is an error wrapping ErrInvalidEntry.
	SaveEnvironment(ctx context.Context, rec EnvironmentRecord) error
	// DeleteEnvironment removes the named environment; an unknown name is a no-op.
	DeleteEnvironment(ctx context.Context, name string) error
	// ListEnvironments returns every environment, newest BuiltAt first.
	ListEnvironments(ctx context.Context) ([]EnvironmentRecord, error)
	// Close releases every resource. It is idempotent.
	Close() error
}

// Store is a Ledger and the ReadModel derived from it, kept together in one
// database, method for method the storage interface of the TypeScript SDK
// (IStorageAdapter). A Store keeps the details of a session up to date in the
// same transaction as the entries that change them, so its two halves always
// agree. The memory, sqlite and postgres packages provide Stores.
type Store interface {
	Ledger
	ReadModel
}

// ProjectionStore is implemented by stores a projector writes the bus ledger into.
// Entries carry their ledger (stream) sequence in Seq, which the store keeps in a
// unique column, so a redelivered entry is skipped rather than duplicated.
//
// Safe for concurrent use by different consumers; one consumer name belongs to
// one projector at a time.
type ProjectionStore interface {
	// ApplyBatch stores es (each with Seq > 0) and sets consumer's offset to
	// offset, in one transaction: both or neither. Entries whose Seq is already
	// stored are skipped. Sandbox details are kept up to date in the same
	// transaction. es may be empty (an offset-only advance).
	ApplyBatch(ctx context.Context, consumer string, es []events.Entry, offset uint64) error
	// Offset returns the last offset stored for consumer, 0 if none.
	Offset(ctx context.Context, consumer string) (uint64, error)
}

// SandboxStatus is the derived status of a session.
type SandboxStatus string

const (
	StatusRunning   SandboxStatus = "running"
	StatusCompleted SandboxStatus = "completed"
)

// SandboxDetails summarises one session. Only sessions with a sandbox.created
// entry have details.
type SandboxDetails struct {
	Name      string        `json:"name"`
	SandboxID string        `json:"sandboxId"`
	Status    SandboxStatus `json:"status"`
	// StartedAt is the Ts of the first sandbox.created entry.
	StartedAt int64 `json:"startedAt"`
	// CompletedAt is the Ts of the last sandbox.closed entry, 0 while running.
	CompletedAt int64 `json:"completedAt,omitempty"`
	// ExecCount is the number of exec.completed entries.
	ExecCount int `json:"execCount"`
	// RunID is the sandbox.created payload's runId, or the SandboxID when it has none.
	RunID string `json:"runId"`
}

// ListOptions filters and limits the details lists. The zero value lists everything.
// The filters are applied in the query, before the limit.
type ListOptions struct {
	Status SandboxStatus // "" for any
	Limit  int           // 0 for no limit
	Before int64         // only sessions with StartedAt < Before; 0 for no bound
	RunID  string        // "" for any
	// SandboxID keeps the sessions of that sandbox id ("" for any): usually
	// one, several when a sandbox was recorded under several names.
	SandboxID string
}

// CheckpointInfo is one checkpoint of a session.
type CheckpointInfo struct {
	SnapshotID string `json:"snapshotId"`
	Tag        string `json:"tag,omitempty"`
	CreatedAt  int64  `json:"createdAt"`
}

// EnvironmentRecord caches the snapshot a named environment was built into.
type EnvironmentRecord struct {
	Name       string `json:"name"`
	SnapshotID string `json:"snapshotId"`
	Image      string `json:"image"`
	BuiltAt    int64  `json:"builtAt"`
	// Fingerprint identifies the image, resources and setup the environment was
	// built from; a different fingerprint means the record is stale. Empty in
	// records written by the TypeScript SDK.
	Fingerprint string `json:"fingerprint,omitempty"`
}
