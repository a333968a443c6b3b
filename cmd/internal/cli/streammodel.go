package cli

import (
	"context"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
)

// StreamReadModel is the read model of a worker without a database: it
// answers GetSandboxDetails from the ledger stream (all that Client.Resume
// needs besides the stream itself); lists, environments and writes return
// adapters.ErrNoReadModel. Set its Ledger before use.
type StreamReadModel struct {
	Ledger *bus.Ledger
}

var _ adapters.Store = (*StreamReadModel)(nil)

// GetSandboxDetails derives the session's details from its entries in the
// stream; nil when it has no sandbox.created.
func (m *StreamReadModel) GetSandboxDetails(ctx context.Context, name, sandboxID string) (*adapters.SandboxDetails, error) {
	es, err := m.Ledger.ReadAll(ctx, name, sandboxID)
	if err != nil {
		return nil, err
	}
	var d *adapters.SandboxDetails
	for _, e := range es {
		switch e.Event {
		case events.SandboxCreated:
			if d == nil {
				d = &adapters.SandboxDetails{Name: name, SandboxID: sandboxID, Status: adapters.StatusRunning, StartedAt: e.Ts, RunID: sandboxID}
				var p events.SandboxCreatedPayload
				if e.Decode(&p) == nil && p.RunID != "" {
					d.RunID = p.RunID
				}
			}
		case events.ExecCompleted:
			if d != nil {
				d.ExecCount++
			}
		case events.SandboxClosed:
			if d != nil {
				d.Status, d.CompletedAt = adapters.StatusCompleted, e.Ts
			}
		}
	}
	return d, nil
}

// ReadAll returns ErrNoReadModel: the stream is the only history.
func (m *StreamReadModel) ReadAll(context.Context, string, string) ([]events.Entry, error) {
	return nil, adapters.ErrNoReadModel
}

// LastCheckpoint returns ErrNoReadModel.
func (m *StreamReadModel) LastCheckpoint(context.Context, string, string) (*events.Entry, error) {
	return nil, adapters.ErrNoReadModel
}

// ListCheckpoints returns ErrNoReadModel.
func (m *StreamReadModel) ListCheckpoints(context.Context, string, string) ([]adapters.CheckpointInfo, error) {
	return nil, adapters.ErrNoReadModel
}

// ListSandboxDetails returns ErrNoReadModel.
func (m *StreamReadModel) ListSandboxDetails(context.Context, string, adapters.ListOptions) ([]adapters.SandboxDetails, error) {
	return nil, adapters.ErrNoReadModel
}

// ListAllSandboxDetails returns ErrNoReadModel.
func (m *StreamReadModel) ListAllSandboxDetails(context.Context, adapters.ListOptions) ([]adapters.SandboxDetails, error) {
	return nil, adapters.ErrNoReadModel
}

// Append returns ErrNoReadModel.
func (m *StreamReadModel) Append(context.Context, events.Entry) error { return adapters.ErrNoReadModel }

// AppendBatch returns ErrNoReadModel.
func (m *StreamReadModel) AppendBatch(context.Context, []events.Entry) error {
	return adapters.ErrNoReadModel
}

// DeleteSandbox returns ErrNoReadModel.
func (m *StreamReadModel) DeleteSandbox(context.Context, string, string) error {
	return adapters.ErrNoReadModel
}

// GetEnvironment returns ErrNoReadModel.
func (m *StreamReadModel) GetEnvironment(context.Context, string) (*adapters.EnvironmentRecord, error) {
	return nil, adapters.ErrNoReadModel
}

// SaveEnvironment returns ErrNoReadModel.
func (m *StreamReadModel) SaveEnvironment(context.Context, adapters.EnvironmentRecord) error {
	return adapters.ErrNoReadModel
}

// DeleteEnvironment returns ErrNoReadModel.
func (m *StreamReadModel) DeleteEnvironment(context.Context, string) error {
	return adapters.ErrNoReadModel
}

// ListEnvironments returns ErrNoReadModel.
func (m *StreamReadModel) ListEnvironments(context.Context) ([]adapters.EnvironmentRecord, error) {
	return nil, adapters.ErrNoReadModel
}

// Close does nothing.
func (m *StreamReadModel) Close() error { return nil }
