//go:build !alineo_noazure

package snapshots

// azblob:// URLs (Azure Blob Storage). Building with -tags alineo_noazure
// leaves the driver out (about 12 MB of a static binary).
import _ "gocloud.dev/blob/azureblob"
