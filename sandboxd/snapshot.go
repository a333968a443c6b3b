package sandboxd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/sandboxd/sandboxinit"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
)

// Snapshot storage under DataDir/snapshots: the checkpoint lineage in a SQLite
// file, file contents in a content-addressed blob directory, and one JSON
// record per API snapshot (its name, source, image and state, including the
// Creating and Failed states the checkpoint store never holds).
const (
	snapshotsDir     = "snapshots"
	snapshotDB       = "checkpoints.db"
	snapshotBlobsDir = "blobs"
	snapshotRecsDir  = "records"
)

// Snapshot layouts: what a snapshot's tree is, so that it is only restored
// into a sandbox of the same kind.
const (
	layoutOverlay = "overlay" // the layers directory: upper and hostup/<dir>
	layoutPlain   = "plain"   // the root directory of a NoIsolation sandbox
)

// Bounds on snapshot work: captures running at once (each reads and hashes a
// whole tree) and snapshots Creating at once (the rest wait for a capture
// slot); a create beyond the latter gets 409.
const (
	maxCaptures      = 2
	maxCreatingSnaps = 64
)

// readyMessage is the status message of a Ready snapshot: the files and bytes
// it holds, the bytes it read (files unchanged since the previous snapshot of
// the lineage are not read) and the bytes it stored (content the blob store
// did not hold yet).
const readyMessage = "%d files, %d bytes; %d bytes read, %d bytes stored"

// defaultSnapshotEntrypoint is the entrypoint of a sandbox created from a
// snapshot without one, as the protocol says.
var defaultSnapshotEntrypoint = sandboxinit.IdleEntrypoint()

// snapRecord is what the server persists per API snapshot.
type snapRecord struct {
	Snapshot
	// Image is the image name of the source sandbox's lower layer.
	Image string `json:"image"`
	// ImageDigest is the manifest digest of that image when it was pulled
	// from a registry: a sandbox created from the snapshot gets that exact
	// image, pulled again by digest if its layers are gone.
	ImageDigest string `json:"imageDigest,omitempty"`
	Layout      string `json:"layout"`
	// Seq orders snapshots created in the same millisecond.
	Seq int64 `json:"seq"`
	// done is closed once a capture started by this server has ended (nil
	// for a record loaded from disk).
	done chan struct{}
	// disk orders the writes of the record's file; shared by the record's
	// copies.
	disk *recordDisk
}

func (r *snapRecord) setStatus(st SnapshotState, reason, msg string) {
	now := sandboxTime(time.Now())
	r.Status = SnapshotStatus{State: st, Reason: reason, Message: msg, LastTransitionAt: &now}
}

// snapStore is the server's snapshots: their storage, their records and
// their captures.
type snapStore struct {
	s     *Server
	db    checkpoints.Store
	blobs *snapshots.BlobStore
	mgr   *snapshots.Manager
	recs  *snapshots.RecordStore
	kick  chan struct{} // wakes the GC loop; buffered 1, so requests coalesce
	// slots holds a token per running capture.
	slots chan struct{}

	// hook, if set (tests only), runs before each capture starts.
	hook atomic.Pointer[func(snapshotID string)]
	// recordHook, if set (tests only), runs before the record of a
	// capture's outcome is written, once the outcome is known.
	recordHook atomic.Pointer[func(snapshotID string)]

	mu    sync.Mutex
	snaps map[string]*snapRecord
	seq   int64
}

