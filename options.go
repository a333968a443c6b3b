package alineo

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
	"go.opentelemetry.io/otel/trace"
)

// Options configures a Client. They mirror the SandboxClientOptions of the
// TypeScript SDK, with the storage adapter split in its two halves.
type Options struct {
	// BaseURL is the OpenSandbox server URL, e.g. "http://localhost:8080". Required.
	BaseURL string
	// APIKey is the OpenSandbox API key; empty for a server without auth.
	APIKey string
	// Adapter is the ledger every event is appended to and Resume replays
	// from. Required. A Store (memory, sqlite, postgres) is a Ledger and a
	// ReadModel at once: passed here it serves as both, unless ReadModel is set.
	Adapter adapters.Ledger
	// ReadModel serves Sandboxes().List and ListByName, environments, and
	// Resume without ResumeOptions.Name (to find the session of a sandbox id).
	// Default: Adapter, when it is also an adapters.ReadModel. Without one,
	// those calls fail with an error wrapping ErrNoReadModel, and
	// Sandboxes().Get derives a session's details from the ledger.
	ReadModel adapters.ReadModel
	// AwaitReadModel, when set, is called before every ReadModel query, so
	// that the client reads its own writes from a read model kept
	// asynchronously (the tables a projector keeps from the bus): it returns
	// once the read model holds everything the Adapter acknowledged so far
	// (or ctx's error). Nil: queries go to the ReadModel at once.
	AwaitReadModel func(ctx context.Context) error
	// MaxConcurrency caps the sandboxes alive at once through this client: each
	// holds a slot from creation until Close, and creators wait first come first
	// served. 0 means no limit.
	MaxConcurrency int
	// UseServerProxy routes execd and proxy traffic through the server.
	UseServerProxy bool
	// Logger receives debug and warning logs. Default: discard.
	Logger *slog.Logger
	// HTTPClient is used for every call to the server. Default: a client on
	// http.DefaultTransport. Its Timeout is not applied to command streams.
	HTTPClient *http.Client
	// CredentialBroker holds the values of Sandbox.Credentials. Default: an
	// OpenSandboxBroker on the server's credential vault (port 18080).
	CredentialBroker CredentialBroker
	// TracerProvider receives the client's OpenTelemetry spans (see the
	// package doc's Traces). Default: the global provider, otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Actor names who causes what this client records: every entry its
	// handles write carries it (events.Entry.Actor), unless the call that
	// made the handle named another (WithActor). At most events.MaxActorLen
	// bytes of UTF-8 without control characters. Default: DefaultActor(),
	// the process's user@host.
	Actor string
}

func (o Options) validate() error {
	if strings.TrimSpace(o.BaseURL) == "" {
		return &OptionError{Field: "BaseURL", Reason: "is empty"}
	}
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &OptionError{Field: "BaseURL", Reason: "must be an absolute http(s) URL, got " + quote(o.BaseURL)}
	}
	if o.Adapter == nil {
		return &OptionError{Field: "Adapter", Reason: "is nil; pass a storage adapter (memory, sqlite, postgres)"}
	}
	if o.MaxConcurrency < 0 {
		return &OptionError{Field: "MaxConcurrency", Reason: "is negative"}
	}
	if err := events.ValidateActor(o.Actor); err != nil {
		return &OptionError{Field: "Actor", Reason: err.Error()}
	}
	return nil
}

// Resources are the sandbox's resource limits, in Kubernetes quantity notation.
type Resources struct {
	CPU    string // e.g. "500m"; default "1"
	Memory string // e.g. "512Mi"; default "1Gi"
	GPU    string // e.g. "1"; empty for none
}

func (r Resources) withDefaults() Resources {
	if r.CPU == "" {
		r.CPU = "1"
	}
	if r.Memory == "" {
		r.Memory = "1Gi"
	}
	return r
}

