package checkpoints

import (
	"context"
	"fmt"
	"time"
)

// BlobInfo describes one stored blob for GC.
type BlobInfo struct {
	Key string
	// ModTime is when the blob was last written or re-put; GC spares young blobs.
	ModTime time.Time
	Size    int64
}

// BlobStore is the part of a blob store GC needs. Implementations are safe
// for concurrent use; Delete of a missing key is not an error.
type BlobStore interface {
	List(ctx context.Context) ([]BlobInfo, error)
	Delete(ctx context.Context, key string) error
}

// BlobStatter is implemented by blob stores that can read one blob's info
// again. GC then checks each candidate right before deleting it and spares
// it when it was written again since the listing (a capture on another host
// stored the same content, and will reference it).
type BlobStatter interface {
	// Stat returns the blob's info, or an error (any error spares the blob).
	Stat(ctx context.Context, key string) (BlobInfo, error)
}

// GCOptions configure GC. The zero value deletes every unreferenced blob.
type GCOptions struct {
	// MinAge spares blobs written less than MinAge before GC read the
	// references, which a writer in another process may be about to
	// reference (it put the blob, but has not appended its checkpoint yet).
	// It must cover the longest capture, from its first put to its append,
	// plus the clock skew between hosts and the blob store. Zero is safe only
	// when no capture runs concurrently with GC.
	MinAge time.Duration
	// Now is the clock for MinAge; time.Now when nil.
	Now func() time.Time
}

// GCStats report what GC did.
type GCStats struct {
	Scanned      int
	Deleted      int
	DeletedBytes int64
	// Spared counts unreferenced blobs kept because they are younger than MinAge.
	Spared int
}

// GC deletes every blob in blobs that no checkpoint in s references and that
// was written more than MinAge before the references were read. It reads the
// references first and the blob list second, so a blob put after the
// reference read is seen without a reference: MinAge, counted from before
// the reference read however long the listing takes, guards it. When blobs
// is a BlobStatter each candidate is checked again right before it is
// deleted.
func GC(ctx context.Context, s LineageStore, blobs BlobStore, opts GCOptions) (GCStats, error) {
	var st GCStats
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cutoff := opts.Now().Add(-opts.MinAge)
	refs, err := s.ListBlobReferences(ctx)
	if err != nil {
		return st, fmt.Errorf("gc: list references: %w", err)
	}
	live := make(map[string]bool, len(refs))
	for _, r := range refs {
		live[r.Key] = true
	}
	infos, err := blobs.List(ctx)
	if err != nil {
		return st, fmt.Errorf("gc: list blobs: %w", err)
	}
	statter, _ := blobs.(BlobStatter)
	for _, b := range infos {
		st.Scanned++
		if live[b.Key] {
			continue
		}
		if opts.MinAge > 0 && b.ModTime.After(cutoff) {
			st.Spared++
			continue
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if statter != nil && opts.MinAge > 0 {
			if now, err := statter.Stat(ctx, b.Key); err != nil || now.ModTime.After(cutoff) {
				st.Spared++
				continue
			}
		}
		if err := blobs.Delete(ctx, b.Key); err != nil {
			return st, fmt.Errorf("gc: delete %s: %w", b.Key, err)
		}
		st.Deleted++
		st.DeletedBytes += b.Size
	}
	return st, nil
}
