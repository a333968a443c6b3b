package alineo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/spans"
	"github.com/alineo-labs/alineo/opensandbox"
	"go.opentelemetry.io/otel/trace"
)

// ResumeOptions choose what Client.Resume resumes.
type ResumeOptions struct {
	// Tag resumes from the last checkpoint with this tag instead of the last one.
	Tag string
	// Name is the session name, needed only when several sessions of the ledger
	// have the sandbox id (sessions are keyed by name and sandbox id).
	Name string
	// Shell is the new handle's shell (SandboxOptions.Shell); the original's is
	// not recorded.
	Shell string
	// ResolveCredential supplies the values of the credentials the session had
	// bound (credential.bound not revoked later), which the resumed sandbox
	// re-registers; required when there are any.
	ResolveCredential CredentialResolver
	// Metadata is attached to the new sandbox on the server, as
	// SandboxOptions.Metadata; "runId" is added.
	Metadata map[string]string
	// Timeout is the new sandbox's time to live, as SandboxOptions.Timeout:
	// 0 for none, else whole seconds and at least MinTimeout.
	Timeout time.Duration
}

// Resume continues a session from its last checkpoint (or the last with
// opts.Tag): it creates a sandbox from the checkpoint's snapshot and returns its
// handle, recorded under the session's name with sandbox.created {sandboxId,
// resumedFrom, snapshotId, runId (inherited), resources}.
//
// The handle replays: its Nth exec-like call (Exec or ExecCode) returns the
// result of the Nth call of the run, as recorded before the checkpoint, at once
// and without writing anything or reaching the sandbox. The run is the session
// and the sessions it was itself resumed from, so resuming a resumed sandbox
// keeps every earlier result. A call whose kind or text differs from the
// recorded one fails with a *ReplayDivergedError; a replayed non-zero exit is a
// *CommandError when the call is strict, as live. Calls past the cached ones run
// live on the restored filesystem, numbered on from there.
//
// A session the TypeScript SDK recorded resumes the same way (its event names
// are read as ours): each replayed call returns what the TypeScript SDK's own
// replay returns, its recorded output lines joined with "" (they carry no
// newline). The strict rule above is the one difference: the TypeScript SDK
// resolves a replayed non-zero exit whatever the call's strictness.
//
// With opts.Name set, Resume reads only the ledger (Options.Adapter). Without
// it, the session is found in the read model; a client without one fails with
// an error wrapping ErrNoReadModel.
//
// Errors: *ClientError 404 when no session has sandboxID (or several do and
// opts.Name is empty), or it has no matching checkpoint; otherwise those of
// Client.Sandbox.
func (c *Client) Resume(ctx context.Context, sandboxID string, opts ResumeOptions) (_ *Sandbox, err error) {
	ctx, span := c.tracer.Start(ctx, "session.resume", trace.WithAttributes(attrSandboxID.String(sandboxID),
		attrName.String(opts.Name), attrCheckpoint.String(opts.Tag)))
	defer func() { spans.End(span, err) }()
	if err := validTimeout(opts.Timeout); err != nil {
		return nil, err
	}
	name, l, err := c.resumedSession(ctx, sandboxID, opts.Name)
	if err != nil {
		return nil, err
	}
	// The session is read once: the replay cache and the network state come
	// from the same entries.
	rp, err := resumePointOf(ctx, c.store, name, sandboxID, opts.Tag, l)
	if err != nil {
		return nil, err
	}
	creds, err := c.prepareResume(ctx, sandboxID, l.others, opts.ResolveCredential)
	l = nil // the cache keeps what it needs of it
	if err != nil {
		return nil, err
	}
	res := rp.resources.withDefaults()
	payload := events.SandboxCreatedPayload{ResumedFrom: sandboxID, SnapshotID: rp.checkpoint.SnapshotID,
		RunID: rp.runID, Resources: res.limits(), Image: rp.image}
	sb, err := c.spawn(ctx, spawnOptions{
		snapshotID: rp.checkpoint.SnapshotID, name: func(string) string { return name },
		resources: res, runID: rp.runID, payload: payload, replay: rp.cache, shell: opts.Shell,
		policy: creds.policy(), credentialProxy: creds.proxy(), metadata: opts.Metadata, timeout: opts.Timeout,
	})
	if err != nil {
		return nil, err
	}
	if err := sb.restoreCredentials(ctx, creds); err != nil {
		return nil, errors.Join(err, sb.Close(ctx))
	}
	return sb, nil
}

// resumedSession finds the name of the session whose sandbox id is sandboxID
// (name, when given) and reads its log: the one read of the session's
// ledger Resume makes. A named session is looked up in the ledger alone, the
// authority on it (a read model kept asynchronously may not hold it yet).
func (c *Client) resumedSession(ctx context.Context, sandboxID, name string) (string, *sessionLog, error) {
	if sandboxID == "" {
		return "", nil, &OptionError{Field: "sandboxID", Reason: "is empty"}
	}
	if name == "" {
		var err error
		if name, err = c.sessionName(ctx, sandboxID); err != nil {
			return "", nil, err
		}
	}
	l, err := readSessionLog(ctx, c.store, name, sandboxID)
	if err != nil {
		return "", nil, fmt.Errorf("alineo: read session %s/%s: %w", name, sandboxID, err)
	}
	if _, ok, err := createdPayload(l.others); err != nil {
		return "", nil, fmt.Errorf("alineo: read session %s/%s: %w", name, sandboxID, err)
	} else if !ok {
		return "", nil, &ClientError{Status: http.StatusNotFound, SandboxID: sandboxID, Message: "session " + quote(name) + " not found"}
	}
	return name, l, nil
}