func (r Resources) limits() map[string]string {
	m := map[string]string{"cpu": r.CPU, "memory": r.Memory}
	if r.GPU != "" {
		m["gpu"] = r.GPU
	}
	return m
}

// resourcesFromLimits is the inverse of limits, for a recorded sandbox.created.
func resourcesFromLimits(m map[string]string) Resources {
	return Resources{CPU: m["cpu"], Memory: m["memory"], GPU: m["gpu"]}
}

// DefaultImage is the image of a sandbox whose SandboxOptions.Image is empty:
// sandboxd's name for the host's own system directories, which works with no
// registry in reach. Any other OpenSandbox server needs a real image.
const DefaultImage = "host"

// DefaultEntrypoint keeps a sandbox alive when SandboxOptions.Entrypoint is empty.
var DefaultEntrypoint = []string{"tail", "-f", "/dev/null"}

// MinTimeout is the shortest sandbox Timeout the server accepts.
const MinTimeout = 60 * time.Second

// SandboxOptions configure one sandbox. They mirror the SandboxOptions of the
// TypeScript SDK.
type SandboxOptions struct {
	// Image is the container image: a registry reference the server pulls
	// ("python:3.11", "ghcr.io/org/app@sha256:…") or, with sandboxd, "host"
	// (the host's own system directories, no registry needed). Default
	// DefaultImage.
	Image string
	// ImageAuth, if set, are the registry credentials of Image (the create
	// request's image.auth). They go to the server only, never to the ledger.
	ImageAuth *opensandbox.ImageAuth
	// Resources are the limits; CPU and Memory default to "1" and "1Gi".
	Resources Resources
	// Name is the session name in the ledger; default "sandbox-<first 8 of the id>".
	Name string
	// Env is set in the sandbox.
	Env map[string]string
	// Metadata is attached to the sandbox on the server; "runId" is added.
	Metadata map[string]string
	// Timeout is the sandbox's time to live; 0 for none (removed by Close). At
	// least MinTimeout when set.
	Timeout time.Duration
	// Entrypoint is the sandbox's main process; default DefaultEntrypoint.
	Entrypoint []string
	// Shell runs every Exec of this sandbox unless ExecOptions.Shell is set, e.g.
	// "/bin/bash". Empty: the command goes to execd as is (execd's own shell).
	Shell string
	// RunID correlates sandboxes of one run across resume and fork; default a new UUID.
	RunID string
	// NetworkPolicy restricts outbound traffic by domain, IP or CIDR; its rules
	// are recorded as egress.rule_added. Nil: no policy (unrestricted).
	NetworkPolicy *NetworkPolicy
	// CredentialProxy enables the credential vault of Sandbox.Credentials:
	// bound credentials are injected into matching outbound requests (HTTPS
	// through a per-sandbox CA the sandbox trusts).
	CredentialProxy bool
}

func (o SandboxOptions) validate() error {
	switch {
	case o.Image != "" && strings.TrimSpace(o.Image) == "":
		return &OptionError{Field: "Image", Reason: "is blank"}
	}
	if err := validTimeout(o.Timeout); err != nil {
		return err
	}
	if err := o.NetworkPolicy.validate(); err != nil {
		return err
	}
	return validateSpawn("", o.RunID, o.Env, o.Shell)
}

// validateSpawn checks the options every way of creating a sandbox takes: a
// run id (empty for the default), env and shell. prefix names the options'
// type in the *OptionError's Field ("ForkOptions.").
func validateSpawn(prefix, runID string, env map[string]string, shell string) error {
	if err := validateRunID(prefix+"RunID", runID); err != nil {
		return err
	}
	if err := validateEnv(prefix+"Env", env); err != nil {
		return err
	}
	if strings.ContainsRune(shell, 0) {
		return &OptionError{Field: prefix + "Shell", Reason: "contains a NUL byte"}
	}
	return nil
}