// openSnapshots opens DataDir/snapshots of s and loads its records. A
// snapshot left Creating by an earlier run becomes Ready if its checkpoint
// was written, else Failed; one left Deleting is deleted.
func openSnapshots(ctx context.Context, s *Server) (*snapStore, error) {
	dir := filepath.Join(s.dataDir, snapshotsDir)
	recs, err := snapshots.OpenRecordStore(filepath.Join(dir, snapshotRecsDir), snapshots.RecordConfig{Sync: syncFile})
	if err != nil {
		return nil, fmt.Errorf("sandboxd: snapshots: %w", err)
	}
	db, blobs, err := openShared(ctx, s.cfg, filepath.Join(dir, snapshotDB), filepath.Join(dir, snapshotBlobsDir), filepath.Join(dir, "blobcache"))
	if err != nil {
		return nil, fmt.Errorf("sandboxd: snapshots: %w", err)
	}
	ss := &snapStore{
		s:     s,
		db:    db,
		blobs: blobs,
		mgr:   snapshots.NewManager(db, blobs, snapshots.ManagerConfig{Logger: s.log, NewID: func() string { return "ckpt-" + newID() }}),
		recs:  recs,
		kick:  make(chan struct{}, 1),
		slots: make(chan struct{}, maxCaptures),
		snaps: map[string]*snapRecord{},
	}
	ids, err := recs.IDs()
	if err != nil {
		db.Close()
		blobs.Close()
		return nil, fmt.Errorf("sandboxd: snapshots: %w", err)
	}
	for _, name := range ids {
		b, err := recs.Get(name)
		r := snapRecord{disk: new(recordDisk)}
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil || r.ID != name {
			s.log.Warn("sandboxd: skipping unreadable snapshot record", "file", name+".json", "err", err)
			continue
		}
		switch r.Status.State {
		case SnapshotCreating:
			if _, err := db.Get(ctx, r.ID); err == nil {
				r.setStatus(SnapshotReady, ReasonSnapshotReady, "completed before sandboxd restarted")
			} else {
				r.setStatus(SnapshotFailed, ReasonRestart, "sandboxd restarted during the capture")
			}
			ss.persistSnapshot(&r)
		case SnapshotDeleting:
			if err := ss.dropSnapshot(ctx, &r); err != nil {
				s.log.Warn("sandboxd: finish deleting a snapshot", "id", r.ID, "err", err)
			}
			continue
		}
		ss.snaps[r.ID] = &r
		ss.seq = max(ss.seq, r.Seq)
	}
	ss.kickGC()
	return ss, nil
}

// syncHook, when set, sees the path of every file and directory syncFile
// flushes (tests).
var syncHook atomic.Pointer[func(path string)]

// syncFile flushes f (a file or a directory) to its disk: the records'
// RecordConfig.Sync.
func syncFile(f *os.File) error {
	if h := syncHook.Load(); h != nil {
		(*h)(f.Name())
	}
	return f.Sync()
}

// snapVersion encodes r as the next version of its file. The caller holds
// snapStore.mu (or nothing else writes r yet): versions are numbered in the
// order of the states they hold.
func snapVersion(r *snapRecord) recordVersion {
	b, err := json.Marshal(r)
	if err != nil {
		err = fmt.Errorf("save snapshot %s: %w", r.ID, err)
	}
	return r.disk.next(r.ID, b, err)
}

// writeSnapshot writes version v of r's record atomically unless a later
// version is on disk or the record was removed; durable also flushes the
// file and its directory to disk before it returns.
func (ss *snapStore) writeSnapshot(v recordVersion, r *snapRecord, durable bool) error {
	return r.disk.write(v, func(id string, b []byte) error { return ss.recs.Put(id, b, durable) })
}

// persistSnapshot writes r, not synced: what a record later than the
// Creating one says, a restart can tell again (a Creating record whose
// capture is in the manifest database is Ready, see openSnapshots).
func (ss *snapStore) persistSnapshot(r *snapRecord) { ss.persistVersion(r, snapVersion(r)) }

// persistVersion writes version v of r's record, not synced (see
// persistSnapshot), and logs a failure.
func (ss *snapStore) persistVersion(r *snapRecord, v recordVersion) {
	if err := ss.writeSnapshot(v, r, false); err != nil {
		ss.s.log.Error("sandboxd: persist snapshot record", "id", v.id, "err", err)
	}
}

// captureRoot is the directory a snapshot of sandbox id captures and a
// sandbox created from a snapshot is restored into, with its layout.
func (ss *snapStore) captureRoot(id string) (string, string) {
	if ss.s.cfg.NoIsolation {
		return ss.s.rt.LayersDir(id), layoutPlain
	}
	return ss.s.rt.LayersDir(id), layoutOverlay
}

