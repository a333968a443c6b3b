package sandboxd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/egress"
)

// State is a sandbox lifecycle state (API-NOTES §5).
type State string

// The sandbox states. Clients must tolerate values they do not know.
const (
	StatePending    State = "Pending"
	StateRunning    State = "Running"
	StatePausing    State = "Pausing"
	StatePaused     State = "Paused"
	StateResuming   State = "Resuming"
	StateStopping   State = "Stopping"
	StateTerminated State = "Terminated"
	StateFailed     State = "Failed"
)

// Final reports whether s is a state a sandbox never leaves.
func (s State) Final() bool { return s == StateTerminated || s == StateFailed }

// Status reasons this server sets.
const (
	ReasonUserDelete      = "user_delete"
	ReasonTTLExpiry       = "ttl_expiry"
	ReasonRuntimeError    = "runtime_error"
	ReasonProvisionTimout = "provision_timeout"
	ReasonEntrypointExit  = "entrypoint_exited"
	ReasonRestart         = "sandboxd_restart"
	ReasonShutdown        = "sandboxd_shutdown"
	// The image of a create could not be had: the registry has no such
	// image (or tag, or not for this platform), refused the credentials
	// (or wants some), or the pull failed otherwise (unreachable, a blob
	// whose digest does not match, a layer that cannot be unpacked). The
	// status message names the image and gives the registry's answer.
	ReasonImageNotFound     = "IMAGE_NOT_FOUND"
	ReasonImageUnauthorized = "IMAGE_UNAUTHORIZED"
	ReasonImagePullFailed   = "IMAGE_PULL_FAILED"
)

// ExecdPort is the port clients ask an endpoint for to reach execd.
const ExecdPort = 44772

// ExecdTokenHeader carries the per-sandbox execd token.
const ExecdTokenHeader = "X-EXECD-ACCESS-TOKEN"

// APIKeyHeader carries the lifecycle API key.
const APIKeyHeader = "OPEN-SANDBOX-API-KEY"

// ImageSpec names the image of a sandbox.
type ImageSpec struct {
	URI  string          `json:"uri"`
	Auth json.RawMessage `json:"auth,omitempty"`
}

// Platform is a platform constraint.
type Platform struct {
	OS   string `json:"os"`
	Arch string `json:"arch"`
}

// Status is a sandbox's lifecycle status.
type Status struct {
	State            State      `json:"state"`
	Reason           string     `json:"reason,omitempty"`
	Message          string     `json:"message,omitempty"`
	LastTransitionAt *time.Time `json:"lastTransitionAt,omitempty"`
}

