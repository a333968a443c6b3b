package snapshots

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/alineo-labs/alineo/checkpoints"
)

// ManagerConfig configures a Manager. The zero value is valid.
type ManagerConfig struct {
	// Logger receives lease-renewal failures; discarded when nil.
	Logger *slog.Logger
	// Now is the clock for checkpoint times; time.Now when nil.
	Now func() time.Time
	// NewID makes ids for snapshots created without one; "snap-" + 24 hex
	// digits when nil.
	NewID func() string
	// GCMinAge is passed to checkpoints.GC: the grace period that spares
	// unreferenced blobs written since, which a capture on another host may
	// be about to reference. Snapshots and GC of one Manager exclude each
	// other, so zero is safe with one Manager per file:// blob directory; set
	// it when several processes share the directory. With a remote blob
	// store (BlobStore.Remote), which hosts share, zero means
	// DefaultSharedGCMinAge. It must exceed the longest capture plus the
	// blob store's BlobConfig.RefreshAfter plus the clock skew between hosts
	// and the bucket, plus a second: S3 keeps modification times to the
	// second.
	GCMinAge time.Duration
	// RetryInterval is the first wait before acquiring a thread's writer lease
	// again after ErrWriterConflict (another process holds it); it doubles up to
	// 50 times as much. 5ms when zero. Snapshot retries until ctx is done.
	RetryInterval time.Duration
	// StoreOutage is how long Snapshot (and Retry) keeps trying while the
	// checkpoint store or a remote blob store cannot be reached (Unavailable:
	// a shared Postgres restarting, an S3 server down, a cut link), taking
	// the snapshot again from the start after a growing wait:
	// DefaultStoreOutage when zero, no retry when negative. A writer lease
	// whose renewal cannot reach the store is kept until it would expire.
	StoreOutage time.Duration
}

// DefaultStoreOutage is ManagerConfig.StoreOutage's default: longer than a
// database's restart or fail-over, shorter than a job step's patience.
const DefaultStoreOutage = 2 * time.Minute

// errCollected: a blob of a snapshot was collected before the snapshot's
// checkpoint referenced it.
var errCollected = errors.New("collected before the checkpoint referenced it")

// DefaultSharedGCMinAge is GCMinAge's default with a remote blob store.
const DefaultSharedGCMinAge = time.Hour

// Manager takes, restores and deletes snapshots of directory trees, keeping
// their lineage in a checkpoints.Store and their content in a BlobStore. Calls
// on one thread serialize (in this process by a lock, across processes by the
// thread's writer lease). Safe for concurrent use.
type Manager struct {
	store checkpoints.Store
	blobs *BlobStore
	cfg   ManagerConfig

	// gc is held shared by writers and exclusively by GC, so GC never sees a
	// blob that a capture has put but not yet referenced.
	gc sync.RWMutex

	mu      sync.Mutex
	threads map[string]*threadLock
}

type threadLock struct {
	ch   chan struct{} // holds a token while a writer of the thread runs
	refs int           // guarded by Manager.mu
}

// NewManager returns a Manager over store and blobs, which the caller opened
// (checkpoints/sqlite or checkpoints/postgres; OpenBlobStore or
// OpenBlobStoreURL) and closes after the Manager's last call. Hosts that
// share a snapshot lineage share both: one Postgres checkpoint store and one
// bucket.
func NewManager(store checkpoints.Store, blobs *BlobStore, cfg ManagerConfig) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewID == nil {
		cfg.NewID = func() string { return "snap-" + checkpoints.NewToken()[:24] }
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 5 * time.Millisecond
	}
	if cfg.GCMinAge == 0 && blobs.Remote() {
		cfg.GCMinAge = DefaultSharedGCMinAge
	}
	return &Manager{store: store, blobs: blobs, cfg: cfg, threads: map[string]*threadLock{}}
}

// Store returns the checkpoint store.
func (m *Manager) Store() checkpoints.Store { return m.store }

// Blobs returns the blob store.
func (m *Manager) Blobs() *BlobStore { return m.blobs }

