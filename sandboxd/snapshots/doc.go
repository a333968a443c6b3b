// Package snapshots stores sandbox filesystem snapshots for sandboxd as
// content-addressed blobs plus a manifest.
//
// BlobStore keeps file contents in a gocloud.dev/blob bucket, one object per
// sha256 key (sha256/k[:2]/k). The default is a file:// store: a directory
// holding exactly that layout, each blob a read-only file written atomically
// (temp file, fsync, rename), so a blob is either whole or absent. The same
// URLs open a bucket that several hosts share: s3:// (AWS or any S3-compatible
// store), gs:// and azblob://. Every read is checked against the key, and a
// mismatch is a *CorruptBlobError; so is every write: a blob of at most 16 MiB
// goes to S3 in one PutObject signed with its key, which the server checks,
// and any other write is hashed again as it goes and aborted on a mismatch
// (ErrCorruptBlob: the file changed after it was hashed). A remote store keeps what it reads in a
// local cache, bounded in bytes, so restoring on the host that read a blob
// before costs no download.
//
// Capture walks a directory tree (a sandbox's overlay upper dir or its merged
// root) into checkpoint entries, storing each regular file as a blob
// (several at once, while the walk goes on) and re-using the previous checkpoint's blob when a file's size, mtime and mode
// are unchanged, so a second checkpoint of a large workspace hashes and stores
// only what changed. A sparse file's holes (SEEK_DATA, SEEK_HOLE) are
// recorded in its entry and neither read nor stored, and a capture whose tree
// takes more disk than CaptureOptions.MaxBytes (allocated blocks, each name of
// a hard link counted) fails with a *QuotaError. Restore recreates a tree
// from entries, copying several files at once and leaving holes unwritten.
// Manager ties the three to a checkpoints.Store: one writer lease per thread,
// compare-and-set appends, deletion and garbage collection. RecordStore keeps
// sandboxd's record of each API snapshot, one file each, written whole and
// flushed on demand.
//
// A snapshot stores its blobs first and appends its checkpoint last, so one
// that fails midway (a bucket outage) leaves no checkpoint, only unreferenced
// blobs for garbage collection. Garbage collection is safe across hosts
// sharing a checkpoint store and a bucket: a blob is deleted only when no
// checkpoint references it and it was written longer ago than a grace period
// (ManagerConfig.GCMinAge) that covers the captures in flight; storing content
// that is already there refreshes an old blob (BlobConfig.RefreshAfter) so the
// grace period counts from then; and a capture checks after its append that
// the blobs it stored survived the last instants of a concurrent collection.
//
// Restore copies blobs rather than hard-linking them: a sandbox writes into its
// restored files in place, which through a hard link would corrupt the blob and
// every checkpoint sharing it. A blob read from the local cache is copied with
// copy_file_range, which reflinks on filesystems that support it (btrfs, XFS).
//
// Of this module it imports checkpoints only, and gocloud.dev/blob with its file, s3, gcs
// and azure drivers (the last two can be left out with the build tags
// alineo_nogcs and alineo_noazure), the AWS SDK's S3 client that s3blob is
// built on, golang.org/x/sync, golang.org/x/sys/unix and the standard library;
// it must not import the rest of sandboxd.
package snapshots