// CreateRequest is the body of POST /sandboxes.
type CreateRequest struct {
	Image          *ImageSpec        `json:"image,omitempty"`
	SnapshotID     string            `json:"snapshotId,omitempty"`
	Entrypoint     []string          `json:"entrypoint,omitempty"`
	ResourceLimits map[string]string `json:"resourceLimits,omitempty"`
	Timeout        *int64            `json:"timeout,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Platform       *Platform         `json:"platform,omitempty"`
	// NetworkPolicy ({defaultAction, egress:[{action, target}]}), unless
	// absent or null, runs the sandbox in its own network namespace whose only
	// way out is its egress proxy (see egress.Policy).
	NetworkPolicy json.RawMessage `json:"networkPolicy,omitempty"`
	// CredentialProxy enables the credential vault and TLS termination with a
	// per-sandbox CA for credential injection.
	CredentialProxy *CredentialProxy  `json:"credentialProxy,omitempty"`
	SecureAccess    bool              `json:"secureAccess,omitempty"`
	Volumes         json.RawMessage   `json:"volumes,omitempty"`
	Extensions      map[string]string `json:"extensions,omitempty"`
}

// CredentialProxy is the credentialProxy field of a create request.
type CredentialProxy struct {
	Enabled bool `json:"enabled"`
}

// Sandbox is the resource returned by get, list and metadata patch. A sandbox
// created from a snapshot has SnapshotID and no Image.
type Sandbox struct {
	ID         string            `json:"id"`
	Image      *ImageSpec        `json:"image,omitempty"`
	SnapshotID string            `json:"snapshotId,omitempty"`
	Platform   *Platform         `json:"platform,omitempty"`
	Status     Status            `json:"status"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Entrypoint []string          `json:"entrypoint"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
}

// createResponse is the body of a 202 create: no image.
type createResponse struct {
	ID         string            `json:"id"`
	Platform   *Platform         `json:"platform,omitempty"`
	Status     Status            `json:"status"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Entrypoint []string          `json:"entrypoint"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
}

// Pagination is the pagination object of list responses.
type Pagination struct {
	Page        int  `json:"page"`
	PageSize    int  `json:"pageSize"`
	TotalItems  int  `json:"totalItems"`
	TotalPages  int  `json:"totalPages"`
	HasNextPage bool `json:"hasNextPage"`
}

type listResponse struct {
	Items      []Sandbox  `json:"items"`
	Pagination Pagination `json:"pagination"`
}

// Endpoint is the body of GET /sandboxes/{id}/endpoints/{port}.
type Endpoint struct {
	Endpoint string            `json:"endpoint"`
	Headers  map[string]string `json:"headers,omitempty"`
}

type renewRequest struct {
	ExpiresAt *string `json:"expiresAt"`
}

type renewResponse struct {
	ExpiresAt time.Time `json:"expiresAt"`
}

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// SnapshotState is a snapshot lifecycle state. Clients must tolerate values
// they do not know.
type SnapshotState string

// The snapshot states: Creating until the capture ends, then Ready or Failed;
// Deleting while a delete runs.
const (
	SnapshotCreating SnapshotState = "Creating"
	SnapshotReady    SnapshotState = "Ready"
	SnapshotFailed   SnapshotState = "Failed"
	SnapshotDeleting SnapshotState = "Deleting"
)

// Snapshot status reasons this server sets.
const (
	ReasonSnapshotAccepted = "snapshot_accepted"
	ReasonSnapshotReady    = "snapshot_ready"
	ReasonSnapshotFailed   = "snapshot_capture_failed"
	ReasonSnapshotDeleting = "snapshot_deleting"
	// ReasonSnapshotCorrupt is a sandbox created from a snapshot whose
	// restore met a blob that does not hash to its key (or has the wrong
	// size): its message names the file.
	ReasonSnapshotCorrupt = "SNAPSHOT_CORRUPT"
)

// SnapshotStatus is a snapshot's lifecycle status.
type SnapshotStatus struct {
	State            SnapshotState `json:"state"`
	Reason           string        `json:"reason,omitempty"`
	Message          string        `json:"message,omitempty"`
	LastTransitionAt *time.Time    `json:"lastTransitionAt,omitempty"`
}

// Snapshot is the resource of the snapshot routes: a point-in-time capture of
// a sandbox's filesystem that outlives the sandbox.
type Snapshot struct {
	ID        string         `json:"id"`
	SandboxID string         `json:"sandboxId"`
	Name      string         `json:"name,omitempty"`
	Status    SnapshotStatus `json:"status"`
	CreatedAt time.Time      `json:"createdAt"`
}

type createSnapshotRequest struct {
	Name *string `json:"name,omitempty"`
}

type snapshotListResponse struct {
	Items      []Snapshot `json:"items"`
	Pagination Pagination `json:"pagination"`
}

// limits are parsed resource limits; zero means none.
type limits struct {
	MilliCPU    int64 `json:"milliCpu,omitempty"`
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
}

// record is what the server persists per sandbox.
type record struct {
	Sandbox
	Env         map[string]string `json:"env,omitempty"`
	Limits      limits            `json:"limits"`
	ExecdPort   int               `json:"execdPort,omitempty"`
	ExecdToken  string            `json:"execdToken,omitempty"`
	InitPID     int               `json:"initPid,omitempty"`
	ImageSource string            `json:"imageSource,omitempty"`
	// LowerImage is the image name of a sandbox created from a snapshot: that
	// of the snapshot's source, its overlay's lower layer.
	LowerImage string `json:"lowerImage,omitempty"`
	// ImageDigest is the manifest digest of a pulled image (that of the
	// snapshot's source for a sandbox created from a snapshot).
	ImageDigest string `json:"imageDigest,omitempty"`
	// NetworkPolicy is the initial egress policy of a sandbox that runs in its
	// own network namespace behind the egress proxy (Egress); later changes
	// through the egress API are not recorded.
	NetworkPolicy *egress.Policy `json:"networkPolicy,omitempty"`
	// Egress says the sandbox has its own network namespace and egress proxy.
	Egress          bool   `json:"egress,omitempty"`
	CredentialProxy bool   `json:"credentialProxy,omitempty"`
	EgressToken     string `json:"egressToken,omitempty"`
	// EgressAPIPort is the host loopback port of the egress API while it runs.
	EgressAPIPort int `json:"egressApiPort,omitempty"`
	// Volumes are the sandbox's bind mounts (host and pvc volumes).
	Volumes []volumeMount `json:"volumes,omitempty"`
	// IDBase is the first host id of the sandbox's id range (see idRanges);
	// 0 without isolation, or in a record from before ranges were per sandbox.
	IDBase uint32 `json:"idBase,omitempty"`
	// Seq orders sandboxes created in the same millisecond.
	Seq int64 `json:"seq"`
	// History is the last transitions, oldest first, for diagnostics.
	History []Status `json:"history,omitempty"`
}

var (
	labelName   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	dnsSubdom   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	envName     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	maxMetaVal  = 1024
	reservedPfx = "opensandbox.io/"
)

// validateMetaKey applies the Kubernetes label-key rules: an optional DNS
// subdomain prefix and a name of at most 63 characters. Keys under
// opensandbox.io/ are reserved.
func validateMetaKey(k string) error {
	if strings.HasPrefix(k, reservedPfx) {
		return invalid("INVALID_METADATA_FORMAT", "metadata", "key %q uses the reserved prefix %s", k, reservedPfx)
	}
	name := k
	if i := strings.LastIndexByte(k, '/'); i >= 0 {
		prefix := k[:i]
		name = k[i+1:]
		if len(prefix) == 0 || len(prefix) > 253 || !dnsSubdom.MatchString(prefix) {
			return invalid("INVALID_METADATA_FORMAT", "metadata", "key %q: prefix must be a DNS subdomain", k)
		}
	}
	if len(name) == 0 || len(name) > 63 || !labelName.MatchString(name) {
		return invalid("INVALID_METADATA_FORMAT", "metadata", "key %q: name must be 1-63 characters of [A-Za-z0-9-_.], alphanumeric at both ends", k)
	}
	return nil
}

// validateMetaValue is more lenient than Kubernetes label values (which forbid
// spaces) because the protocol's own examples use free text: at most 1024 bytes
// of valid UTF-8 without control characters.
func validateMetaValue(k, v string) error {
	if len(v) > maxMetaVal {
		return invalid("INVALID_METADATA_FORMAT", "metadata", "value of %q is longer than %d bytes", k, maxMetaVal)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return invalid("INVALID_METADATA_FORMAT", "metadata", "value of %q contains a control character or invalid UTF-8", k)
		}
	}
	return nil
}

func validateMetadata(m map[string]string) error {
	for k, v := range m {
		if err := validateMetaKey(k); err != nil {
			return err
		}
		if err := validateMetaValue(k, v); err != nil {
			return err
		}
	}
	return nil
}

// validateCreate checks a create request and returns its parsed limits.
func (c Config) validateCreate(req *CreateRequest) (limits, error) {
	var lim limits
	switch {
	case req.SnapshotID != "" && req.Image != nil:
		return lim, invalid("INVALID_REQUEST", "image", "image and snapshotId are mutually exclusive")
	case req.SnapshotID != "":
		if len(req.Entrypoint) > 0 && req.Entrypoint[0] == "" {
			return lim, invalid("INVALID_REQUEST", "entrypoint", "the first element of entrypoint must be a command")
		}
	case req.Image == nil || strings.TrimSpace(req.Image.URI) == "":
		return lim, invalid("INVALID_REQUEST", "image", "image.uri or snapshotId is required")
	case len(req.Entrypoint) > 0 && req.Entrypoint[0] == "":
		// Without one, the image's Entrypoint and Cmd (see Server.start).
		return lim, invalid("INVALID_REQUEST", "entrypoint", "the first element of entrypoint must be a command")
	}
	if req.Timeout != nil {
		t := *req.Timeout
		if t < 60 {
			return lim, invalid("INVALID_REQUEST", "timeout", "timeout must be at least 60 seconds or null, got %d", t)
		}
		if time.Duration(t)*time.Second > c.MaxTimeout {
			return lim, invalid("INVALID_REQUEST", "timeout", "timeout %d s exceeds the maximum of %d s", t, int64(c.MaxTimeout/time.Second))
		}
	}
	if req.Platform != nil {
		if req.Platform.OS != "linux" || req.Platform.Arch != runtime.GOARCH {
			return lim, invalid("INVALID_REQUEST", "platform", "platform %s/%s cannot be satisfied: this server runs linux/%s", req.Platform.OS, req.Platform.Arch, runtime.GOARCH)
		}
	}
	if req.SecureAccess {
		return lim, invalid("INVALID_REQUEST", "secureAccess", "secureAccess is only supported by the Kubernetes gateway")
	}
	if _, err := parseVolumes(req.Volumes); err != nil {
		return lim, err
	}
	for k, v := range req.Env {
		if !envName.MatchString(k) {
			return lim, invalid("INVALID_REQUEST", "env", "invalid environment variable name %q", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return lim, invalid("INVALID_REQUEST", "env", "the value of %s contains a NUL byte", k)
		}
	}
	for i, a := range req.Entrypoint {
		if strings.IndexByte(a, 0) >= 0 {
			return lim, invalid("INVALID_REQUEST", "entrypoint", "element %d contains a NUL byte", i)
		}
	}
	if err := validateMetadata(req.Metadata); err != nil {
		return lim, err
	}
	if _, on, err := parseNetworkPolicy(req); err != nil {
		return lim, err
	} else if on && c.NoIsolation {
		return lim, invalid("INVALID_REQUEST", "networkPolicy", "networkPolicy and credentialProxy need namespace isolation; this server runs without it (NoIsolation) and cannot enforce them")
	}
	lim, err := parseLimits(req.ResourceLimits)
	if err == nil && lim.MemoryBytes == 0 && c.DefaultMemory > 0 {
		lim.MemoryBytes = c.DefaultMemory
	}
	return lim, err
}

// hasNetworkPolicy reports whether req carries a networkPolicy (not absent or null).
func hasNetworkPolicy(req *CreateRequest) bool {
	raw := bytes.TrimSpace(req.NetworkPolicy)
	return len(raw) > 0 && string(raw) != "null"
}

// parseNetworkPolicy decodes and checks a create request's networkPolicy. on
// reports whether the sandbox gets its own network namespace behind the egress
// proxy: with a networkPolicy (null or absent: no) or credentialProxy.enabled
// (then allow-all; the server lays HostPolicy over it unless HostNetwork).
// As in the lifecycle spec, an empty policy ({}) allows everything, and a policy
// with rules but no defaultAction denies what no rule allows.
func parseNetworkPolicy(req *CreateRequest) (pol *egress.Policy, on bool, err error) {
	raw := bytes.TrimSpace(req.NetworkPolicy)
	cp := req.CredentialProxy != nil && req.CredentialProxy.Enabled
	if !hasNetworkPolicy(req) {
		if !cp {
			return nil, false, nil
		}
		return &egress.Policy{DefaultAction: egress.Allow}, true, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var p egress.Policy
	if err := dec.Decode(&p); err != nil || dec.More() {
		return nil, false, invalid("INVALID_REQUEST", "networkPolicy", "networkPolicy must be one object {defaultAction, egress:[{action, target}]} (%v)", err)
	}
	if p.DefaultAction == "" && len(p.Egress) == 0 {
		p.DefaultAction = egress.Allow
	}
	if _, err := egress.NewEnforcer(&p, egress.DefaultMaxRules); err != nil {
		if errors.Is(err, egress.ErrInvalidPolicy) || errors.Is(err, egress.ErrTooManyRules) {
			return nil, false, invalid("INVALID_REQUEST", "networkPolicy", "%v", err)
		}
		return nil, false, err
	}
	return &p, true, nil
}

// parseMetadataFilter decodes the metadata query value: URL-encoded form data
// where every pair must have a '='.
func parseMetadataFilter(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, pair := range strings.Split(s, "&") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, invalid("INVALID_METADATA_FORMAT", "metadata", "filter pair %q has no '='", pair)
		}
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, invalid("INVALID_METADATA_FORMAT", "metadata", "filter key %q: %v", k, err)
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return nil, invalid("INVALID_METADATA_FORMAT", "metadata", "filter value %q: %v", v, err)
		}
		if key == "" {
			return nil, invalid("INVALID_METADATA_FORMAT", "metadata", "empty filter key")
		}
		out[key] = val
	}
	return out, nil
}

// sandboxTime is t as the lifecycle API gives times: UTC, to the microsecond,
// the precision of the real server's (Python) datetimes. Milliseconds would
// misstate when a transition of a few milliseconds ended by up to one.
func sandboxTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// maxHistory bounds the transitions a record keeps for diagnostics.
const maxHistory = 64

func (r *record) setStatus(s State, reason, msg string) {
	now := sandboxTime(time.Now())
	r.Status = Status{State: s, Reason: reason, Message: msg, LastTransitionAt: &now}
	r.History = append(r.History, r.Status)
	if len(r.History) > maxHistory {
		r.History = append(r.History[:0:0], r.History[len(r.History)-maxHistory:]...)
	}
}

// imageURI is the image name the sandbox's lower layer resolves from.
func (r *record) imageURI() string {
	if r.Image != nil {
		return r.Image.URI
	}
	return r.LowerImage
}

func (r *record) String() string { return fmt.Sprintf("sandbox %s (%s)", r.ID, r.Status.State) }
