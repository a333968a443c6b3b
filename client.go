package alineo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/spans"
	"github.com/alineo-labs/alineo/opensandbox"
	"go.opentelemetry.io/otel/trace"
)

// runningTimeout bounds the wait for a new sandbox to reach Running; past it the
// creation fails with a *ClientError of status 408.
const runningTimeout = 120 * time.Second

// Client creates sandboxes on one OpenSandbox server and records them in one
// ledger. It is safe for concurrent use and holds no goroutines of its own.
type Client struct {
	os    *opensandbox.Client
	store adapters.Ledger                 // Options.Adapter
	rm    adapters.ReadModel              // Options.ReadModel or the Adapter's; nil for none
	await func(ctx context.Context) error // Options.AwaitReadModel
	// rmIsStore: rm is the Adapter itself, a Store, so it never lags the ledger.
	rmIsStore bool
	sem       *semaphore
	log       *slog.Logger
	envs      envBuilds // environment builds in flight, by name and fingerprint

	broker CredentialBroker // Options.CredentialBroker, or the vault broker
	tracer trace.Tracer     // from Options.TracerProvider
	actor  string           // Options.Actor, or DefaultActor()
}

// New returns a Client. It does no I/O. It fails with an *OptionError when
// BaseURL is empty or not an http(s) URL, Adapter is nil or MaxConcurrency is
// negative.
func New(opts Options) (*Client, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	osc, err := opensandbox.New(opensandbox.Config{
		BaseURL: opts.BaseURL, APIKey: opts.APIKey, HTTPClient: opts.HTTPClient,
		UseServerProxy: opts.UseServerProxy, Logger: log,
	})
	if err != nil {
		return nil, &OptionError{Field: "BaseURL", Reason: err.Error()}
	}
	broker := opts.CredentialBroker
	if broker == nil {
		broker = NewOpenSandboxBroker(osc)
	}
	// A Store keeps its details in the transaction of each append: its read
	// model never lags its ledger.
	rm, rmIsStore := opts.ReadModel, false
	if rm == nil {
		rm, rmIsStore = opts.Adapter.(adapters.ReadModel)
	}
	actor := opts.Actor
	if actor == "" {
		actor = DefaultActor()
	}
	return &Client{os: osc, store: opts.Adapter, rm: rm, rmIsStore: rmIsStore, await: opts.AwaitReadModel,
		sem: newSemaphore(opts.MaxConcurrency), log: log, broker: broker, tracer: tracerOf(opts.TracerProvider), actor: actor}, nil
}

// readModel returns the client's read model for the call op, after
// Options.AwaitReadModel, or an error wrapping ErrNoReadModel.
func (c *Client) readModel(ctx context.Context, op string) (adapters.ReadModel, error) {
	if c.rm == nil {
		return nil, fmt.Errorf("alineo: %s: %w: the Adapter is only a ledger; set Options.ReadModel", op, ErrNoReadModel)
	}
	if c.await != nil {
		if err := c.await(ctx); err != nil {
			return nil, fmt.Errorf("alineo: %s: wait for the read model: %w", op, err)
		}
	}
	return c.rm, nil
}

// OpenSandbox returns the underlying OpenSandbox client, for calls the SDK does
// not wrap. What is done through it is not recorded.
func (c *Client) OpenSandbox() *opensandbox.Client { return c.os }

