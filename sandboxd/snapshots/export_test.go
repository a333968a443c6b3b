package snapshots

// Upload exposes upload to the external tests: it stores src's first size
// bytes as key's blob, checking that they hash to key.
var Upload = (*BlobStore).upload

// S3Put reports whether b uploads a small blob in one checked S3 request.
func S3Put(b *BlobStore) bool { return b.s3 != nil }