// validTimeout checks a sandbox's time to live (SandboxOptions.Timeout,
// ResumeOptions.Timeout).
func validTimeout(d time.Duration) error {
	switch {
	case d < 0:
		return &OptionError{Field: "Timeout", Reason: "is negative"}
	case d > 0 && d < MinTimeout:
		return &OptionError{Field: "Timeout", Reason: "must be 0 (none) or at least " + MinTimeout.String() + ", got " + d.String()}
	case d%time.Second != 0:
		return &OptionError{Field: "Timeout", Reason: "must be whole seconds, got " + d.String()}
	}
	return nil
}

// maxRunID bounds a run id: it travels in the sandbox's metadata, whose
// values OpenSandbox servers take up to 1 KiB.
const maxRunID = 1024

// validateRunID checks a run id given as an option: empty (the default), or
// at most maxRunID bytes of printable UTF-8 that is not all spaces.
func validateRunID(field, id string) error {
	switch {
	case id == "":
		return nil
	case strings.TrimSpace(id) == "":
		return &OptionError{Field: field, Reason: "is blank"}
	case len(id) > maxRunID:
		return &OptionError{Field: field, Reason: fmt.Sprintf("is longer than %d bytes", maxRunID)}
	case !utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0:
		return &OptionError{Field: field, Reason: "contains a control character or invalid UTF-8: " + strconv.Quote(id)}
	}
	return nil
}

// validateEnv checks environment variables given as an option: no name is
// empty or holds '=' or NUL, no value holds NUL; no server could set them.
func validateEnv(field string, env map[string]string) error {
	for k, v := range env {
		switch {
		case k == "":
			return &OptionError{Field: field, Reason: "has an empty name"}
		case strings.ContainsAny(k, "=\x00"):
			return &OptionError{Field: field, Reason: "name " + strconv.Quote(k) + " contains '=' or NUL"}
		case strings.IndexByte(v, 0) >= 0:
			return &OptionError{Field: field, Reason: "the value of " + k + " contains a NUL byte"}
		}
	}
	return nil
}

// validate checks resource quantities given as an option: each set field is
// a Kubernetes quantity ("500m", "2", "0.5", "512Mi", "1e9"), and GPU a
// count.
func (r Resources) validate(field string) error {
	for _, q := range []struct{ name, v string }{{"CPU", r.CPU}, {"Memory", r.Memory}} {
		if q.v != "" && !quantity.MatchString(q.v) {
			return &OptionError{Field: field + "." + q.name, Reason: "is not a quantity (e.g. \"500m\", \"2\", \"512Mi\"): " + strconv.Quote(q.v)}
		}
	}
	if n, err := strconv.ParseUint(r.GPU, 10, 32); r.GPU != "" && (err != nil || n > 1<<16) {
		return &OptionError{Field: field + ".GPU", Reason: "is not a count: " + strconv.Quote(r.GPU)}
	}
	return nil
}

// quantity is a Kubernetes resource quantity without a sign: a decimal
// number, then a decimal (m, k, M, ...), binary (Ki, Mi, ...) or exponent
// suffix.
var quantity = regexp.MustCompile(`^([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkKMGTPE]|[eE][+-]?[0-9]+)?$`)

// merged returns r's fields, those left empty taken from base.
func (r Resources) merged(base Resources) Resources {
	if r.CPU == "" {
		r.CPU = base.CPU
	}
	if r.Memory == "" {
		r.Memory = base.Memory
	}
	if r.GPU == "" {
		r.GPU = base.GPU
	}
	return r
}