// Sandbox creates a sandbox, waits until it is Running and its execd answers,
// records sandbox.created and returns its handle. With MaxConcurrency set it first
// waits for a slot (first come first served; ctx cancels the wait). If anything
// fails after the container was created, the container is deleted and the slot
// freed before the error is returned: nothing leaks.
//
// Errors: *OptionError for bad options; *SandboxError for a failed create or
// ledger write; *ClientError 408 when the sandbox is not Running within two
// minutes, 500 when it failed; *ExecConnectionError when its execd never answered.
func (c *Client) Sandbox(ctx context.Context, opts SandboxOptions) (*Sandbox, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	res := opts.Resources.withDefaults()
	runID := opts.RunID
	if runID == "" {
		runID = newUUID()
	}
	md := maps.Clone(opts.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	md["runId"] = runID
	entry := opts.Entrypoint
	if len(entry) == 0 {
		entry = DefaultEntrypoint
	}
	if opts.Image == "" {
		opts.Image = DefaultImage
	}
	req := opensandbox.CreateSandboxRequest{
		Image: &opensandbox.ImageSpec{URI: opts.Image, Auth: opts.ImageAuth}, Entrypoint: entry, Env: opts.Env, Metadata: md,
		ResourceLimits: res.limits(), Timeout: opts.Timeout,
		NetworkPolicy: opts.NetworkPolicy.wire(), CredentialProxy: credentialProxy(opts.CredentialProxy),
	}
	return c.launch(ctx, "create", req, spawnOptions{
		name: defaultName(opts.Name, "sandbox-"), resources: res, runID: runID, shell: opts.Shell, env: opts.Env, timeout: opts.Timeout,
		payload:      events.SandboxCreatedPayload{Resources: res.limits(), RunID: runID, Image: opts.Image},
		recordPolicy: opts.NetworkPolicy,
	})
}

// spawnOptions describe the handle of a sandbox being created (launch), and for
// spawn the snapshot it is created from.
type spawnOptions struct {
	snapshotID string
	name       func(id string) string // the session name, given the new id
	resources  Resources
	runID      string
	payload    events.SandboxCreatedPayload // SandboxID is filled in
	// prevHash is the parent's chain head a fork's sandbox.created names
	// as its PrevHash ("" for none): the fork's chain continues its parent's.
	prevHash string
	replay   *replayCache
	shell    string
	env      map[string]string // spawn: set in the sandbox; the handle keeps it for its forks
	// policy and credentialProxy restore a resumed session's network state.
	policy          *NetworkPolicy
	credentialProxy bool
	metadata        map[string]string // spawn: attached to the sandbox, "runId" added
	timeout         time.Duration     // spawn: the sandbox's time to live (0: none)
	// recordPolicy, when set, has its rules recorded as egress.rule_added after
	// sandbox.created (a new sandbox's policy; a restored one is not re-recorded).
	recordPolicy *NetworkPolicy
	// actor records the handle's entries when ctx names none (WithActor):
	// a fork's parent's; "" for the client's.
	actor string
}

// launch creates the sandbox req describes and opens its handle: it takes a
// concurrency slot, creates the sandbox, waits for Running and execd, records
// sandbox.created and returns the handle; on failure it deletes what it created
// and frees the slot. op names the create in its *SandboxError.
func (c *Client) launch(ctx context.Context, op string, req opensandbox.CreateSandboxRequest, o spawnOptions) (_ *Sandbox, err error) {
	// The handle's sandbox.run span: ended by Close, or here on failure.
	ctx, run := c.tracer.Start(ctx, "sandbox.run", trace.WithAttributes(attrOp.String(op), attrRunID.String(o.runID)))
	defer func() {
		if err != nil {
			spans.End(run, err)
		}
	}()
	if err := checkActorOf(ctx); err != nil {
		return nil, err
	}
	if err := c.sem.acquire(ctx); err != nil {
		return nil, fmt.Errorf("alineo: wait for a sandbox slot: %w", err)
	}
	created, err := c.os.CreateSandbox(ctx, req)
	if err != nil {
		c.sem.release()
		return nil, &SandboxError{Op: op, Err: err}
	}
	run.SetAttributes(attrSandboxID.String(created.ID), attrName.String(o.name(created.ID)))
	sb, err := c.open(ctx, created.ID, o)
	if err != nil {
		// Delete what was created, even if ctx is what failed.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		if derr := c.os.DeleteSandbox(dctx, created.ID); derr != nil && !errors.Is(derr, opensandbox.ErrNotFound) {
			c.log.Warn("delete sandbox after failed creation", "sandbox", created.ID, "err", derr)
			err = errors.Join(err, &SandboxError{SandboxID: created.ID, Op: "delete after failed creation", Err: derr})
		}
		cancel()
		c.sem.release()
		return nil, err
	}
	sb.release = sync.OnceFunc(c.sem.release)
	sb.run = run
	if created.ExpiresAt != nil {
		sb.expiresAt = *created.ExpiresAt
	}
	return sb, nil
}