// sessionName finds, in the read model, the name of the one session whose
// sandbox id is sandboxID.
func (c *Client) sessionName(ctx context.Context, sandboxID string) (string, error) {
	ds, err := c.sessionsOf(ctx, sandboxID)
	if err != nil {
		return "", fmt.Errorf("alineo: find session %s: %w", sandboxID, err)
	}
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.Name
	}
	switch len(names) {
	case 0:
		return "", &ClientError{Status: http.StatusNotFound, SandboxID: sandboxID, Message: "session not found"}
	case 1:
		return names[0], nil
	}
	return "", &ClientError{Status: http.StatusNotFound, SandboxID: sandboxID,
		Message: "several sessions have this sandbox id (" + strings.Join(names, ", ") + "); set ResumeOptions.Name"}
}

// RestoreSnapshot creates a sandbox from a snapshot with a clean history:
// nothing is replayed. It is recorded under name (default
// "sandbox-<first 8 of the id>") with sandbox.created {sandboxId, fromSnapshot,
// runId, resources}, as the TypeScript SDK's restoreSnapshot(snapshotId, name,
// resources, runId) records it. The runId is opts' RunID (at most one
// RestoreOptions), else inherited from the session of the sandbox the snapshot
// was taken of, when the ledger has exactly one such session, else a new one.
// The handle can Fork.
//
// Errors: *OptionError for bad options; *ClientError 404 when the snapshot is
// unknown; otherwise those of Client.Sandbox.
func (c *Client) RestoreSnapshot(ctx context.Context, snapshotID, name string, resources Resources, opts ...RestoreOptions) (_ *Sandbox, err error) {
	ctx, span := c.tracer.Start(ctx, "sandbox.restore", trace.WithAttributes(attrSnapshotID.String(snapshotID)))
	defer func() { spans.End(span, err) }()
	if snapshotID == "" {
		return nil, &OptionError{Field: "snapshotID", Reason: "is empty"}
	}
	o, err := oneOption("RestoreOptions", opts)
	if err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	snap, err := c.os.GetSnapshot(ctx, snapshotID)
	switch {
	case errors.Is(err, opensandbox.ErrNotFound):
		return nil, &ClientError{Status: http.StatusNotFound, Message: "snapshot " + snapshotID + " not found", Err: err}
	case err != nil:
		return nil, &SandboxError{Op: "get snapshot " + snapshotID, Err: err}
	}
	res := resources.withDefaults()
	runID := o.RunID
	if runID == "" {
		runID = c.inheritedRunID(ctx, snap.SandboxID)
	}
	return c.spawn(ctx, spawnOptions{
		snapshotID: snapshotID, name: defaultName(name, "sandbox-"), resources: res, runID: runID,
		payload: events.SandboxCreatedPayload{FromSnapshot: snapshotID, RunID: runID, Resources: res.limits()},
		shell:   o.Shell, env: o.Env,
	})
}

// defaultName returns name, or prefix plus the first 8 characters of the id.
func defaultName(name, prefix string) func(id string) string {
	return func(id string) string {
		if name != "" {
			return name
		}
		return prefix + id[:min(8, len(id))]
	}
}

// spawn creates a sandbox from the snapshot o.snapshotID, as Client.Sandbox
// creates one from an image (see launch).
func (c *Client) spawn(ctx context.Context, o spawnOptions) (*Sandbox, error) {
	return c.launch(ctx, "create from snapshot "+o.snapshotID, opensandbox.CreateSandboxRequest{
		SnapshotID: o.snapshotID, Metadata: withRunID(o.metadata, o.runID), Env: o.env,
		ResourceLimits: o.resources.limits(), Timeout: o.timeout,
		NetworkPolicy: o.policy.wire(), CredentialProxy: credentialProxy(o.credentialProxy),
	}, o)
}

// withRunID returns a copy of md with "runId" set to runID.
func withRunID(md map[string]string, runID string) map[string]string {
	out := maps.Clone(md)
	if out == nil {
		out = map[string]string{}
	}
	out["runId"] = runID
	return out
}

// inheritedRunID returns the runId of the one session of sandboxID, or a new
// one when there is no such session, or several.
func (c *Client) inheritedRunID(ctx context.Context, sandboxID string) string {
	if sandboxID != "" {
		if ds, err := c.sessionsOf(ctx, sandboxID); err == nil && len(ds) == 1 {
			return ds[0].RunID
		}
	}
	return newUUID()
}

// sessionsOf returns the details of every session whose sandbox id is
// sandboxID (sessions are keyed by name and sandbox id, so there may be
// several). It needs the read model: a ledger is read by session.
func (c *Client) sessionsOf(ctx context.Context, sandboxID string) ([]SandboxDetails, error) {
	rm, err := c.readModel(ctx, "find the sessions of "+sandboxID)
	if err != nil {
		return nil, fmt.Errorf("%w (or set ResumeOptions.Name)", err)
	}
	return rm.ListAllSandboxDetails(ctx, ListOptions{SandboxID: sandboxID})
}
