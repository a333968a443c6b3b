// Package snapshots stores sandbox filesystem snapshots for sandboxd as
// content-addressed blobs plus a manifest.
//
// BlobStore keeps file contents under a directory, one file per sha256 key,
// written atomically (temp file, fsync, rename), so a blob is either whole or
// absent. Capture walks a directory tree (a sandbox's overlay upper dir or its
// merged root) into checkpoint entries, storing each regular file as a blob and
// re-using the previous checkpoint's blob when a file's size, mtime and mode are
// unchanged, so a second checkpoint of a large workspace hashes and stores only
// what changed. Restore recreates a tree from entries. Manager ties the three to
// a checkpoints.Store: one writer lease per thread, compare-and-set appends,
// deletion and garbage collection. RecordStore keeps sandboxd's record of each
// API snapshot, one file each, written whole and flushed on demand.
//
// Restore copies blobs rather than hard-linking them: a sandbox writes into its
// restored files in place, which through a hard link would corrupt the blob and
// every checkpoint sharing it. The copy uses copy_file_range, which reflinks on
// filesystems that support it (btrfs, XFS), so it costs no data copy there.
//
// This package imports checkpoints, golang.org/x/sys/unix and the standard
// library; it must not import the rest of sandboxd.
package snapshots