// lockThread serializes this process's writers of thread, waiting at most
// until ctx is done; call the result to unlock.
func (m *Manager) lockThread(ctx context.Context, thread string) (func(), error) {
	m.mu.Lock()
	l := m.threads[thread]
	if l == nil {
		l = &threadLock{ch: make(chan struct{}, 1)}
		m.threads[thread] = l
	}
	l.refs++
	m.mu.Unlock()
	drop := func() {
		m.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(m.threads, thread)
		}
		m.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; drop() }, nil
	case <-ctx.Done():
		drop()
		return nil, fmt.Errorf("wait for another snapshot of %s: %w", thread, ctx.Err())
	}
}

// acquire takes thread's writer lease, waiting while another process holds it.
func (m *Manager) acquire(ctx context.Context, thread string) (*checkpoints.Lease, error) {
	wait := m.cfg.RetryInterval
	for {
		l, err := m.store.AcquireWriter(ctx, thread)
		if !errors.Is(err, checkpoints.ErrWriterConflict) {
			return l, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("acquire writer of %s: %w (last: %w)", thread, ctx.Err(), err)
		case <-t.C:
		}
		if wait < 50*m.cfg.RetryInterval {
			wait *= 2
		}
	}
}

// withLease runs fn holding thread's writer lease, renewing it in the
// background; fn's ctx is cancelled if the lease is lost.
func (m *Manager) withLease(ctx context.Context, thread string, fn func(ctx context.Context, w checkpoints.Writer) error) error {
	return m.withKeptLease(ctx, thread, nil, fn)
}

// withKeptLease is withLease for an attempt that may be followed by another
// (see snapshotRetrying): when fn and the lease's release both fail because
// the store is unavailable, the lease is left in *kept, still live in the
// store, and the next attempt renews it rather than waiting for it to
// expire. kept may be nil.
func (m *Manager) withKeptLease(ctx context.Context, thread string, kept **checkpoints.Lease, fn func(ctx context.Context, w checkpoints.Writer) error) error {
	unlock, err := m.lockThread(ctx, thread)
	if err != nil {
		return err
	}
	defer unlock()
	var lease *checkpoints.Lease
	if kept != nil && *kept != nil {
		lease, *kept = *kept, nil
		if _, err := lease.Renew(ctx); errors.Is(err, checkpoints.ErrUnavailable) {
			*kept = lease
			return err
		} else if err != nil {
			lease = nil // lost meanwhile: acquired anew
		}
	}
	if lease == nil {
		if lease, err = m.acquire(ctx, thread); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	every := lease.RenewAfter
	if every <= 0 {
		every = checkpoints.DefaultLeaseDuration / 3
	}
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := lease.Renew(ctx); err != nil {
					if ctx.Err() != nil {
						return // the snapshot ended or was cancelled meanwhile
					}
					if errors.Is(err, checkpoints.ErrUnavailable) && m.cfg.Now().Add(every/4).Before(lease.ExpiresAt()) {
						// The store is down for now; the lease holds until it
						// expires, and so may the capture.
						m.cfg.Logger.Warn("snapshot writer lease not renewed: the store is unavailable", "thread", thread, "fence", lease.Fence, "expires", lease.ExpiresAt(), "err", err)
						t.Reset(every / 4)
						continue
					}
					m.cfg.Logger.Warn("snapshot writer lease lost", "thread", thread, "fence", lease.Fence, "err", err)
					cancel(err)
					return
				}
				t.Reset(every)
			}
		}
	}()
	err = fn(ctx, lease.Writer)
	close(done)
	wg.Wait()
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = fmt.Errorf("%w (lease: %w)", err, cause)
	}
	cancel(nil)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	rerr := lease.Release(rctx)
	switch {
	case kept != nil && errors.Is(err, checkpoints.ErrUnavailable) && errors.Is(rerr, checkpoints.ErrUnavailable):
		*kept = lease
	case rerr != nil && err == nil && !errors.Is(rerr, checkpoints.ErrWriterLost):
		err = fmt.Errorf("release writer of %s: %w", thread, rerr)
	}
	return err
}