// ForkOptions configure one Sandbox.Fork: the TypeScript SDK's
// sb.fork(tag, runId), and the fork's resources and environment.
type ForkOptions struct {
	// RunID is the fork's run id (sandbox.created's runId, the sandbox's
	// "runId" metadata), inherited in turn by its own forks. Default: this
	// sandbox's. Set it to give the fork a run of its own, or, as the
	// TypeScript SDK's runId argument is used, to carry a run id known only
	// outside this handle.
	RunID string
	// Resources are the fork's limits, recorded in its sandbox.created; a
	// field left empty is this sandbox's. Given CPU or Memory, a handle
	// whose own resources are unknown (Connect without them) can fork.
	Resources Resources
	// Env is set in the fork over the variables this sandbox was given when
	// it was created (SandboxOptions.Env, EnvSandboxOptions.Env,
	// RestoreOptions.Env, ForkOptions.Env), which the fork keeps on any
	// server, whatever its snapshots hold. A resumed or connected handle
	// does not know its sandbox's: its forks get Env alone. Never recorded,
	// as the TypeScript SDK never records env: the values may be secrets.
	Env map[string]string
}

func (o ForkOptions) validate() error {
	if err := o.Resources.validate("ForkOptions.Resources"); err != nil {
		return err
	}
	return validateSpawn("ForkOptions.", o.RunID, o.Env, "")
}

// RestoreOptions configure one Client.RestoreSnapshot: the TypeScript
// SDK's runId argument, and the new sandbox's environment and shell.
type RestoreOptions struct {
	// RunID is the new sandbox's run id. Default: the run id of the session
	// of the sandbox the snapshot was taken of, when the ledger has exactly
	// one such session; otherwise a new one.
	RunID string
	// Env is set in the new sandbox; never recorded.
	Env map[string]string
	// Shell is the handle's shell, as SandboxOptions.Shell.
	Shell string
}

func (o RestoreOptions) validate() error {
	return validateSpawn("RestoreOptions.", o.RunID, o.Env, o.Shell)
}

// EnvSandboxOptions configure one sandbox spawned by Environment.Sandbox:
// the TypeScript SDK's env.sandbox({env, shell}), and a run id.
type EnvSandboxOptions struct {
	// Env is set in the sandbox; never recorded.
	Env map[string]string
	// Shell is the sandbox's shell, instead of EnvOptions.Shell.
	Shell string
	// RunID is the sandbox's run id; default a new one (the TypeScript
	// SDK's only choice).
	RunID string
}

func (o EnvSandboxOptions) validate() error {
	return validateSpawn("EnvSandboxOptions.", o.RunID, o.Env, o.Shell)
}

// ExecOptions configure one Exec. The zero value runs the command strictly in the
// sandbox's working directory with its environment.
type ExecOptions struct {
	// Cwd is the working directory; empty for execd's default.
	Cwd string
	// Env is added to the command's environment.
	Env map[string]string
	// Timeout kills the command after this long (it then exits with -1); 0 for none.
	// It is enforced by execd; cancel ctx to stop waiting on the client side.
	Timeout time.Duration
	// Strict (default true) makes a non-zero exit code an error: *CommandError.
	// Set it with Strict: new(false).
	Strict *bool
	// Shell runs the command with this shell ("/bin/bash" for pipefail scripts)
	// instead of the sandbox's; the command is quoted so that any text survives.
	Shell string
}

func (o ExecOptions) strict() bool { return o.Strict == nil || *o.Strict }

// CodeOptions configure one ExecCode.
type CodeOptions struct {
	// Language selects the interpreter ("python", "bash", ...); empty runs the code
	// as a shell script.
	Language string
	// ContextID runs the code in an existing code context (state carries over).
	ContextID string
	// Strict (default true) makes a non-zero exit code, or an exception, an error.
	Strict *bool
}

func (o CodeOptions) strict() bool { return o.Strict == nil || *o.Strict }

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// oneOption returns the options of a call that takes at most one: the zero
// value for none; with several, the first and an *OptionError naming field.
func oneOption[T any](field string, opts []T) (o T, err error) {
	if len(opts) > 0 {
		o = opts[0]
	}
	if len(opts) > 1 {
		err = &OptionError{Field: field, Reason: fmt.Sprintf("at most one, got %d", len(opts))}
	}
	return o, err
}