// open waits for a created sandbox, builds its handle and records sandbox.created
// (and the rules of o.recordPolicy).
func (c *Client) open(ctx context.Context, id string, o spawnOptions) (*Sandbox, error) {
	if err := c.waitRunning(ctx, id); err != nil {
		return nil, err
	}
	ex, err := c.os.Execd(ctx, id)
	if err != nil {
		return nil, &ExecConnectionError{SandboxID: id, Err: err}
	}
	sb := c.handle(c.actorFor(ctx, o.actor), id, o.name(id), o.runID, o.resources, o.shell, ex)
	sb.replay = o.replay
	sb.expires = o.timeout > 0 // the expiry itself is set by launch
	sb.image = o.payload.Image
	sb.env = maps.Clone(o.env) // the caller may change its map
	o.payload.SandboxID = id
	if p := o.recordPolicy; p != nil {
		o.payload.EgressDefault = p.effectiveDefault()
	} else if p := o.policy; p != nil {
		o.payload.EgressDefault = p.effectiveDefault()
	}
	var created [1]<-chan error
	err = sb.ledger.writeMany(ctx, nil, created[:], emission{ev: events.SandboxCreated, step: events.SandboxLevel, payload: o.payload, prevHash: o.prevHash})
	if err == nil {
		err = <-created[0]
	}
	if err != nil {
		ex.Close()
		return nil, &SandboxError{SandboxID: id, Op: "record sandbox.created", Err: err}
	}
	if o.recordPolicy != nil {
		if err := sb.recordRules(ctx, events.EgressRuleAdded, o.recordPolicy.Egress); err != nil {
			ex.Close()
			return nil, err
		}
	}
	return sb, nil
}

// handle returns a new handle on sandbox id, recorded under name by actor;
// release is left for the caller to set.
func (c *Client) handle(actor, id, name, runID string, res Resources, shell string, ex *opensandbox.Execd) *Sandbox {
	l := newLedger(c.store, name, id)
	l.actor = actor
	return &Sandbox{
		c: c, id: id, name: name, runID: runID, resources: res, shell: shell,
		ledger: l, ex: ex, inflight: map[*Exec]context.CancelCauseFunc{},
	}
}

// actorFor returns the actor of a handle made under ctx: WithActor's, else
// inherited (a fork's parent's, "" for none), else the client's.
func (c *Client) actorFor(ctx context.Context, inherited string) string {
	if a := actorOf(ctx); a != "" {
		return a
	}
	if inherited != "" {
		return inherited
	}
	return c.actor
}

// waitRunning waits until the sandbox is Running, for at most runningTimeout.
func (c *Client) waitRunning(ctx context.Context, id string) error {
	return c.untilRunning(ctx, id, "wait running", c.os.WaitRunning)
}

// resumeRunning resumes sandbox id and waits until it is Running, for at most
// runningTimeout.
func (c *Client) resumeRunning(ctx context.Context, id string) error {
	return c.untilRunning(ctx, id, "resume", c.os.ResumeAndWait)
}

// untilRunning runs wait, which returns once sandbox id is Running, for at
// most runningTimeout, and maps its error (op names it).
func (c *Client) untilRunning(ctx context.Context, id, op string, wait func(context.Context, string) (*opensandbox.Sandbox, error)) error {
	wctx, cancel := context.WithTimeoutCause(ctx, runningTimeout, errRunningTimeout)
	defer cancel()
	_, err := wait(wctx, id)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, opensandbox.ErrSandboxFailed):
		return &ClientError{Status: http.StatusInternalServerError, SandboxID: id, Message: "sandbox failed", Err: err}
	case ctx.Err() == nil && errors.Is(context.Cause(wctx), errRunningTimeout):
		return &ClientError{Status: http.StatusRequestTimeout, SandboxID: id, Message: "not Running within " + runningTimeout.String(), Err: err}
	case errors.Is(err, opensandbox.ErrNotFound):
		return &ClientError{Status: http.StatusNotFound, SandboxID: id, Message: "sandbox not found", Err: err}
	}
	return &SandboxError{SandboxID: id, Op: op, Err: err}
}

var errRunningTimeout = errors.New("sandbox not running in time")