// SnapshotInput describes a snapshot to take.
type SnapshotInput struct {
	// ThreadID is the lineage the snapshot joins (sandboxd: the sandbox id).
	ThreadID string
	// Root is the directory to capture.
	Root string
	// ID is the new checkpoint's id; generated when empty.
	ID          string
	Label       string
	SourceRunID string
	// Reason defaults to named with a Label and automatic without.
	Reason checkpoints.Reason
	// MaxBytes bounds the disk the tree takes (CaptureOptions.MaxBytes):
	// past it the snapshot fails with an error wrapping a *QuotaError.
	MaxBytes int64
	// Freeze, if set, is called right before the capture (after the lease is
	// held and the head read) and the thaw it returns right after it, so a
	// sandbox is frozen only while its files are read. An error fails the
	// snapshot.
	Freeze func(ctx context.Context) (thaw func(), err error)
	// IDs is the range of host ids Root's files are owned by: the
	// checkpoint records the ids the sandbox sees (see IDRange).
	IDs IDRange
	// Artifacts are added to the checkpoint as they are (their blobs
	// stored already).
	Artifacts []checkpoints.Artifact
}

// Snapshot captures in.Root against the thread's head checkpoint and appends
// the result as the new head. It holds the thread's writer lease from before
// reading the head until after the append, so concurrent snapshots of one
// thread serialize and each one's parent is the previous one. The blobs are
// stored before the checkpoint is appended, so a snapshot that fails (a blob
// store outage) leaves no checkpoint. When blobs may be collected by another
// host, Snapshot checks after the append that the blobs it stored are still
// there; if a collector deleted one meanwhile (see checkStored) it removes
// the checkpoint and takes the snapshot once more. Errors are the
// store's (ErrInvalidID, ErrWriterLost, ...) or the capture's (*PathError).
func (m *Manager) Snapshot(ctx context.Context, in SnapshotInput) (*checkpoints.Checkpoint, CaptureStats, error) {
	var st CaptureStats
	if err := checkpoints.ValidateID("thread id", in.ThreadID); err != nil {
		return nil, st, err
	}
	if in.ID == "" {
		in.ID = m.cfg.NewID()
	}
	if err := checkpoints.ValidateID("snapshot id", in.ID); err != nil {
		return nil, st, err
	}
	if in.Reason == "" {
		in.Reason = checkpoints.ReasonAutomatic
		if in.Label != "" {
			in.Reason = checkpoints.ReasonNamed
		}
	}
	m.gc.RLock()
	defer m.gc.RUnlock()
	out, st, err := m.snapshotRetrying(ctx, in)
	if err != nil {
		return nil, st, fmt.Errorf("snapshot %s of %s: %w", in.ID, in.ThreadID, err)
	}
	got, err := m.store.Get(ctx, out.ID)
	if err != nil {
		return nil, st, err
	}
	return got, st, nil
}

