package alineo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/spans"
	"github.com/alineo-labs/alineo/opensandbox"
	"go.opentelemetry.io/otel/trace"
)

// EnvironmentRecord is the stored build of an environment: its snapshot,
// image, build time (Unix ms) and fingerprint.
type EnvironmentRecord = adapters.EnvironmentRecord

// EnvOptions describe how an environment is built.
type EnvOptions struct {
	// Image is the image the build sandbox starts from. Required.
	Image string
	// Resources are the limits of the build sandbox and of every sandbox spawned
	// from the environment.
	Resources Resources
	// Setup prepares the build sandbox (installs packages, writes files); its
	// filesystem is then checkpointed. Nil for none.
	Setup func(ctx context.Context, sb *Sandbox) error
	// SetupVersion names the version of Setup. A func cannot be compared, so
	// the environment's fingerprint covers Image, Resources and SetupVersion:
	// change SetupVersion whenever Setup changes, and the next Sandbox rebuilds.
	SetupVersion string
	// Shell is the shell of the build sandbox and of the spawned ones.
	Shell string
}

// Fingerprint returns the fingerprint of the build these options describe:
// "sha256:" and the hex digest of Image, Resources (with defaults) and
// SetupVersion. A record with another fingerprint is stale.
func (o EnvOptions) Fingerprint() string {
	r := o.Resources.withDefaults()
	h := sha256.New()
	for _, s := range []string{"alineo-env-v1", o.Image, r.CPU, r.Memory, r.GPU, o.SetupVersion} {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Environment is a named, cached sandbox setup: built once into a snapshot, then
// every Sandbox starts from that snapshot without running Setup again. The
// build is stored in the ledger's environments table (EnvironmentRecord) and
// rebuilt when the options' fingerprint differs from the stored one, or when
// the stored snapshot is no longer Ready. It is safe for concurrent use:
// concurrent first uses through one Client build once.
type Environment struct {
	c    *Client
	name string
	opts EnvOptions
}

// Environment returns the environment named name. It does no I/O.
func (c *Client) Environment(name string, opts EnvOptions) *Environment {
	return &Environment{c: c, name: name, opts: opts}
}

// Name returns the environment's name.
func (e *Environment) Name() string { return e.name }

func (e *Environment) validate() error {
	switch {
	case strings.TrimSpace(e.name) == "":
		return &OptionError{Field: "name", Reason: "is empty"}
	case strings.TrimSpace(e.opts.Image) == "":
		return &OptionError{Field: "Image", Reason: "is empty"}
	}
	return nil
}

// Info returns the stored build, or nil before the first build. Environment
// records live in the read model: without one (Options.ReadModel) every
// method of an Environment fails with an error wrapping ErrNoReadModel.
func (e *Environment) Info(ctx context.Context) (*EnvironmentRecord, error) {
	rm, err := e.c.readModel(ctx, "environment "+quote(e.name))
	if err != nil {
		return nil, err
	}
	rec, err := rm.GetEnvironment(ctx, e.name)
	if err != nil {
		return nil, fmt.Errorf("alineo: environment %s: %w", quote(e.name), err)
	}
	return rec, nil
}

// Sandbox returns a new sandbox started from the environment's snapshot,
// building the environment first if it has no current build. It is recorded as
// "env-<name>-<first 8 of its id>" with sandbox.created {sandboxId,
// fromEnvironment, snapshotId, runId, resources}, as the TypeScript SDK's
// env.sandbox({env, shell}) records it. opts (at most one EnvSandboxOptions)
// set the sandbox's environment variables (never recorded), its shell
// (default EnvOptions.Shell) and its run id (default a new one). The build
// does not depend on them: every sandbox of the environment starts from the
// same snapshot.
//
// A build runs in a sandbox named "env-<name>-build": Setup, then a checkpoint
// tagged "env:<name>", then Close; only then is the record saved. If Setup
// fails nothing is saved and its error is returned. Concurrent callers share
// one build, which runs under the ctx of the caller that started it.
func (e *Environment) Sandbox(ctx context.Context, opts ...EnvSandboxOptions) (*Sandbox, error) {
	o, err := oneOption("EnvSandboxOptions", opts)
	if err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := e.validate(); err != nil {
		return nil, err
	}
	rec, err := e.current(ctx)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		if rec, err = e.c.envs.do(ctx, e.name+"\x00"+e.opts.Fingerprint(), func() (*EnvironmentRecord, error) {
			// A build that finished just before this one started is current.
			if rec, err := e.current(ctx); err != nil || rec != nil {
				return rec, err
			}
			return e.build(ctx)
		}); err != nil {
			return nil, err
		}
	}
	res := e.opts.Resources.withDefaults()
	runID := o.RunID
	if runID == "" {
		runID = newUUID()
	}
	shell := o.Shell
	if shell == "" {
		shell = e.opts.Shell
	}
	return e.c.spawn(ctx, spawnOptions{
		snapshotID: rec.SnapshotID, name: defaultName("", "env-"+e.name+"-"), resources: res, runID: runID,
		payload: events.SandboxCreatedPayload{FromEnvironment: e.name, SnapshotID: rec.SnapshotID, RunID: runID, Resources: res.limits(), Image: rec.Image},
		shell:   shell, env: o.Env,
	})
}

// current returns the stored record if its fingerprint is this environment's
// and its snapshot is Ready, else nil.
func (e *Environment) current(ctx context.Context) (*EnvironmentRecord, error) {
	rec, err := e.Info(ctx)
	if err != nil || rec == nil || rec.Fingerprint != e.opts.Fingerprint() {
		return nil, err
	}
	snap, err := e.c.os.GetSnapshot(ctx, rec.SnapshotID)
	switch {
	case errors.Is(err, opensandbox.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("alineo: environment %s: %w", quote(e.name), err)
	case snap.Status.State != opensandbox.SnapshotReady:
		return nil, nil
	}
	return rec, nil
}

// Rebuild builds the environment again, whatever is stored, and saves the new
// record. Earlier snapshots are left on the server.
func (e *Environment) Rebuild(ctx context.Context) (*EnvironmentRecord, error) {
	if err := e.validate(); err != nil {
		return nil, err
	}
	return e.c.envs.do(ctx, e.name+"\x00rebuild", func() (*EnvironmentRecord, error) { return e.build(ctx) })
}

func (e *Environment) build(ctx context.Context) (rec *EnvironmentRecord, err error) {
	ctx, span := e.c.tracer.Start(ctx, "environment.build", trace.WithAttributes(attrEnv.String(e.name)))
	defer func() {
		if rec != nil {
			span.SetAttributes(attrSnapshotID.String(rec.SnapshotID))
		}
		spans.End(span, err)
	}()
	sb, err := e.c.Sandbox(ctx, SandboxOptions{Image: e.opts.Image, Resources: e.opts.Resources,
		Name: "env-" + e.name + "-build", Shell: e.opts.Shell})
	if err != nil {
		return nil, fmt.Errorf("alineo: build environment %s: %w", quote(e.name), err)
	}
	defer func() {
		if cerr := sb.Close(ctx); cerr != nil && err == nil {
			rec, err = nil, fmt.Errorf("alineo: build environment %s: %w", quote(e.name), cerr)
		}
	}()
	if e.opts.Setup != nil {
		if err := e.opts.Setup(ctx, sb); err != nil {
			return nil, fmt.Errorf("alineo: build environment %s: setup: %w", quote(e.name), err)
		}
	}
	snap, err := sb.Checkpoint(ctx, "env:"+e.name)
	if err != nil {
		return nil, fmt.Errorf("alineo: build environment %s: %w", quote(e.name), err)
	}
	r := EnvironmentRecord{Name: e.name, SnapshotID: snap, Image: e.opts.Image,
		BuiltAt: time.Now().UnixMilli(), Fingerprint: e.opts.Fingerprint()}
	rm, err := e.c.readModel(ctx, "build environment "+quote(e.name))
	if err != nil {
		return nil, err
	}
	if err := rm.SaveEnvironment(ctx, r); err != nil {
		return nil, fmt.Errorf("alineo: build environment %s: save: %w", quote(e.name), err)
	}
	return &r, nil
}

// Environments are the environment records of the read model. Without one
// (Options.ReadModel) their methods fail with an error wrapping ErrNoReadModel.
type Environments struct{ c *Client }

// Environments returns the read model's environment records.
func (c *Client) Environments() Environments { return Environments{c: c} }

// List returns every environment record, newest build first.
func (s Environments) List(ctx context.Context) ([]EnvironmentRecord, error) {
	rm, err := s.c.readModel(ctx, "list environments")
	if err != nil {
		return nil, err
	}
	return rm.ListEnvironments(ctx)
}

// Get returns the named environment's record. Errors: one wrapping
// ErrNotFound when there is none (never built, or deleted).
func (s Environments) Get(ctx context.Context, name string) (*EnvironmentRecord, error) {
	rm, err := s.c.readModel(ctx, "environment "+quote(name))
	if err != nil {
		return nil, err
	}
	rec, err := rm.GetEnvironment(ctx, name)
	switch {
	case err != nil:
		return nil, fmt.Errorf("alineo: environment %s: %w", quote(name), err)
	case rec == nil:
		return nil, fmt.Errorf("alineo: environment %s: %w", quote(name), ErrNotFound)
	}
	return rec, nil
}

// Delete removes the named record (not its snapshot); an unknown name is a no-op.
func (s Environments) Delete(ctx context.Context, name string) error {
	rm, err := s.c.readModel(ctx, "delete environment "+quote(name))
	if err != nil {
		return err
	}
	return rm.DeleteEnvironment(ctx, name)
}

// envBuilds runs one build per key at a time; later callers of a key wait for
// the running build and share its result. The zero value is ready to use.
type envBuilds struct {
	mu sync.Mutex
	m  map[string]*envBuild
}

type envBuild struct {
	done chan struct{}
	rec  *EnvironmentRecord
	err  error
}

// do runs f, or waits for the running f of key (ctx ends the wait, not f).
func (b *envBuilds) do(ctx context.Context, key string, f func() (*EnvironmentRecord, error)) (*EnvironmentRecord, error) {
	b.mu.Lock()
	if cur, ok := b.m[key]; ok {
		b.mu.Unlock()
		select {
		case <-cur.done:
			return cur.rec, cur.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if b.m == nil {
		b.m = map[string]*envBuild{}
	}
	cur := &envBuild{done: make(chan struct{})}
	b.m[key] = cur
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.m, key)
		b.mu.Unlock()
		close(cur.done)
	}()
	cur.err = errors.New("alineo: environment build panicked") // until f returns
	cur.rec, cur.err = f()
	return cur.rec, cur.err
}
