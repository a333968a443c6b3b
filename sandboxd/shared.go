package sandboxd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/storeurl"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
)

// A fleet's sandboxds share one checkpoint store (Config.Checkpoints) and one
// blob store (Config.Blobs), so that a snapshot taken on one host is listed,
// read, restored, forked and deleted from every host, also after the host
// that took it is gone. Each capture then stores, beside its files, what a
// host needs to restore it and that a checkpoint does not say (the source's
// image and its digest, the tree's layout, the snapshot's name): the record
// artifact, a small JSON blob referenced by the checkpoint as an artifact, so
// it lives and is collected with it. A host that does not know a snapshot's
// id reads it from there; one whose local record names a checkpoint another
// host deleted forgets it.

// recordArtifact names the record artifact of a checkpoint.
const recordArtifact = "sandboxd-snapshot.json"

// sharedRecord is the record artifact's content.
type sharedRecord struct {
	ID          string    `json:"id"`
	SandboxID   string    `json:"sandboxId"`
	Name        string    `json:"name,omitempty"`
	Image       string    `json:"image"`
	ImageDigest string    `json:"imageDigest,omitempty"`
	Layout      string    `json:"layout"`
	CreatedAt   time.Time `json:"createdAt"`
}

// shared reports whether the checkpoint store is shared with other hosts.
func (ss *snapStore) shared() bool { return ss.s.cfg.Checkpoints != "" }

