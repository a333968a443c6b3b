package alineo

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/spans"
	"github.com/alineo-labs/alineo/opensandbox"
)

// snapshotTimeout bounds the wait for a snapshot to become Ready.
const snapshotTimeout = 120 * time.Second

// CheckpointInfo is one checkpoint of a session: its snapshot, tag and time
// (Unix ms).
type CheckpointInfo = adapters.CheckpointInfo

// Checkpoint snapshots the sandbox's filesystem, waits until the snapshot is
// Ready and records sandbox.checkpoint_created {snapshotId, name}; name is the
// checkpoint's tag and may be empty. It returns the snapshot id. Client.Resume
// resumes from the last checkpoint (or the last with a tag); execs that
// completed before it are replayed, later ones run again.
//
// Errors: ErrClosed after Close; *SandboxError when the snapshot could not be
// taken or recorded; *ClientError 408 when the snapshot was not Ready within
// two minutes, 500 when it failed.
func (s *Sandbox) Checkpoint(ctx context.Context, name string) (snap string, err error) {
	ctx, span := s.span(ctx, "sandbox.checkpoint", attrCheckpoint.String(name))
	defer func() {
		span.SetAttributes(attrSnapshotID.String(snap))
		spans.End(span, err)
	}()
	if err := s.checkOpen(); err != nil {
		return "", err
	}
	snap, err = s.c.snapshot(ctx, s.id, name)
	if err != nil {
		return "", err
	}
	p := events.CheckpointCreatedPayload{SnapshotID: snap, Name: name}
	if err := s.ledger.write(ctx, events.CheckpointCreated, events.SandboxLevel, p); err != nil {
		return "", &SandboxError{SandboxID: s.id, Op: "record sandbox.checkpoint_created", Err: err}
	}
	return snap, nil
}

// ListCheckpoints returns this session's checkpoints (this handle's name and
// sandbox id) in creation order. A resumed handle lists only its own.
func (s *Sandbox) ListCheckpoints(ctx context.Context) ([]CheckpointInfo, error) {
	cps, err := s.c.store.ListCheckpoints(ctx, s.name, s.id)
	if err != nil {
		return nil, &SandboxError{SandboxID: s.id, Op: "list checkpoints", Err: err}
	}
	return cps, nil
}

// snapshot creates a snapshot of sandbox id and waits until it is Ready.
func (c *Client) snapshot(ctx context.Context, id, name string) (string, error) {
	wctx, cancel := context.WithTimeoutCause(ctx, snapshotTimeout, errSnapshotTimeout)
	defer cancel()
	snap, err := c.os.CreateSnapshotAndWait(wctx, id, name)
	switch {
	case snap == nil:
		return "", &SandboxError{SandboxID: id, Op: "create snapshot", Err: err}
	case err == nil:
		return snap.ID, nil
	case errors.Is(err, opensandbox.ErrSnapshotFailed):
		return "", &ClientError{Status: http.StatusInternalServerError, SandboxID: id, Message: "snapshot " + snap.ID + " failed", Err: err}
	case ctx.Err() == nil && errors.Is(context.Cause(wctx), errSnapshotTimeout):
		return "", &ClientError{Status: http.StatusRequestTimeout, SandboxID: id, Message: "snapshot " + snap.ID + " not Ready within " + snapshotTimeout.String(), Err: err}
	}
	return "", &SandboxError{SandboxID: id, Op: "wait snapshot " + snap.ID, Err: err}
}

var errSnapshotTimeout = errors.New("snapshot not ready in time")
