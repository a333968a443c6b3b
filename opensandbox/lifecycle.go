package opensandbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// SandboxState is a sandbox's lifecycle state. Clients must tolerate values not
// listed here.
type SandboxState string

// Sandbox states, as the lifecycle API reports them.
const (
	StatePending    SandboxState = "Pending"
	StateRunning    SandboxState = "Running"
	StatePausing    SandboxState = "Pausing"
	StatePaused     SandboxState = "Paused"
	StateResuming   SandboxState = "Resuming"
	StateStopping   SandboxState = "Stopping"
	StateTerminated SandboxState = "Terminated"
	StateFailed     SandboxState = "Failed"
)

// SnapshotState is a snapshot's state. Clients must tolerate values not listed here.
type SnapshotState string

// Snapshot states.
const (
	SnapshotCreating SnapshotState = "Creating"
	SnapshotReady    SnapshotState = "Ready"
	SnapshotFailed   SnapshotState = "Failed"
	SnapshotDeleting SnapshotState = "Deleting"
)

// SandboxStatus is the status object of a sandbox.
type SandboxStatus struct {
	State            SandboxState `json:"state"`
	Reason           string       `json:"reason,omitempty"`
	Message          string       `json:"message,omitempty"`
	LastTransitionAt *time.Time   `json:"lastTransitionAt,omitempty"`
}

// SnapshotStatus is the status object of a snapshot.
type SnapshotStatus struct {
	State            SnapshotState `json:"state"`
	Reason           string        `json:"reason,omitempty"`
	Message          string        `json:"message,omitempty"`
	LastTransitionAt *time.Time    `json:"lastTransitionAt,omitempty"`
}

// ImageSpec names a container image.
type ImageSpec struct {
	URI  string     `json:"uri"`
	Auth *ImageAuth `json:"auth,omitempty"`
}

// ImageAuth holds registry credentials.
type ImageAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// Platform constrains scheduling.
type Platform struct {
	OS   string `json:"os,omitempty"`   // linux | windows
	Arch string `json:"arch,omitempty"` // amd64 | arm64
}

// NetworkPolicy is an egress policy: rules are first-match-wins, then DefaultAction.
type NetworkPolicy struct {
	DefaultAction string        `json:"defaultAction,omitempty"` // allow | deny
	Egress        []NetworkRule `json:"egress,omitempty"`
}

// NetworkRule allows or denies one target (FQDN, *.domain, IP or CIDR).
type NetworkRule struct {
	Action string `json:"action"` // allow | deny
	Target string `json:"target"`
}

// CredentialProxy enables the egress credential vault (needs a NetworkPolicy).
type CredentialProxy struct {
	Enabled bool `json:"enabled"`
}

// Volume is a storage mount; set exactly one of Host, PVC, OSSFS.
type Volume struct {
	Name      string       `json:"name"`
	MountPath string       `json:"mountPath"`
	ReadOnly  bool         `json:"readOnly,omitempty"`
	SubPath   string       `json:"subPath,omitempty"`
	Host      *HostVolume  `json:"host,omitempty"`
	PVC       *PVCVolume   `json:"pvc,omitempty"`
	OSSFS     *OSSFSVolume `json:"ossfs,omitempty"`
}

// HostVolume mounts a host path.
type HostVolume struct {
	Path string `json:"path"`
}

// PVCVolume mounts a Kubernetes persistent volume claim.
type PVCVolume struct {
	ClaimName                  string   `json:"claimName"`
	CreateIfNotExists          *bool    `json:"createIfNotExists,omitempty"`
	DeleteOnSandboxTermination *bool    `json:"deleteOnSandboxTermination,omitempty"`
	StorageClass               string   `json:"storageClass,omitempty"`
	Storage                    string   `json:"storage,omitempty"`
	AccessModes                []string `json:"accessModes,omitempty"`
}

// OSSFSVolume mounts an Alibaba OSS bucket.
type OSSFSVolume struct {
	Bucket          string   `json:"bucket"`
	Endpoint        string   `json:"endpoint"`
	Version         string   `json:"version,omitempty"`
	Options         []string `json:"options,omitempty"`
	AccessKeyID     string   `json:"accessKeyId,omitempty"`
	AccessKeySecret string   `json:"accessKeySecret,omitempty"`
}

