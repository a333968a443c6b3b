package alineo

import (
	"context"
	"errors"
	"maps"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/spans"
)

// Fork checkpoints this sandbox (sandbox.checkpoint_created with tag in this
// session's ledger, so a later Resume of this sandbox may pick it) and starts a
// second sandbox from that snapshot. This sandbox keeps running; the fork has
// a clean history under the name "fork-<this name>-<first 8 of its id>", with
// sandbox.created {sandboxId, forkedFrom (the snapshot id), runId, resources,
// image}, as the TypeScript SDK's sb.fork(tag, runId) records it. The fork has
// this sandbox's run id, resources, environment variables and shell, unless
// opts (at most one ForkOptions) say otherwise. A fork keeps the network
// policy in force and the credentials bound through this handle.
//
// Several Forks may run at once; each succeeds or fails on its own, and a
// failed one deletes what it created and frees its concurrency slot. The
// checkpoint of a fork that failed after it stays recorded.
//
// Errors: *OptionError for bad options, before anything is done;
// ErrForkUnsupported on a handle of Connect without resources (unless opts
// give them); otherwise those of Checkpoint and Client.Sandbox.
func (s *Sandbox) Fork(ctx context.Context, tag string, opts ...ForkOptions) (_ *Sandbox, err error) {
	o, err := oneOption("ForkOptions", opts)
	if err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	ctx, span := s.span(ctx, "sandbox.fork", attrCheckpoint.String(tag))
	defer func() { spans.End(span, err) }()
	if s.resources == (Resources{}) && o.Resources.CPU == "" && o.Resources.Memory == "" {
		return nil, &SandboxError{SandboxID: s.id, Op: "fork", Err: ErrForkUnsupported}
	}
	res := o.Resources.merged(s.resources).withDefaults()
	runID := o.RunID
	if runID == "" {
		runID = s.runID
	}
	env := s.env
	if len(o.Env) > 0 {
		env = maps.Clone(env)
		if env == nil {
			env = make(map[string]string, len(o.Env))
		}
		maps.Copy(env, o.Env)
	}
	snap, err := s.Checkpoint(ctx, tag)
	if err != nil {
		return nil, err
	}
	// The fork's chain starts at its parent's head: the checkpoint just recorded.
	cp, err := s.ledger.store.LastCheckpoint(ctx, s.name, s.id)
	if err != nil {
		return nil, &SandboxError{SandboxID: s.id, Op: "fork", Err: err}
	}
	var parentHead string
	if cp != nil {
		parentHead = cp.Hash
	}
	creds, err := s.forkCredentials(ctx) // the fork keeps the policy and credentials
	if err != nil {
		return nil, err
	}
	child, err := s.c.spawn(ctx, spawnOptions{
		snapshotID: snap, name: defaultName("", "fork-"+s.name+"-"), resources: res, runID: runID,
		payload:  events.SandboxCreatedPayload{ForkedFrom: snap, RunID: runID, Resources: res.limits(), Image: s.image},
		prevHash: parentHead,
		shell:    s.shell, env: env, policy: creds.policy(), credentialProxy: creds.proxy(),
		actor: s.ledger.actor,
	})
	if err != nil {
		return nil, err
	}
	if err := child.restoreCredentials(ctx, creds); err != nil {
		return nil, errors.Join(err, child.Close(ctx))
	}
	return child, nil
}
