package checkpoints

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// LineageStore is the checkpoint-store contract without its optional fork
// capability: the contract's SandboxCheckpointStore. Every implementation is
// safe for concurrent use, including several values (and processes) over the
// same database where the implementation says so. Stores never retry: a
// caller that gets ErrWriterConflict or ErrStaleHead decides whether to try
// again. After Close every method returns ErrClosed.
type LineageStore interface {
	// Get returns the checkpoint with id, or an error wrapping
	// ErrCheckpointNotFound (ErrInvalidID for a malformed id).
	Get(ctx context.Context, id string) (*Checkpoint, error)
	// List returns the thread's checkpoints in the order they were appended;
	// an unknown thread has none.
	List(ctx context.Context, threadID string) ([]*Checkpoint, error)
	// Threads returns the ids of every thread that has checkpoints, sorted (an
	// addition to the contract, for listing every sandbox's snapshots).
	Threads(ctx context.Context) ([]string, error)
	// Head returns the thread's head checkpoint id, or "" when it has none.
	Head(ctx context.Context, threadID string) (string, error)
	// Append adds in.Checkpoint to its thread and makes it the head, if and only
	// if in.Writer holds the thread's live lease (else ErrWriterLost), the id is
	// new (else ErrDuplicateID), the thread's head equals in.ExpectedHead ("" =
	// no head; else ErrStaleHead) and the checkpoint's parent equals
	// in.ExpectedHead (else ErrParentMismatch). Invalid input gives ErrInvalidID
	// or ErrInvalidEntry. It returns the new head id. Check and write are atomic.
	Append(ctx context.Context, in AppendInput) (string, error)
	// DeleteHead removes the thread's head checkpoint and moves the head to its
	// parent. It returns ErrWriterLost without the live lease,
	// ErrCheckpointNotFound for an unknown id and ErrNotHead for a checkpoint
	// that is not the head of in.ThreadID.
	DeleteHead(ctx context.Context, in DeleteHeadInput) error
	// DeleteCheckpoint removes any checkpoint of in.ThreadID, not only the
	// head (an addition to the contract, for sandboxd's DELETE /snapshots/{id}).
	// Its children take its parent as their parent, and if it was the head the
	// head moves to its parent. Checkpoints hold complete manifests, so no other
	// checkpoint's content changes. It returns ErrWriterLost without the live
	// lease and ErrCheckpointNotFound for an id that is not in the thread.
	DeleteCheckpoint(ctx context.Context, in DeleteHeadInput) error
	// AcquireWriter takes the thread's writer lease, with a fence greater than
	// every earlier one of the thread. It returns ErrWriterConflict while another
	// lease is live (not released and not expired); it does not wait.
	AcquireWriter(ctx context.Context, threadID string) (*Lease, error)
	// ListBlobReferences returns every referenced blob key with its reference
	// count, sorted by key. A checkpoint holds one reference per file entry and
	// per artifact naming the key, so a key in two entries of one checkpoint
	// and one of another has 3. A key with no references is not listed.
	ListBlobReferences(ctx context.Context) ([]BlobRef, error)
	// Close releases the store's resources. It is idempotent.
	Close() error
}

// Forker is the contract's optional atomic fork capability
// (SandboxCheckpointForkCapability).
type Forker interface {
	// ForkFromCheckpoint copies the source checkpoint into the empty destination
	// thread as its fork-root (no parent, Reason ReasonForkRoot, ForkedFrom set,
	// files and artifacts shared) and makes it the head, atomically. in.Writer
	// must hold the destination thread's live lease (else ErrWriterLost). Errors:
	// ErrForkSourceNotFound, ErrForkSourceThreadMismatch,
	// ErrForkDestinationNotEmpty, ErrDuplicateID, ErrInvalidID. Safe for
	// concurrent use.
	ForkFromCheckpoint(ctx context.Context, in ForkInput) (*Checkpoint, error)
}