// createSnapshot records a Creating snapshot of a Running sandbox and captures
// it in the background. The Creating record is on disk before it returns
// (flushed, outside the server's locks): after a power loss, a snapshot whose
// capture the manifest database holds is found again from it, where a record
// lost with the page cache would leave the snapshot unknown although a
// ledger may name it.
func (ss *snapStore) createSnapshot(sandboxID, name string) (Snapshot, <-chan struct{}, error) {
	sb, err := ss.s.get(sandboxID)
	if err != nil {
		return Snapshot{}, nil, err
	}
	sb.mu.Lock()
	st, img, digest := sb.rec.Status.State, sb.rec.imageURI(), sb.rec.ImageDigest
	sb.mu.Unlock()
	if st != StateRunning {
		return Snapshot{}, nil, &StateError{SandboxID: sandboxID, Op: "snapshot", State: st}
	}
	_, layout := ss.captureRoot(sandboxID)
	r := &snapRecord{
		Snapshot:    Snapshot{ID: "snap-" + newID(), SandboxID: sandboxID, Name: name, CreatedAt: sandboxTime(time.Now())},
		Image:       img,
		ImageDigest: digest,
		Layout:      layout,
		done:        make(chan struct{}),
		disk:        new(recordDisk),
	}
	r.setStatus(SnapshotCreating, ReasonSnapshotAccepted, "capturing the sandbox's filesystem")

	ss.s.mu.Lock()
	if ss.s.closed {
		ss.s.mu.Unlock()
		return Snapshot{}, nil, ErrClosed
	}
	ss.mu.Lock()
	creating := 0
	for _, o := range ss.snaps {
		if o.Status.State == SnapshotCreating {
			creating++
		}
	}
	if creating >= maxCreatingSnaps {
		ss.mu.Unlock()
		ss.s.mu.Unlock()
		return Snapshot{}, nil, fmt.Errorf("%w: %d snapshots are being created, the maximum", ErrConflict, creating)
	}
	ss.seq++
	r.Seq = ss.seq
	ss.snaps[r.ID] = r // Creating: counted above, refused by a delete
	out := r.Snapshot
	ss.mu.Unlock()
	ss.s.bg.Add(1)
	ss.s.mu.Unlock()
	if err := ss.writeSnapshot(snapVersion(r), r, true); err != nil { // nothing else writes r yet
		ss.mu.Lock()
		delete(ss.snaps, r.ID)
		ss.mu.Unlock()
		ss.s.bg.Done()
		return Snapshot{}, nil, err
	}
	go func() {
		defer ss.s.bg.Done()
		ss.capture(sb, r)
	}()
	return out, r.done, nil
}

// capture takes snapshot r of sb, sets the outcome, closes r.done, and then
// writes the record, not synced: the answer that waits for the outcome
// (Prefer: wait) does not wait for the disk (the write took a millisecond,
// a quarter of a small snapshot's time), and a restart tells a Creating
// record whose capture the manifest database holds as Ready (openSnapshots).
func (ss *snapStore) capture(sb *sandbox, r *snapRecord) {
	ctx, cancel := ss.s.untilStop(30 * time.Minute)
	defer cancel()
	id, thread, name := r.ID, r.SandboxID, r.Name // set once, at creation
	if h := ss.hook.Load(); h != nil {
		(*h)(id)
	}
	root, _ := ss.captureRoot(thread)
	sb.mu.Lock()
	ids := ss.idRange(&sb.rec) // set at creation
	sb.mu.Unlock()
	start := time.Now()
	var st snapshots.CaptureStats
	var err error
	select {
	case ss.slots <- struct{}{}:
		var arts []checkpoints.Artifact
		if arts, err = ss.recordArtifacts(ctx, r); err != nil {
			<-ss.slots
			break
		}
		_, st, err = ss.mgr.Snapshot(ctx, snapshots.SnapshotInput{
			Artifacts: arts,
			ThreadID:  thread, Root: root, ID: id, Label: name, MaxBytes: ss.s.cfg.DiskQuota, // a restore must fit the disk
			Freeze: func(ctx context.Context) (func(), error) { return ss.freezeForSnapshot(ctx, sb) },
			IDs:    ids,
		})
		<-ss.slots
	case <-ctx.Done():
		err = fmt.Errorf("wait for a capture slot: %w", ctx.Err())
	}
	took := time.Since(start)
	ss.s.cfg.Metrics.snapshotOp(snapOpCapture, err)
	ss.mu.Lock()
	if err != nil {
		r.setStatus(SnapshotFailed, ReasonSnapshotFailed, ss.s.public(err.Error()))
	} else {
		r.setStatus(SnapshotReady, ReasonSnapshotReady, fmt.Sprintf(readyMessage, st.Files, st.Bytes, st.HashedBytes, st.StoredBytes))
	}
	v := snapVersion(r)
	ss.mu.Unlock()
	close(r.done)
	if err != nil {
		ss.s.log.Warn("sandboxd: snapshot failed", "id", id, "sandbox", thread, "err", err)
	} else {
		ss.s.log.Info("sandboxd: snapshot ready", "id", id, "sandbox", thread, "files", st.Files, "bytes", st.Bytes,
			"hashed_bytes", st.HashedBytes, "stored_bytes", st.StoredBytes, "took", took)
	}
	if h := ss.recordHook.Load(); h != nil {
		(*h)(id)
	}
	ss.persistVersion(r, v)
}

