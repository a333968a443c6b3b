package jobs

import (
	"context"
	"time"

	alineo "github.com/alineo-labs/alineo"
)

// ClientResume returns the SDK's resume for client: alineo.Client.Resume with
// the checkpoint's session name and tag. With the name given, Resume needs
// only the client's ledger (a bus ledger alone will do), no read model.
func ClientResume(client *alineo.Client) ResumeFunc {
	return clientResume(client, nil, 0)
}

// clientResume is ClientResume attaching md to the resumed sandbox on the
// server (Runner.Metadata) and giving it the time to live timeout
// (Runner.Timeout).
func clientResume(client *alineo.Client, md map[string]string, timeout time.Duration) ResumeFunc {
	return func(ctx context.Context, cp Checkpoint) (*alineo.Sandbox, error) {
		return client.Resume(ctx, cp.SandboxID, alineo.ResumeOptions{Name: cp.Name, Tag: cp.Tag, Metadata: md, Timeout: timeout})
	}
}