// pause pauses the sandbox and waits until it is Paused, for at most
// runningTimeout.
func (c *Client) pause(ctx context.Context, id string) error {
	wctx, cancel := context.WithTimeout(ctx, runningTimeout)
	defer cancel()
	_, err := c.os.PauseAndWait(wctx, id)
	if err != nil && errors.Is(err, opensandbox.ErrSandboxFailed) {
		var se *opensandbox.StateError
		errors.As(err, &se)
		return &ClientError{Status: http.StatusInternalServerError, SandboxID: id, Message: "sandbox is " + se.State, Err: err}
	}
	if err != nil {
		return &SandboxError{SandboxID: id, Op: "pause", Err: err}
	}
	return nil
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// SandboxDetails summarises one session of the ledger.
type SandboxDetails = adapters.SandboxDetails

// ListOptions filter and limit Sandboxes().List and ListByName.
type ListOptions = adapters.ListOptions

// Sandboxes is the ledger's session history. It reads and deletes ledger rows
// only, never containers. Listings need a read model (Options.ReadModel);
// Get, Delete and Events work from the ledger alone.
type Sandboxes struct{ c *Client }

// Sandboxes returns the ledger's session history.
func (c *Client) Sandboxes() Sandboxes { return Sandboxes{c: c} }

// List returns every session, newest first, filtered by opts. Without a read
// model it fails with an error wrapping ErrNoReadModel.
func (s Sandboxes) List(ctx context.Context, opts ListOptions) ([]SandboxDetails, error) {
	rm, err := s.c.readModel(ctx, "list sandboxes")
	if err != nil {
		return nil, err
	}
	return rm.ListAllSandboxDetails(ctx, opts)
}

// ListByName returns the sessions named name, newest first, filtered by opts.
// Without a read model it fails with an error wrapping ErrNoReadModel.
func (s Sandboxes) ListByName(ctx context.Context, name string, opts ListOptions) ([]SandboxDetails, error) {
	rm, err := s.c.readModel(ctx, "list sandboxes")
	if err != nil {
		return nil, err
	}
	return rm.ListSandboxDetails(ctx, name, opts)
}

// Get returns one session, or nil when it is unknown. Without a read model
// the details are derived from the session's ledger entries.
func (s Sandboxes) Get(ctx context.Context, name, sandboxID string) (*SandboxDetails, error) {
	return s.c.sessionDetails(ctx, name, sandboxID)
}

// Delete removes a session's ledger rows (not the container), and with them
// the details a Store keeps.
func (s Sandboxes) Delete(ctx context.Context, name, sandboxID string) error {
	return s.c.store.DeleteSandbox(ctx, name, sandboxID)
}

// Events returns a session's ledger entries in (ts, seq) order.
func (s Sandboxes) Events(ctx context.Context, name, sandboxID string) ([]events.Entry, error) {
	return s.c.store.ReadAll(ctx, name, sandboxID)
}

// sessionDetails returns the details of the session (name, sandboxID), or
// nil: from the read model when there is one, else from its ledger entries.
func (c *Client) sessionDetails(ctx context.Context, name, sandboxID string) (*SandboxDetails, error) {
	if c.rm != nil {
		rm, err := c.readModel(ctx, "get sandbox")
		if err != nil {
			return nil, err
		}
		return rm.GetSandboxDetails(ctx, name, sandboxID)
	}
	es, err := c.store.ReadAll(ctx, name, sandboxID)
	if err != nil {
		return nil, err
	}
	return adapters.DetailsOf(es), nil
}

// reasonTTLExpiry is the status reason of a sandbox its server ended when its
// expiration passed (OpenSandbox's lifecycle spec).
const reasonTTLExpiry = "ttl_expiry"

// expired reports whether the server says sandbox id ended, or is ending, at
// its expiration. A sandbox it cannot look up is not known to have expired.
func (c *Client) expired(ctx context.Context, id string) bool {
	sb, err := c.os.GetSandbox(ctx, id)
	if err != nil || sb.Status.Reason != reasonTTLExpiry {
		return false
	}
	switch sb.Status.State {
	case opensandbox.StateStopping, opensandbox.StateTerminated, opensandbox.StateFailed:
		return true
	}
	return false
}
