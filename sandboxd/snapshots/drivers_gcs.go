//go:build !alineo_nogcs

package snapshots

// gs:// URLs (Google Cloud Storage). Building with -tags alineo_nogcs leaves
// the driver out (about 30 MB of a static binary).
import _ "gocloud.dev/blob/gcsblob"
