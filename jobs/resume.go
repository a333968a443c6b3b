package jobs

import (
	alineo "github.com/alineo-labs/alineo"
)

// ClientResume returns the SDK's resume for client (alineo.Client.Resume with
// the tag), or nil while the SDK cannot resume.
func ClientResume(client *alineo.Client) ResumeFunc {
	_ = client
	return nil
}

// CheckpointSupported reports whether the SDK's Sandbox can take checkpoints.
func CheckpointSupported() bool {
	_, ok := any((*alineo.Sandbox)(nil)).(checkpointer)
	return ok
}