// CreateSandboxRequest creates a sandbox from an image or (SnapshotID) a snapshot.
type CreateSandboxRequest struct {
	Image      *ImageSpec // exactly one of Image and SnapshotID (unless Extensions["poolRef"])
	SnapshotID string
	// Entrypoint is required with Image; with SnapshotID the server defaults it.
	Entrypoint []string
	Env        map[string]string
	Metadata   map[string]string
	// ResourceLimits, e.g. {"cpu":"500m","memory":"512Mi"}; required outside pool mode.
	ResourceLimits map[string]string
	// Timeout is the sandbox's time to live, rounded up to whole seconds; 0 omits it
	// (no expiry, manual cleanup). Values below 60 s are rejected with ErrInvalidRequest.
	Timeout         time.Duration
	Platform        *Platform
	NetworkPolicy   *NetworkPolicy
	CredentialProxy *CredentialProxy
	SecureAccess    bool
	Volumes         []Volume
	Extensions      map[string]string
}

type createSandboxWire struct {
	Image           *ImageSpec        `json:"image,omitempty"`
	SnapshotID      string            `json:"snapshotId,omitempty"`
	Entrypoint      []string          `json:"entrypoint,omitempty"`
	Env             map[string]string `json:"env,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	ResourceLimits  map[string]string `json:"resourceLimits,omitempty"`
	Timeout         *int64            `json:"timeout,omitempty"`
	Platform        *Platform         `json:"platform,omitempty"`
	NetworkPolicy   *NetworkPolicy    `json:"networkPolicy,omitempty"`
	CredentialProxy *CredentialProxy  `json:"credentialProxy,omitempty"`
	SecureAccess    bool              `json:"secureAccess,omitempty"`
	Volumes         []Volume          `json:"volumes,omitempty"`
	Extensions      map[string]string `json:"extensions,omitempty"`
}

// Sandbox is a sandbox as the server reports it. CreateSandbox fills only ID,
// Status, Metadata, Platform, ExpiresAt, CreatedAt and Entrypoint.
type Sandbox struct {
	ID         string            `json:"id"`
	Status     SandboxStatus     `json:"status"`
	Image      *ImageSpec        `json:"image,omitempty"`
	SnapshotID string            `json:"snapshotId,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Platform   *Platform         `json:"platform,omitempty"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"` // nil: no expiry
	CreatedAt  time.Time         `json:"createdAt"`
}

// Pagination is the paging block of list responses.
type Pagination struct {
	Page        int  `json:"page"`
	PageSize    int  `json:"pageSize"`
	TotalItems  int  `json:"totalItems"`
	TotalPages  int  `json:"totalPages"`
	HasNextPage bool `json:"hasNextPage"`
}

// ListSandboxesOptions filters and pages ListSandboxes. Zero values mean no filter
// and server defaults (page 1, 20 per page).
type ListSandboxesOptions struct {
	States   []SandboxState    // OR
	Metadata map[string]string // AND of key=value
	Page     int
	PageSize int // server caps at 200
}

// SandboxPage is one page of sandboxes.
type SandboxPage struct {
	Items      []Sandbox  `json:"items"`
	Pagination Pagination `json:"pagination"`
}

// Snapshot is a persistent snapshot of a sandbox.
type Snapshot struct {
	ID        string         `json:"id"`
	SandboxID string         `json:"sandboxId"`
	Name      string         `json:"name,omitempty"`
	Status    SnapshotStatus `json:"status"`
	CreatedAt time.Time      `json:"createdAt"`
}

// ListSnapshotsOptions filters and pages ListSnapshots.
type ListSnapshotsOptions struct {
	SandboxID string
	States    []SnapshotState
	Page      int
	PageSize  int
}

// SnapshotPage is one page of snapshots.
type SnapshotPage struct {
	Items      []Snapshot `json:"items"`
	Pagination Pagination `json:"pagination"`
}

// Endpoint is how to reach one port of a sandbox: an absolute URL (scheme added if
// the server returned none) and headers to send on every request.
type Endpoint struct {
	URL     string
	Headers map[string]string
}

func (r CreateSandboxRequest) wire() (createSandboxWire, error) {
	w := createSandboxWire{
		Image: r.Image, SnapshotID: r.SnapshotID, Entrypoint: r.Entrypoint, Env: r.Env,
		Metadata: r.Metadata, ResourceLimits: r.ResourceLimits, Platform: r.Platform,
		NetworkPolicy: r.NetworkPolicy, CredentialProxy: r.CredentialProxy,
		SecureAccess: r.SecureAccess, Volumes: r.Volumes, Extensions: r.Extensions,
	}
	if r.Image != nil && r.SnapshotID != "" {
		return w, fmt.Errorf("%w: create sandbox: image and snapshotId are mutually exclusive", ErrInvalidRequest)
	}
	if r.Image != nil && r.Image.URI == "" {
		return w, fmt.Errorf("%w: create sandbox: image.uri is empty", ErrInvalidRequest)
	}
	switch {
	case r.Timeout < 0:
		return w, fmt.Errorf("%w: create sandbox: negative timeout %v", ErrInvalidRequest, r.Timeout)
	case r.Timeout > 0:
		secs := int64(math.Ceil(r.Timeout.Seconds()))
		if secs < 60 {
			return w, fmt.Errorf("%w: create sandbox: timeout %v is below the 60 s minimum", ErrInvalidRequest, r.Timeout)
		}
		w.Timeout = &secs
	}
	return w, nil
}

// CreateSandbox creates a sandbox (POST /sandboxes, 202). The sandbox starts Pending;
// use WaitRunning. Never retried. Errors: ErrInvalidRequest before sending,
// *APIError (ErrBadRequest, ErrConflict, ...) from the server; one whose
// image could not be had (sandboxd: 404 or 424) also matches
// ErrImageNotFound, ErrImageUnauthorized or ErrImagePullFailed.
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandboxRequest) (*Sandbox, error) {
	w, err := req.wire()
	if err != nil {
		return nil, err
	}
	var sb Sandbox
	// The error names the request (POST .../sandboxes); the caller names the
	// operation.
	if err := c.t.do(ctx, request{method: "POST", path: "/sandboxes", json: w}, &sb); err != nil {
		return nil, err
	}
	if sb.ID == "" {
		return nil, errors.New("POST /sandboxes: response has no id")
	}
	return &sb, nil
}

// GetSandbox returns the sandbox (GET /sandboxes/{id}). ErrNotFound if unknown.
func (c *Client) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty sandbox id", ErrInvalidRequest)
	}
	var sb Sandbox
	if err := c.t.do(ctx, request{method: "GET", path: "/sandboxes/" + pathEscape(id), idempotent: true}, &sb); err != nil {
		return nil, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return &sb, nil
}

// ListSandboxes returns one page of sandboxes (GET /sandboxes).
func (c *Client) ListSandboxes(ctx context.Context, opts ListSandboxesOptions) (*SandboxPage, error) {
	q := url.Values{}
	for _, s := range opts.States {
		q.Add("state", string(s))
	}
	if len(opts.Metadata) > 0 {
		m := url.Values{}
		for k, v := range opts.Metadata {
			m.Set(k, v)
		}
		q.Set("metadata", m.Encode())
	}
	addPaging(q, opts.Page, opts.PageSize)
	var p SandboxPage
	if err := c.t.do(ctx, request{method: "GET", path: "/sandboxes", query: q, idempotent: true}, &p); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return &p, nil
}

func addPaging(q url.Values, page, size int) {
	if page > 0 {
		q.Set("page", strconv.Itoa(page))
	}
	if size > 0 {
		q.Set("pageSize", strconv.Itoa(size))
	}
}

// DeleteSandbox deletes the sandbox (DELETE /sandboxes/{id}, 204). Deletion is
// asynchronous on some runtimes. ErrNotFound if unknown.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty sandbox id", ErrInvalidRequest)
	}
	if err := c.t.do(ctx, request{method: "DELETE", path: "/sandboxes/" + pathEscape(id), idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	return nil
}

// PauseSandbox asks the server to pause the sandbox (202; poll GetSandbox for
// Paused). Not retried. ErrConflict if the state does not allow it.
func (c *Client) PauseSandbox(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty sandbox id", ErrInvalidRequest)
	}
	if err := c.t.do(ctx, request{method: "POST", path: "/sandboxes/" + pathEscape(id) + "/pause"}, nil); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	return nil
}

// ResumeSandbox asks the server to resume a paused sandbox (202; use WaitRunning).
// Not retried.
func (c *Client) ResumeSandbox(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty sandbox id", ErrInvalidRequest)
	}
	if err := c.t.do(ctx, request{method: "POST", path: "/sandboxes/" + pathEscape(id) + "/resume"}, nil); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	return nil
}

// PauseAndWait pauses the sandbox and returns it once it is Paused. It asks
// the server to answer once the transition is done, with the sandbox
// (Prefer: return=representation, RFC 7240; sandboxd does): then the answer
// is the wait. A server that answers 202 without the sandbox in its new state
// (OpenSandbox's) is polled as WaitPaused polls. Errors are those of
// PauseSandbox and WaitPaused.
func (c *Client) PauseAndWait(ctx context.Context, id string) (*Sandbox, error) {
	return c.transitionAndWait(ctx, id, "pause", StatePaused, "wait paused")
}

// ResumeAndWait is PauseAndWait for resume: it returns the sandbox once it is
// Running.
func (c *Client) ResumeAndWait(ctx context.Context, id string) (*Sandbox, error) {
	return c.transitionAndWait(ctx, id, "resume", StateRunning, "wait running")
}

func (c *Client) transitionAndWait(ctx context.Context, id, action string, want SandboxState, op string) (*Sandbox, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty sandbox id", ErrInvalidRequest)
	}
	var sb Sandbox
	req := request{method: "POST", path: "/sandboxes/" + pathEscape(id) + "/" + action,
		header: http.Header{"Prefer": {c.t.prefer(ctx)}}}
	if err := c.t.do(ctx, req, &sb); err != nil {
		return nil, fmt.Errorf("%s sandbox %s: %w", action, id, err)
	}
	if sb.ID == id {
		switch sb.Status.State {
		case want:
			return &sb, nil
		case StateFailed, StateTerminated:
			return nil, fmt.Errorf("%s: %w", op, sandboxFailed(id, &sb))
		}
	}
	return c.waitState(ctx, id, want, op)
}

// preferWait is the longest a request asks the server to hold its answer
// until a transition is done (Prefer: wait): long enough for a pause, a resume
// or a snapshot of a few hundred megabytes, short enough for the proxies on
// the way; a longer transition is then polled, at most pollMax apart.
const preferWait = 10 * time.Second

// prefer is the Prefer header of the calls that wait for a transition: the
// resource in its state once the transition is done (or wait has passed),
// wait at most half the request timeout and half of what is left of ctx, so
// that the answer, naming the resource, comes before the caller gives up.
func (t *transport) prefer(ctx context.Context) string {
	wait := preferWait
	if t.timeout > 0 {
		wait = min(wait, t.timeout/2)
	}
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	if secs := int(wait / time.Second); secs > 0 {
		return "return=representation, wait=" + strconv.Itoa(secs)
	}
	return "return=representation"
}

// RenewExpiration sets the sandbox's expiry to expiresAt (which must be in the
// future and later than the current one) and returns the new expiry. Retried
// (absolute value, idempotent).
func (c *Client) RenewExpiration(ctx context.Context, id string, expiresAt time.Time) (time.Time, error) {
	if id == "" {
		return time.Time{}, fmt.Errorf("%w: empty sandbox id", ErrInvalidRequest)
	}
	body := map[string]string{"expiresAt": expiresAt.UTC().Format(time.RFC3339Nano)}
	var out struct {
		ExpiresAt time.Time `json:"expiresAt"`
	}
	if err := c.t.do(ctx, request{method: "POST", path: "/sandboxes/" + pathEscape(id) + "/renew-expiration",
		json: body, idempotent: true}, &out); err != nil {
		return time.Time{}, fmt.Errorf("renew sandbox %s: %w", id, err)
	}
	return out.ExpiresAt, nil
}

// PatchMetadata applies a JSON merge patch to the sandbox's metadata: a non-nil
// value sets the key, a nil value deletes it, absent keys are kept. Returns the
// updated sandbox. Retried (idempotent).
func (c *Client) PatchMetadata(ctx context.Context, id string, patch map[string]*string) (*Sandbox, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty sandbox id", ErrInvalidRequest)
	}
	if patch == nil {
		patch = map[string]*string{}
	}
	var sb Sandbox
	if err := c.t.do(ctx, request{method: "PATCH", path: "/sandboxes/" + pathEscape(id) + "/metadata",
		json: patch, idempotent: true}, &sb); err != nil {
		return nil, fmt.Errorf("patch sandbox %s metadata: %w", id, err)
	}
	return &sb, nil
}

// GetEndpoint returns how to reach port inside the sandbox. With
// Config.UseServerProxy it asks for the server-proxied endpoint, and the URL is
// {BaseURL}/sandboxes/{id}/proxy/{port} (so it is reachable wherever the lifecycle
// API is); the execd and egress tokens default to the API key there, as the official
// SDK does.
func (c *Client) GetEndpoint(ctx context.Context, id string, port int) (Endpoint, error) {
	if id == "" {
		return Endpoint{}, fmt.Errorf("%w: empty sandbox id", ErrInvalidRequest)
	}
	if port < 1 || port > 65535 {
		return Endpoint{}, fmt.Errorf("%w: port %d out of range", ErrInvalidRequest, port)
	}
	q := url.Values{}
	if c.useServerProxy {
		q.Set("use_server_proxy", "true")
	}
	var out struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
	path := "/sandboxes/" + pathEscape(id) + "/endpoints/" + strconv.Itoa(port)
	if err := c.t.do(ctx, request{method: "GET", path: path, query: q, idempotent: true}, &out); err != nil {
		return Endpoint{}, fmt.Errorf("get endpoint %s:%d: %w", id, port, err)
	}
	ep := Endpoint{Headers: out.Headers}
	if ep.Headers == nil {
		ep.Headers = map[string]string{}
	}
	if c.useServerProxy {
		ep.URL = c.ProxyURL(id, port)
		if c.apiKey != "" {
			switch port {
			case ExecdPort:
				setDefaultHeader(ep.Headers, HeaderExecdToken, c.apiKey)
			case EgressPort:
				setDefaultHeader(ep.Headers, HeaderEgressToken, c.apiKey)
			}
		}
		return ep, nil
	}
	if out.Endpoint == "" {
		return Endpoint{}, fmt.Errorf("get endpoint %s:%d: response has no endpoint", id, port)
	}
	ep.URL = c.absolute(out.Endpoint)
	return ep, nil
}

// ProxyURL returns {BaseURL}/sandboxes/{id}/proxy/{port}, the server-proxy route.
func (c *Client) ProxyURL(id string, port int) string {
	return c.t.url("/sandboxes/"+pathEscape(id)+"/proxy/"+strconv.Itoa(port), nil)
}

func setDefaultHeader(h map[string]string, name, value string) {
	for k := range h {
		if strings.EqualFold(k, name) {
			return
		}
	}
	h[name] = value
}

// absolute adds the base URL's scheme to a scheme-less endpoint and applies
// Config.EndpointHostRewrite.
func (c *Client) absolute(ep string) string {
	if !strings.HasPrefix(ep, "http://") && !strings.HasPrefix(ep, "https://") {
		ep = c.t.base.Scheme + "://" + ep
	}
	ep = strings.TrimRight(ep, "/")
	if len(c.hostRewrite) == 0 {
		return ep
	}
	u, err := url.Parse(ep)
	if err != nil {
		return ep
	}
	if to, ok := c.hostRewrite[u.Hostname()]; ok {
		if port := u.Port(); port != "" {
			u.Host = net.JoinHostPort(to, port)
		} else {
			u.Host = to
		}
	}
	return u.String()
}

// Poll schedule of the wait loops: each poll a pollFraction of the time
// waited so far after the one before, at least pollFirst and at most the
// loop's maximum (pollMax for WaitRunning, WaitPaused, WaitSnapshotReady).
// Transitions of sandboxd take from a fraction of a millisecond (pause,
// resume, a small snapshot) to a few hundred: a flat 100 ms first poll saw a
// 36 ms create at 111 ms and a 4 ms snapshot at 103 ms, and a 2 ms floor a
// 2.6 ms snapshot at 4 ms. This schedule sees a transition at most pollFirst
// or 1/pollFraction of its duration late (or the maximum), for about 75
// polls in the first second (sequential: a remote server's round trip
// spaces them further).
const (
	pollFirst    = 250 * time.Microsecond
	pollFraction = 10
	pollMax      = 100 * time.Millisecond
)

// pollSchedule is the wait loops' schedule (see pollFirst), from its start.
type pollSchedule struct {
	start time.Time
	max   time.Duration
	now   func() time.Time
}

// pollBackOff starts a wait loop's schedule, polls at most maxInterval apart,
// with no overall limit (the context bounds it).
func pollBackOff(maxInterval time.Duration) *pollSchedule {
	return &pollSchedule{start: time.Now(), max: maxInterval, now: time.Now}
}

// NextBackOff returns how long to wait before the next poll.
func (p *pollSchedule) NextBackOff() time.Duration {
	d := p.now().Sub(p.start) / pollFraction
	return min(max(d, pollFirst), p.max)
}

// WaitRunning polls the sandbox (each poll a tenth of the time waited so far after the
// one before, at least 250 µs and at most 100 ms apart) until it is Running, and returns it. Failed or Terminated end the wait with a *StateError
// wrapping ErrSandboxFailed; ErrNotFound and other non-retryable API errors end it
// too. Bounded only by ctx: give it a deadline.
func (c *Client) WaitRunning(ctx context.Context, id string) (*Sandbox, error) {
	return c.waitState(ctx, id, StateRunning, "wait running")
}

// WaitPaused is WaitRunning for Paused (after PauseSandbox).
func (c *Client) WaitPaused(ctx context.Context, id string) (*Sandbox, error) {
	return c.waitState(ctx, id, StatePaused, "wait paused")
}

func (c *Client) waitState(ctx context.Context, id string, want SandboxState, op string) (*Sandbox, error) {
	bo := pollBackOff(pollMax)
	for {
		sb, err := c.GetSandbox(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		switch sb.Status.State {
		case want:
			return sb, nil
		case StateFailed, StateTerminated:
			return nil, sandboxFailed(id, sb)
		}
		if err := sleepCtx(ctx, bo.NextBackOff()); err != nil {
			return nil, fmt.Errorf("%s %s (last state %s): %w", op, id, sb.Status.State, err)
		}
	}
}

func sandboxFailed(id string, sb *Sandbox) *StateError {
	return &StateError{Kind: "sandbox", ID: id, State: string(sb.Status.State),
		Reason: sb.Status.Reason, Message: sb.Status.Message, Err: ErrSandboxFailed}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// CreateSnapshot starts a snapshot of a Running sandbox (POST
// /sandboxes/{id}/snapshots, 202, state Creating). name may be empty. Never
// retried. Use WaitSnapshotReady.
func (c *Client) CreateSnapshot(ctx context.Context, sandboxID, name string) (*Snapshot, error) {
	return c.createSnapshot(ctx, sandboxID, name, nil)
}

func (c *Client) createSnapshot(ctx context.Context, sandboxID, name string, header http.Header) (*Snapshot, error) {
	if sandboxID == "" {
		return nil, fmt.Errorf("%w: empty sandbox id", ErrInvalidRequest)
	}
	var body any
	if name != "" {
		body = map[string]string{"name": name}
	} else {
		body = struct{}{}
	}
	var s Snapshot
	if err := c.t.do(ctx, request{method: "POST", path: "/sandboxes/" + pathEscape(sandboxID) + "/snapshots", json: body, header: header}, &s); err != nil {
		return nil, fmt.Errorf("create snapshot of %s: %w", sandboxID, err)
	}
	if s.ID == "" {
		return nil, fmt.Errorf("create snapshot of %s: response has no id", sandboxID)
	}
	return &s, nil
}

// CreateSnapshotAndWait creates a snapshot of a Running sandbox and returns
// it once it is Ready. It asks the server to answer once the snapshot is done
// (Prefer: return=representation, wait=N, RFC 7240; sandboxd does, for at
// most N seconds); a snapshot still Creating in the answer is then polled as
// WaitSnapshotReady polls. Failed ends the wait with a *StateError wrapping
// ErrSnapshotFailed. Never retried. When the snapshot was created but the
// wait failed, it returns the snapshot as created with the error (nil when
// the creation failed).
func (c *Client) CreateSnapshotAndWait(ctx context.Context, sandboxID, name string) (*Snapshot, error) {
	s, err := c.createSnapshot(ctx, sandboxID, name, http.Header{"Prefer": {c.t.prefer(ctx)}})
	if err != nil {
		return nil, err
	}
	switch s.Status.State {
	case SnapshotReady:
		return s, nil
	case SnapshotFailed:
		return s, fmt.Errorf("wait snapshot ready: %w", snapshotFailed(s.ID, s))
	}
	ready, err := c.WaitSnapshotReady(ctx, s.ID)
	if err != nil {
		return s, err
	}
	return ready, nil
}

// GetSnapshot returns the snapshot (GET /snapshots/{id}). ErrNotFound if unknown.
func (c *Client) GetSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty snapshot id", ErrInvalidRequest)
	}
	var s Snapshot
	if err := c.t.do(ctx, request{method: "GET", path: "/snapshots/" + pathEscape(id), idempotent: true}, &s); err != nil {
		return nil, fmt.Errorf("get snapshot %s: %w", id, err)
	}
	return &s, nil
}

// ListSnapshots returns one page of snapshots (GET /snapshots).
func (c *Client) ListSnapshots(ctx context.Context, opts ListSnapshotsOptions) (*SnapshotPage, error) {
	q := url.Values{}
	if opts.SandboxID != "" {
		q.Set("sandboxId", opts.SandboxID)
	}
	for _, s := range opts.States {
		q.Add("state", string(s))
	}
	addPaging(q, opts.Page, opts.PageSize)
	var p SnapshotPage
	if err := c.t.do(ctx, request{method: "GET", path: "/snapshots", query: q, idempotent: true}, &p); err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return &p, nil
}

// DeleteSnapshot deletes the snapshot (204). ErrConflict while it is Creating.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty snapshot id", ErrInvalidRequest)
	}
	if err := c.t.do(ctx, request{method: "DELETE", path: "/snapshots/" + pathEscape(id), idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return nil
}

// WaitSnapshotReady polls the snapshot as WaitRunning polls a sandbox
// until it is Ready. Failed ends the wait with a *StateError wrapping
// ErrSnapshotFailed. Bounded only by ctx.
func (c *Client) WaitSnapshotReady(ctx context.Context, id string) (*Snapshot, error) {
	bo := pollBackOff(pollMax)
	for {
		s, err := c.GetSnapshot(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("wait snapshot ready: %w", err)
		}
		switch s.Status.State {
		case SnapshotReady:
			return s, nil
		case SnapshotFailed:
			return nil, snapshotFailed(id, s)
		}
		if err := sleepCtx(ctx, bo.NextBackOff()); err != nil {
			return nil, fmt.Errorf("wait snapshot %s ready (last state %s): %w", id, s.Status.State, err)
		}
	}
}

func snapshotFailed(id string, s *Snapshot) *StateError {
	return &StateError{Kind: "snapshot", ID: id, State: string(s.Status.State),
		Reason: s.Status.Reason, Message: s.Status.Message, Err: ErrSnapshotFailed}
}