// Retry runs fn, and again after a growing wait while it fails because a
// store is out of reach (Unavailable), for at most ManagerConfig.StoreOutage.
// Snapshot retries so; a caller retries so what it does along with one (a
// blob it puts for the snapshot's artifacts). fn must be safe to run twice.
// The error is fn's last, saying how long it was tried.
func (m *Manager) Retry(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	outage := backoff.NewExponentialBackOff()
	outage.InitialInterval = 100 * time.Millisecond
	outage.MaxInterval = 5 * time.Second
	outage.MaxElapsedTime = m.cfg.StoreOutage
	if outage.MaxElapsedTime == 0 {
		outage.MaxElapsedTime = DefaultStoreOutage
	}
	for {
		err := fn(ctx)
		if err == nil || !Unavailable(err) || m.cfg.StoreOutage < 0 {
			return err
		}
		wait := outage.NextBackOff()
		if wait == backoff.Stop {
			return fmt.Errorf("%w (tried for %s)", err, outage.GetElapsedTime().Round(time.Second))
		}
		m.cfg.Logger.Warn("a store is unavailable; trying again", "op", what, "in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (and then: %w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// snapshotRetrying takes the snapshot, again when an attempt failed in a
// way that another one can mend:
//   - a collector on another host deleted a blob this capture stored again,
//     in the instant between its last check and its delete (checkStored
//     removed the checkpoint): captured again, the blob is stored anew;
//   - a store could not be reached (Retry): an attempt reads the head,
//     captures and appends under in.ID from the start, and the blobs are
//     content-addressed, so trying again is harmless; an append that
//     committed but whose answer was lost is found by its id.
func (m *Manager) snapshotRetrying(ctx context.Context, in SnapshotInput) (*checkpoints.Checkpoint, CaptureStats, error) {
	var (
		out         *checkpoints.Checkpoint
		st          CaptureStats
		recollected bool
		attempts    int
		kept        *checkpoints.Lease // a live lease a failed attempt could not release
	)
	err := m.Retry(ctx, "snapshot "+in.ID, func(ctx context.Context) error {
		for {
			attempts++
			var err error
			out, st, err = m.snapshot(ctx, in, attempts > 1, &kept)
			if errors.Is(err, errCollected) && !recollected {
				recollected = true
				m.cfg.Logger.Warn("a blob of the snapshot was collected while it was taken; taking it again", "snapshot", in.ID, "thread", in.ThreadID, "err", err)
				continue
			}
			return err
		}
	})
	return out, st, err
}

// appended returns checkpoint in.ID when an earlier attempt appended it to
// in.ThreadID (its answer lost with the connection), or nil.
func (m *Manager) appended(ctx context.Context, in SnapshotInput) (*checkpoints.Checkpoint, error) {
	c, err := m.store.Get(ctx, in.ID)
	switch {
	case errors.Is(err, checkpoints.ErrCheckpointNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case c.ThreadID != in.ThreadID:
		return nil, checkpoints.Errorf(checkpoints.CodeDuplicateID, "checkpoint %q belongs to thread %q", in.ID, c.ThreadID)
	}
	m.cfg.Logger.Info("the snapshot was appended by an attempt whose answer was lost", "snapshot", in.ID, "thread", in.ThreadID)
	return c, nil
}

// snapshot is one attempt of Snapshot; retried says an earlier attempt may
// have appended the checkpoint already.
func (m *Manager) snapshot(ctx context.Context, in SnapshotInput, retried bool, kept **checkpoints.Lease) (*checkpoints.Checkpoint, CaptureStats, error) {
	var (
		out *checkpoints.Checkpoint
		st  CaptureStats
	)
	if retried {
		if c, err := m.appended(ctx, in); err != nil || c != nil {
			return c, st, err
		}
	}
	err := m.withKeptLease(ctx, in.ThreadID, kept, func(ctx context.Context, w checkpoints.Writer) error {
		head, err := m.store.Head(ctx, in.ThreadID)
		if err != nil {
			return err
		}
		var prev *checkpoints.Checkpoint
		if head != "" {
			if prev, err = m.store.Get(ctx, head); err != nil {
				return err
			}
		}
		thaw := func() {}
		if in.Freeze != nil {
			if thaw, err = in.Freeze(ctx); err != nil {
				return fmt.Errorf("freeze: %w", err)
			}
		}
		start := m.cfg.Now()
		entries, cst, err := Capture(ctx, in.Root, prev, m.blobs, CaptureOptions{MaxBytes: in.MaxBytes})
		thaw()
		st = cst
		if err != nil {
			return err
		}
		if in.IDs.Base != 0 {
			entries = shift(entries, in.IDs.recorded)
		}
		c := &checkpoints.Checkpoint{
			ID: in.ID, ThreadID: in.ThreadID, ParentID: head, CreatedAt: start,
			Reason: in.Reason, Label: in.Label, SourceRunID: in.SourceRunID, Files: entries,
			Artifacts: in.Artifacts,
		}
		if _, err := m.store.Append(ctx, checkpoints.AppendInput{Checkpoint: c, ExpectedHead: head, Writer: w}); err != nil {
			return err
		}
		if err := m.checkStored(ctx, c, prev, w); err != nil {
			return err
		}
		out = c
		return nil
	})
	return out, st, err
}

// checkStored makes sure, when blobs may be collected by another host, that
// every blob c stored (those prev does not reference, which may have been
// collected between its put and the append) is still there; otherwise it
// deletes c again and fails. The blobs of prev cannot be collected: prev
// references them and cannot be deleted while w holds the lease.
func (m *Manager) checkStored(ctx context.Context, c, prev *checkpoints.Checkpoint, w checkpoints.Writer) error {
	if m.cfg.GCMinAge == 0 && !m.blobs.Remote() {
		return nil // only this Manager collects, and not during a snapshot
	}
	old := map[string]bool{}
	if prev != nil {
		for _, k := range prev.BlobKeys() {
			old[k] = true
		}
	}
	for _, k := range c.BlobKeys() {
		if old[k] {
			continue
		}
		old[k] = true
		ok, err := m.blobs.Exists(ctx, k)
		if err == nil && !ok {
			err = fmt.Errorf("%w: %w: %s", errCollected, ErrBlobNotFound, k)
		}
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if derr := m.store.DeleteCheckpoint(rctx, checkpoints.DeleteHeadInput{ThreadID: c.ThreadID, CheckpointID: c.ID, Writer: w}); derr != nil {
				return fmt.Errorf("check blobs: %w (and remove the checkpoint: %w)", err, derr)
			}
			return fmt.Errorf("check blobs: %w", err)
		}
	}
	return nil
}

// Restore recreates checkpoint id's tree under dest (see Restore). An unknown
// id gives checkpoints.ErrCheckpointNotFound.
func (m *Manager) Restore(ctx context.Context, id, dest string, opts RestoreOptions) error {
	m.gc.RLock()
	defer m.gc.RUnlock()
	c, err := m.store.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	if err := Restore(ctx, c.Files, m.blobs, dest, opts); err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	return nil
}

// Fork copies checkpoint srcID into the empty thread dstThread as its
// fork-root with id dstID (generated when empty). The blobs are shared. Errors
// are the store's (ErrForkDestinationNotEmpty, ...).
func (m *Manager) Fork(ctx context.Context, srcID, dstThread, dstID string) (*checkpoints.Checkpoint, error) {
	src, err := m.store.Get(ctx, srcID)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", srcID, err)
	}
	if dstID == "" {
		dstID = m.cfg.NewID()
	}
	var out *checkpoints.Checkpoint
	err = m.withLease(ctx, dstThread, func(ctx context.Context, w checkpoints.Writer) error {
		out, err = m.store.ForkFromCheckpoint(ctx, checkpoints.ForkInput{
			SourceThreadID: src.ThreadID, SourceCheckpointID: srcID,
			DestinationThreadID: dstThread, DestinationCheckpointID: dstID,
			CreatedAt: m.cfg.Now(), Writer: w,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fork %s into %s: %w", srcID, dstThread, err)
	}
	return out, nil
}

// Delete removes checkpoint id from its thread (checkpoints.Store's
// DeleteCheckpoint: any checkpoint, not only the head; its children take its
// parent, and the head moves back if it was the head). An unknown id gives
// checkpoints.ErrCheckpointNotFound. Its blobs stay until GC.
func (m *Manager) Delete(ctx context.Context, id string) error {
	c, err := m.store.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	err = m.withLease(ctx, c.ThreadID, func(ctx context.Context, w checkpoints.Writer) error {
		return m.store.DeleteCheckpoint(ctx, checkpoints.DeleteHeadInput{ThreadID: c.ThreadID, CheckpointID: id, Writer: w})
	})
	if err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	return nil
}

// GC deletes the blobs no checkpoint references. It waits for running
// snapshots and restores of this Manager and blocks new ones meanwhile.
func (m *Manager) GC(ctx context.Context) (checkpoints.GCStats, error) {
	m.gc.Lock()
	defer m.gc.Unlock()
	return checkpoints.GC(ctx, m.store, m.blobs, checkpoints.GCOptions{MinAge: m.cfg.GCMinAge, Now: m.cfg.Now})
}