// Store is a store that can fork (the contract's
// ForkCapableSandboxCheckpointStore). The memory, sqlite and postgres stores
// of this module all are; a LineageStore of another kind may not be (see
// Fork).
type Store interface {
	LineageStore
	Forker
}

// IsForkCapable reports whether s can fork atomically
// (isForkCapableSandboxCheckpointStore).
func IsForkCapable(s LineageStore) bool {
	_, ok := s.(Forker)
	return ok
}

// Fork forks as Forker.ForkFromCheckpoint does, through s's own atomic fork.
// A store without that capability gets an error wrapping
// ErrAtomicForkRequired and nothing is written: a fork is never put together
// from Get and Append, which another writer could interleave with.
func Fork(ctx context.Context, s LineageStore, in ForkInput) (*Checkpoint, error) {
	f, ok := s.(Forker)
	if !ok {
		return nil, errorf(CodeAtomicForkRequired, "fork %q into thread %q: the store (%T) cannot fork atomically", in.SourceCheckpointID, in.DestinationThreadID, s)
	}
	return f.ForkFromCheckpoint(ctx, in)
}

// AppendInput is the argument of Store.Append; its JSON is that of the
// contract's append argument (MarshalJSON).
type AppendInput struct {
	Checkpoint *Checkpoint
	// ExpectedHead is the head the caller read; "" means the thread is empty.
	ExpectedHead string
	Writer       Writer
}

// Validate checks in as every Store's Append does before it looks at the store: a
// checkpoint that passes Checkpoint.Validate, a well-formed ExpectedHead, and a parent
// equal to ExpectedHead. It returns an *Error with CodeInvalidEntry, CodeInvalidID or
// CodeParentMismatch.
func (in AppendInput) Validate() error {
	c := in.Checkpoint
	if c == nil {
		return errorf(CodeInvalidEntry, "append: nil checkpoint")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if in.ExpectedHead != "" {
		if err := ValidateID("expected head", in.ExpectedHead); err != nil {
			return err
		}
	}
	if c.ParentID != in.ExpectedHead {
		return errorf(CodeParentMismatch, "checkpoint %q has parent %q, expected head is %q", c.ID, c.ParentID, in.ExpectedHead)
	}
	return nil
}

// DeleteHeadInput is the argument of Store.DeleteHead and
// Store.DeleteCheckpoint; its JSON is that of the contract's deleteHead
// argument.
type DeleteHeadInput struct {
	ThreadID     string `json:"threadId"`
	CheckpointID string `json:"checkpointId"`
	Writer       Writer `json:"writer"`
}

// Validate checks the ids of in; it returns an *Error with CodeInvalidID.
func (in DeleteHeadInput) Validate() error {
	if err := ValidateID("thread id", in.ThreadID); err != nil {
		return err
	}
	return ValidateID("checkpoint id", in.CheckpointID)
}

// ForkInput is the argument of Store.ForkFromCheckpoint; its JSON is the
// contract's SandboxCheckpointForkInput (MarshalJSON).
type ForkInput struct {
	SourceThreadID          string
	SourceCheckpointID      string
	DestinationThreadID     string
	DestinationCheckpointID string
	// CreatedAt of the fork-root; the store's clock when zero. Kept to the
	// millisecond, as every checkpoint time is (TruncateTime).
	CreatedAt time.Time
	Writer    Writer
}

// Validate checks the four ids of in; it returns an *Error with CodeInvalidID.
func (in ForkInput) Validate() error {
	for _, f := range []struct{ what, id string }{
		{"source thread id", in.SourceThreadID},
		{"source checkpoint id", in.SourceCheckpointID},
		{"destination thread id", in.DestinationThreadID},
		{"destination checkpoint id", in.DestinationCheckpointID},
	} {
		if err := ValidateID(f.what, f.id); err != nil {
			return err
		}
	}
	return nil
}

// BlobRef is one line of ListBlobReferences.
type BlobRef struct {
	Key        string `json:"key"`
	References int    `json:"references"`
}

// Writer identifies a lease holder (SandboxCheckpointWriter). Stores compare
// all three fields with the thread's live lease.
type Writer struct {
	ThreadID   string `json:"threadId"`
	OwnerToken string `json:"ownerToken"`
	Fence      int64  `json:"fence"`
}

// Options configure a store. The zero value is valid.
type Options struct {
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// LeaseDuration is how long a lease lives without renewal; 30s when zero.
	LeaseDuration time.Duration
	// RenewAfter is when a holder should renew; LeaseDuration/3 when zero.
	RenewAfter time.Duration
}

// Default lease timings.
const (
	DefaultLeaseDuration = 30 * time.Second
)

// WithDefaults returns o with zero fields filled in.
func (o Options) WithDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewAfter <= 0 || o.RenewAfter > o.LeaseDuration {
		o.RenewAfter = o.LeaseDuration / 3
	}
	return o
}