// freezeForSnapshot freezes sb for the capture and holds its lifecycle lock
// until the returned thaw, so that no pause, resume or stop interleaves with
// the capture. A paused sandbox is captured as it is.
func (ss *snapStore) freezeForSnapshot(ctx context.Context, sb *sandbox) (func(), error) {
	sb.op.Lock()
	sb.mu.Lock()
	st, p, id := sb.rec.Status.State, sb.proc, sb.rec.ID
	sb.mu.Unlock()
	switch {
	case p == nil:
	case st == StatePaused || st == StateResuming:
		return sb.op.Unlock, nil
	case st == StateRunning || st == StatePausing:
		if err := ss.s.rt.Freeze(ctx, p); err != nil {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = ss.s.rt.Thaw(tctx, p)
			cancel()
			sb.op.Unlock()
			return nil, err
		}
		return func() {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := ss.s.rt.Thaw(tctx, p); err != nil {
				ss.s.log.Error("sandboxd: thaw after snapshot", "id", id, "err", err)
			}
			sb.op.Unlock()
		}, nil
	}
	sb.op.Unlock()
	return nil, &StateError{SandboxID: id, Op: "snapshot", State: st}
}

// getSnapshot returns snapshot id.
func (ss *snapStore) getSnapshot(id string) (Snapshot, error) {
	r, err := ss.lookup(id)
	if err != nil {
		return Snapshot{}, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return r.Snapshot, nil
}

// readySnapshot returns a copy of the record of snapshot id, which must be
// Ready.
func (ss *snapStore) readySnapshot(id string) (snapRecord, error) {
	r, err := ss.lookup(id)
	if err != nil {
		return snapRecord{}, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if r.Status.State != SnapshotReady {
		return snapRecord{}, &SnapshotStateError{SnapshotID: id, Op: "restore", State: r.Status.State}
	}
	return *r, nil
}

// listSnapshots returns the snapshots matching the filters, oldest first.
func (ss *snapStore) listSnapshots(sandboxID string, states map[SnapshotState]bool) []Snapshot {
	ss.mu.Lock()
	var recs []snapRecord
	for _, r := range ss.snaps {
		if sandboxID != "" && r.SandboxID != sandboxID {
			continue
		}
		if len(states) > 0 && !states[r.Status.State] {
			continue
		}
		recs = append(recs, *r)
	}
	ss.mu.Unlock()
	if len(states) == 0 || states[SnapshotReady] {
		recs = ss.remoteList(sandboxID, recs)
	}
	sort.Slice(recs, func(i, j int) bool {
		a, b := recs[i], recs[j]
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.Before(b.CreatedAt)
		}
		return a.Seq < b.Seq
	})
	out := make([]Snapshot, len(recs))
	for i, r := range recs {
		out[i] = r.Snapshot
	}
	return out
}

// deleteSnapshot deletes a Ready or Failed snapshot; its blobs no other
// checkpoint references are collected in the background.
func (ss *snapStore) deleteSnapshot(ctx context.Context, id string) error {
	if _, err := ss.lookup(id); err != nil {
		return err
	}
	ss.mu.Lock()
	r, ok := ss.snaps[id]
	if !ok {
		ss.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrSnapshotNotFound, id)
	}
	if st := r.Status.State; st == SnapshotCreating || st == SnapshotDeleting {
		ss.mu.Unlock()
		return &SnapshotStateError{SnapshotID: id, Op: "delete", State: st}
	}
	prev := r.Status
	r.setStatus(SnapshotDeleting, ReasonSnapshotDeleting, "")
	ss.persistSnapshot(r)
	cp := *r
	ss.mu.Unlock()
	err := ss.dropSnapshot(ctx, &cp)
	ss.s.cfg.Metrics.snapshotOp(snapOpDelete, err)
	if err != nil {
		ss.mu.Lock()
		r.Status = prev
		ss.persistSnapshot(r)
		ss.mu.Unlock()
		return err
	}
	ss.mu.Lock()
	delete(ss.snaps, id)
	ss.mu.Unlock()
	ss.kickGC()
	return nil
}