// recordArtifacts stores r's record artifact and returns the artifacts of
// its checkpoint: none unless the store is shared.
func (ss *snapStore) recordArtifacts(ctx context.Context, r *snapRecord) ([]checkpoints.Artifact, error) {
	if !ss.shared() {
		return nil, nil
	}
	b, err := json.Marshal(sharedRecord{ID: r.ID, SandboxID: r.SandboxID, Name: r.Name, Image: r.Image,
		ImageDigest: r.ImageDigest, Layout: r.Layout, CreatedAt: r.CreatedAt})
	if err != nil {
		return nil, err
	}
	var (
		key  string
		size int64
	)
	err = ss.mgr.Retry(ctx, "store the record of "+r.ID, func(ctx context.Context) (err error) {
		key, size, err = ss.blobs.Put(ctx, bytes.NewReader(b))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store the snapshot's record: %w", err)
	}
	return []checkpoints.Artifact{{ArtifactID: recordArtifact, Name: recordArtifact, MimeType: "application/json",
		Size: size, BlobKey: key, CreatedAt: r.CreatedAt}}, nil
}

// remote reads snapshot id from the shared store: a Ready record, or
// ErrSnapshotNotFound when no checkpoint of that id has a record artifact
// of its own (a fork's root copies its source's, under another id).
func (ss *snapStore) remote(ctx context.Context, id string) (*snapRecord, error) {
	c, err := ss.db.Get(ctx, id)
	if errors.Is(err, checkpoints.ErrCheckpointNotFound) || errors.Is(err, checkpoints.ErrInvalidID) {
		return nil, fmt.Errorf("%w: %s", ErrSnapshotNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	return ss.fromCheckpoint(ctx, c)
}

// fromCheckpoint reads c's record artifact into a Ready record.
func (ss *snapStore) fromCheckpoint(ctx context.Context, c *checkpoints.Checkpoint) (*snapRecord, error) {
	for _, a := range c.Artifacts {
		if a.ArtifactID != recordArtifact {
			continue
		}
		rd, err := ss.blobs.Open(ctx, a.BlobKey)
		if err != nil {
			return nil, fmt.Errorf("read snapshot %s: %w", c.ID, err)
		}
		b, err := io.ReadAll(io.LimitReader(rd, 1<<20))
		rd.Close()
		if err != nil {
			return nil, fmt.Errorf("read snapshot %s: %w", c.ID, err)
		}
		var sr sharedRecord
		if err := json.Unmarshal(b, &sr); err != nil {
			return nil, fmt.Errorf("read snapshot %s: record: %w", c.ID, err)
		}
		if sr.ID != c.ID {
			break // a fork's root: its source's record
		}
		r := &snapRecord{Snapshot: Snapshot{ID: sr.ID, SandboxID: sr.SandboxID, Name: sr.Name, CreatedAt: sr.CreatedAt},
			Image: sr.Image, ImageDigest: sr.ImageDigest, Layout: sr.Layout, disk: new(recordDisk)}
		r.setStatus(SnapshotReady, ReasonSnapshotReady, "taken by another host of the fleet")
		r.Status.LastTransitionAt = &r.CreatedAt
		return r, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrSnapshotNotFound, c.ID)
}

// lookup returns the record of snapshot id: the local one, or in a shared
// store the one read from it (kept in the index, not written here). A local
// Ready record whose checkpoint another host deleted is forgotten. ss.mu is
// not held.
func (ss *snapStore) lookup(id string) (*snapRecord, error) {
	ss.mu.Lock()
	r, ok := ss.snaps[id]
	ss.mu.Unlock()
	if !ss.shared() {
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrSnapshotNotFound, id)
		}
		return r, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if ok {
		ss.mu.Lock()
		ready := r.Status.State == SnapshotReady
		ss.mu.Unlock()
		if !ready {
			return r, nil
		}
		if _, err := ss.db.Get(ctx, id); !errors.Is(err, checkpoints.ErrCheckpointNotFound) {
			return r, nil // there (or the store does not answer: the error comes with the use)
		}
		ss.mu.Lock()
		delete(ss.snaps, id)
		ss.mu.Unlock()
		_ = r.disk.drop(func() error { return ss.recs.Delete(id) })
		return nil, fmt.Errorf("%w: %s (deleted by another host)", ErrSnapshotNotFound, id)
	}
	r, err := ss.remote(ctx, id)
	if err != nil {
		return nil, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if have, ok := ss.snaps[id]; ok {
		return have, nil
	}
	ss.seq++
	r.Seq = ss.seq
	ss.snaps[id] = r
	return r, nil
}

// remoteList adds to recs the Ready snapshots of sandboxID (every sandbox
// when empty) that the shared store holds and recs lacks.
func (ss *snapStore) remoteList(sandboxID string, recs []snapRecord) []snapRecord {
	if !ss.shared() {
		return recs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	have := map[string]bool{}
	for _, r := range recs {
		have[r.ID] = true
	}
	threads := []string{sandboxID}
	if sandboxID == "" {
		ts, err := ss.db.Threads(ctx)
		if err != nil {
			ss.s.log.Warn("sandboxd: list the shared snapshots", "err", err)
			return recs
		}
		threads = ts
	}
	for _, t := range threads {
		cps, err := ss.db.List(ctx, t)
		if err != nil {
			if !errors.Is(err, checkpoints.ErrInvalidID) {
				ss.s.log.Warn("sandboxd: list the shared snapshots", "sandbox", t, "err", err)
			}
			continue
		}
		for _, c := range cps {
			if have[c.ID] {
				continue
			}
			r, err := ss.fromCheckpoint(ctx, c)
			if err != nil {
				continue // not an API snapshot (a fork's root), or unreadable
			}
			recs = append(recs, *r)
		}
	}
	return recs
}

// openShared opens the checkpoint store and the blob store Config names (the
// SQLite file and the folder under dir by default).
func openShared(ctx context.Context, cfg Config, dbPath, blobDir, cacheDir string) (checkpoints.Store, *snapshots.BlobStore, error) {
	blobs, err := openBlobs(ctx, cfg, blobDir, cacheDir)
	if err != nil {
		return nil, nil, err
	}
	db, err := openCheckpoints(ctx, cfg.Checkpoints, dbPath)
	if err != nil {
		blobs.Close()
		return nil, nil, err
	}
	return db, blobs, nil
}

func openBlobs(ctx context.Context, cfg Config, dir, cacheDir string) (*snapshots.BlobStore, error) {
	if cfg.Blobs == "" {
		return snapshots.OpenBlobStore(dir, snapshots.BlobConfig{})
	}
	return snapshots.OpenBlobStoreURL(ctx, cfg.Blobs, snapshots.BlobConfig{CacheDir: cacheDir, CacheBytes: cfg.BlobCacheBytes})
}

func openCheckpoints(ctx context.Context, rawURL, dbPath string) (checkpoints.Store, error) {
	if rawURL == "" {
		rawURL = dbPath
	}
	return storeurl.Open(ctx, rawURL, checkpoints.Options{})
}