// LeaseBackend is what a Lease calls back into; implementations provide it.
type LeaseBackend interface {
	// RenewLease extends w's live lease and returns its new expiry, or an error
	// wrapping ErrWriterLost when w no longer holds it.
	RenewLease(ctx context.Context, w Writer) (time.Time, error)
	// ReleaseLease ends w's lease, or returns an error wrapping ErrWriterLost
	// when w no longer holds it.
	ReleaseLease(ctx context.Context, w Writer) error
}

// Lease is a thread's writer lease (SandboxCheckpointWriterLease). Pass
// Lease.Writer to the writes it guards. Safe for concurrent use.
type Lease struct {
	Writer
	// RenewAfter is how long after acquiring or renewing the holder should renew.
	RenewAfter time.Duration

	backend LeaseBackend

	mu        sync.Mutex
	expiresAt time.Time
}

// NewLease is called by implementations to hand out a lease.
func NewLease(w Writer, expiresAt time.Time, renewAfter time.Duration, b LeaseBackend) *Lease {
	return &Lease{Writer: w, RenewAfter: renewAfter, backend: b, expiresAt: expiresAt}
}

// ExpiresAt returns when the lease ends unless renewed.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// Renew extends the lease. It returns an error wrapping ErrWriterLost when the
// lease expired or was superseded; the holder must then stop writing.
func (l *Lease) Renew(ctx context.Context) (time.Time, error) {
	t, err := l.backend.RenewLease(ctx, l.Writer)
	if err != nil {
		return time.Time{}, err
	}
	l.mu.Lock()
	l.expiresAt = t
	l.mu.Unlock()
	return t, nil
}

// Release ends the lease so another writer can acquire the thread at once. It
// returns an error wrapping ErrWriterLost when the lease was already lost.
func (l *Lease) Release(ctx context.Context) error {
	return l.backend.ReleaseLease(ctx, l.Writer)
}

// NewToken returns a random owner token (128 bits, hex).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24).
	return hex.EncodeToString(b[:])
}

// Normalize returns t as stores keep a lease's expiry: UTC, no monotonic
// reading, nanosecond precision. Checkpoint times are kept to the millisecond
// instead (TruncateTime).
func Normalize(t time.Time) time.Time {
	return time.Unix(0, t.UnixNano()).UTC()
}

// ForkRoot builds the fork-root that ForkFromCheckpoint stores: a copy of src
// in in.DestinationThreadID with id in.DestinationCheckpointID, no parent,
// Reason ReasonForkRoot and ForkedFrom src.ID. now is used when in.CreatedAt
// is zero.
func ForkRoot(src *Checkpoint, in ForkInput, now time.Time) *Checkpoint {
	c := src.Clone()
	c.ID = in.DestinationCheckpointID
	c.ThreadID = in.DestinationThreadID
	c.ParentID = ""
	c.Reason = ReasonForkRoot
	c.ForkedFrom = src.ID
	c.CreatedAt = in.CreatedAt
	c.Stamp(now)
	return c
}