// dropSnapshot deletes r's checkpoint (if it was written) and its record.
func (ss *snapStore) dropSnapshot(ctx context.Context, r *snapRecord) error {
	if err := ss.mgr.Delete(ctx, r.ID); err != nil && !errors.Is(err, checkpoints.ErrCheckpointNotFound) {
		return err
	}
	// A write of the record still to come (the outcome's, see capture) must
	// not bring the file back.
	return r.disk.drop(func() error { return ss.recs.Delete(r.ID) })
}

// restoreSnapshot fills the layers of a new sandbox from its snapshot before
// its overlay is mounted, and forks the snapshot into the sandbox's thread so
// that the sandbox's own snapshots store only what changed since.
func (ss *snapStore) restoreSnapshot(ctx context.Context, rec *record) error {
	snap, err := ss.readySnapshot(rec.SnapshotID)
	if err != nil {
		return err
	}
	dest, layout := ss.captureRoot(rec.ID)
	if snap.Layout != layout {
		return fmt.Errorf("snapshot %s holds a %s tree; this server runs %s sandboxes", snap.ID, snap.Layout, layout)
	}
	opts := snapshots.RestoreOptions{Whiteouts: snapshots.KeepWhiteouts, IDs: ss.idRange(rec)}
	if opts.IDs.Base != 0 {
		opts.IDs.Legacy = IDMapHost
	}
	if err := ss.mgr.Restore(ctx, snap.ID, dest, opts); err != nil {
		return err
	}
	if layout == layoutOverlay {
		if err := ss.markOpaque(ctx, snap.ID, dest); err != nil {
			return err
		}
	}
	if _, err := ss.mgr.Fork(ctx, snap.ID, rec.ID, ""); err != nil {
		ss.s.log.Warn("sandboxd: fork snapshot into the new sandbox's lineage; its snapshots will store everything again", "snapshot", snap.ID, "sandbox", rec.ID, "err", err)
	}
	return nil
}

// markOpaque marks the opaque directories of restored checkpoint id under
// dest with user.overlay.opaque too: Restore writes the trusted.* form, which
// the userxattr overlay a sandbox mounts in its user namespace does not read.
func (ss *snapStore) markOpaque(ctx context.Context, id, dest string) error {
	c, err := ss.db.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("read snapshot %s: %w", id, err)
	}
	for _, e := range c.Files {
		if e.Kind != checkpoints.KindDir || !e.Opaque {
			continue
		}
		p := filepath.Join(dest, filepath.FromSlash(e.Path))
		if err := unix.Lsetxattr(p, "user.overlay.opaque", []byte("y"), 0); err != nil {
			return fmt.Errorf("mark %s opaque: %w", e.Path, err)
		}
	}
	return nil
}

// dropLineage deletes the checkpoints of a forgotten sandbox's thread that
// are no API snapshot (the fork-root of a sandbox created from a snapshot).
func (ss *snapStore) dropLineage(ctx context.Context, id string) {
	cps, err := ss.db.List(ctx, id)
	if err != nil {
		ss.s.log.Warn("sandboxd: list the checkpoints of a forgotten sandbox", "id", id, "err", err)
		return
	}
	dropped := false
	for _, c := range cps {
		ss.mu.Lock()
		_, api := ss.snaps[c.ID]
		ss.mu.Unlock()
		if api {
			continue
		}
		if err := ss.mgr.Delete(ctx, c.ID); err != nil && !errors.Is(err, checkpoints.ErrCheckpointNotFound) {
			ss.s.log.Warn("sandboxd: delete a forgotten sandbox's checkpoint", "id", id, "checkpoint", c.ID, "err", err)
			continue
		}
		dropped = true
	}
	if dropped {
		ss.kickGC()
	}
}

func (ss *snapStore) kickGC() {
	select {
	case ss.kick <- struct{}{}:
	default: // a collection is already due
	}
}

// gcLoop deletes unreferenced blobs whenever kicked, until the server stops.
func (ss *snapStore) gcLoop() {
	defer ss.s.bg.Done()
	for {
		select {
		case <-ss.s.stop:
			return
		case <-ss.kick:
		}
		ctx, cancel := ss.s.untilStop(5 * time.Minute)
		st, err := ss.mgr.GC(ctx)
		cancel()
		if err != nil {
			ss.s.log.Warn("sandboxd: snapshot blob collection", "err", err)
			continue
		}
		ss.s.log.Debug("sandboxd: snapshot blob collection", "stats", fmt.Sprintf("%+v", st))
	}
}
