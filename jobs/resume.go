package jobs

import (
	"context"

	alineo "github.com/alineo-labs/alineo"
)

// ClientResume returns the SDK's resume for client: alineo.Client.Resume with
// the checkpoint's session name and tag. The client's ledger must answer
// GetSandboxDetails for the session (a read model, or one derived from the
// stream) and ReadAll for its history.
func ClientResume(client *alineo.Client) ResumeFunc {
	return func(ctx context.Context, cp Checkpoint) (*alineo.Sandbox, error) {
		return client.Resume(ctx, cp.SandboxID, alineo.ResumeOptions{Name: cp.Name, Tag: cp.Tag})
	}
}
