package opensandbox

import (
	"context"
	"fmt"
)

// Egress is a client for one sandbox's egress sidecar (network policy and
// credential vault). Safe for concurrent use; it holds no goroutines. Egress errors
// are plain text: *APIError.Message holds the text, Code the HTTP status text.
type Egress struct {
	t *transport
}

// NewEgress returns an egress client for an endpoint you already have.
func NewEgress(cfg EndpointConfig) (*Egress, error) {
	t, err := cfg.transport()
	if err != nil {
		return nil, err
	}
	return &Egress{t: t}, nil
}

// Egress resolves the sandbox's egress endpoint (port 18080, or the server proxy)
// with its OPENSANDBOX-EGRESS-AUTH header. It does not wait for the sidecar.
func (c *Client) Egress(ctx context.Context, sandboxID string) (*Egress, error) {
	ep, err := c.GetEndpoint(ctx, sandboxID, EgressPort)
	if err != nil {
		return nil, fmt.Errorf("egress of %s: %w", sandboxID, err)
	}
	eg, err := NewEgress(c.endpointConfig(ep))
	if err != nil {
		return nil, fmt.Errorf("egress of %s: %w", sandboxID, err)
	}
	return eg, nil
}

// URL returns the egress base URL.
func (g *Egress) URL() string { return g.t.base.String() }

// PolicyState is the sidecar's answer to policy calls. Policy is set by GetPolicy only.
type PolicyState struct {
	Status          string         `json:"status"`
	Mode            string         `json:"mode"`            // allow_all | deny_all | enforcing
	EnforcementMode string         `json:"enforcementMode"` // e.g. dns
	Reason          string         `json:"reason,omitempty"`
	Policy          *NetworkPolicy `json:"policy,omitempty"`
}

// GetPolicy returns the current policy (GET /policy).
func (g *Egress) GetPolicy(ctx context.Context) (*PolicyState, error) {
	var out PolicyState
	if err := g.t.do(ctx, request{method: "GET", path: "/policy", idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("get egress policy: %w", err)
	}
	return &out, nil
}

// PatchPolicy merges rules into the policy (PATCH /policy): the new rules come
// first, and the first rule for a target wins. Retried (same rules, same result).
func (g *Egress) PatchPolicy(ctx context.Context, rules ...NetworkRule) (*PolicyState, error) {
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: patch egress policy: no rules", ErrInvalidRequest)
	}
	var out PolicyState
	if err := g.t.do(ctx, request{method: "PATCH", path: "/policy", json: rules, idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("patch egress policy: %w", err)
	}
	return &out, nil
}

// DeletePolicy removes the rules for targets (DELETE /policy); unknown targets are
// ignored.
func (g *Egress) DeletePolicy(ctx context.Context, targets ...string) (*PolicyState, error) {
	if len(targets) == 0 {
		return nil, fmt.Errorf("%w: delete egress rules: no targets", ErrInvalidRequest)
	}
	var out PolicyState
	if err := g.t.do(ctx, request{method: "DELETE", path: "/policy", json: targets, idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("delete egress rules: %w", err)
	}
	return &out, nil
}

// SetPolicy replaces the whole policy (PUT /policy; served by the sidecar, not in
// the spec). A zero policy resets to deny-all.
func (g *Egress) SetPolicy(ctx context.Context, p NetworkPolicy) (*PolicyState, error) {
	var out PolicyState
	if err := g.t.do(ctx, request{method: "PUT", path: "/policy", json: p, idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("set egress policy: %w", err)
	}
	return &out, nil
}

// Credential is a named secret; Source.Value is write-only (never returned).
type Credential struct {
	Name   string           `json:"name"`
	Source CredentialSource `json:"source"`
}

// CredentialSource holds a credential's value. Type is "inline" (the default when
// empty).
type CredentialSource struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// CredentialMatch selects outbound requests. Empty fields take the sidecar defaults
// (https, 443, GET/POST/PUT/PATCH/DELETE, "/*").
type CredentialMatch struct {
	Hosts   []string `json:"hosts"`
	Schemes []string `json:"schemes,omitempty"`
	Ports   []int    `json:"ports,omitempty"`
	Methods []string `json:"methods,omitempty"`
	Paths   []string `json:"paths,omitempty"`
}

// CredentialAuth is how a credential is injected: Type "bearer" or "basic" (uses
// Credential), "apiKey" (Name is the header, Credential the value) or
// "customHeaders" (Headers).
type CredentialAuth struct {
	Type       string         `json:"type"`
	Name       string         `json:"name,omitempty"`
	Credential string         `json:"credential,omitempty"`
	Headers    []CustomHeader `json:"headers,omitempty"`
}

// CustomHeader injects one header from a credential.
type CustomHeader struct {
	Name       string `json:"name"`
	Credential string `json:"credential"`
}

// CredentialBinding binds a credential to matching requests.
type CredentialBinding struct {
	Name  string          `json:"name"`
	Match CredentialMatch `json:"match"`
	Auth  CredentialAuth  `json:"auth"`
}

// CredentialMetadata is a stored credential without its value.
type CredentialMetadata struct {
	Name       string `json:"name"`
	SourceType string `json:"sourceType"`
	Revision   int64  `json:"revision"`
}

// BindingMetadata is a stored binding; Auth carries only its type and name.
type BindingMetadata struct {
	Name     string           `json:"name"`
	Revision int64            `json:"revision"`
	Match    *CredentialMatch `json:"match,omitempty"`
	Auth     *CredentialAuth  `json:"auth,omitempty"`
}

// VaultState is the credential vault as the sidecar reports it.
type VaultState struct {
	Revision    int64                `json:"revision"`
	Credentials []CredentialMetadata `json:"credentials"`
	Bindings    []BindingMetadata    `json:"bindings"`
}

// CredentialChanges adds, replaces and deletes (by name) credentials.
type CredentialChanges struct {
	Add     []Credential `json:"add,omitempty"`
	Replace []Credential `json:"replace,omitempty"`
	Delete  []string     `json:"delete,omitempty"`
}

// BindingChanges adds, replaces and deletes (by name) bindings.
type BindingChanges struct {
	Add     []CredentialBinding `json:"add,omitempty"`
	Replace []CredentialBinding `json:"replace,omitempty"`
	Delete  []string            `json:"delete,omitempty"`
}

// VaultPatch mutates the vault; with ExpectedRevision set, a concurrent change makes
// the patch fail with ErrConflict.
type VaultPatch struct {
	ExpectedRevision *int64             `json:"expectedRevision,omitempty"`
	Credentials      *CredentialChanges `json:"credentials,omitempty"`
	Bindings         *BindingChanges    `json:"bindings,omitempty"`
}

func fillSourceType(cs []Credential) {
	for i := range cs {
		if cs[i].Source.Type == "" {
			cs[i].Source.Type = "inline"
		}
	}
}

// CreateVault creates the credential vault (POST /credential-vault, 201). ErrConflict
// if it exists; ErrPrecondition if the sandbox has no credential proxy. Never retried.
func (g *Egress) CreateVault(ctx context.Context, creds []Credential, bindings []CredentialBinding) (*VaultState, error) {
	creds = append([]Credential(nil), creds...)
	fillSourceType(creds)
	if creds == nil {
		creds = []Credential{}
	}
	if bindings == nil {
		bindings = []CredentialBinding{}
	}
	body := struct {
		Credentials []Credential        `json:"credentials"`
		Bindings    []CredentialBinding `json:"bindings"`
	}{creds, bindings}
	var out VaultState
	if err := g.t.do(ctx, request{method: "POST", path: "/credential-vault", json: body}, &out); err != nil {
		return nil, fmt.Errorf("create credential vault: %w", err)
	}
	return &out, nil
}

// GetVault returns the vault state. ErrNotFound if there is none.
func (g *Egress) GetVault(ctx context.Context) (*VaultState, error) {
	var out VaultState
	if err := g.t.do(ctx, request{method: "GET", path: "/credential-vault", idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("get credential vault: %w", err)
	}
	return &out, nil
}

// PatchVault applies p (PATCH /credential-vault). Retried only when
// p.ExpectedRevision is set (the revision check makes a repeat harmless).
func (g *Egress) PatchVault(ctx context.Context, p VaultPatch) (*VaultState, error) {
	if p.Credentials != nil {
		c := *p.Credentials
		c.Add = append([]Credential(nil), c.Add...)
		c.Replace = append([]Credential(nil), c.Replace...)
		fillSourceType(c.Add)
		fillSourceType(c.Replace)
		p.Credentials = &c
	}
	var out VaultState
	if err := g.t.do(ctx, request{method: "PATCH", path: "/credential-vault", json: p,
		idempotent: p.ExpectedRevision != nil}, &out); err != nil {
		return nil, fmt.Errorf("patch credential vault: %w", err)
	}
	return &out, nil
}

// DeleteVault removes the vault (204).
func (g *Egress) DeleteVault(ctx context.Context) error {
	if err := g.t.do(ctx, request{method: "DELETE", path: "/credential-vault", idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete credential vault: %w", err)
	}
	return nil
}

// ListCredentials returns the stored credentials (without values) and the vault
// revision.
func (g *Egress) ListCredentials(ctx context.Context) ([]CredentialMetadata, int64, error) {
	var out struct {
		Revision    int64                `json:"revision"`
		Credentials []CredentialMetadata `json:"credentials"`
	}
	if err := g.t.do(ctx, request{method: "GET", path: "/credential-vault/credentials", idempotent: true}, &out); err != nil {
		return nil, 0, fmt.Errorf("list credentials: %w", err)
	}
	return out.Credentials, out.Revision, nil
}

// ListBindings returns the stored bindings and the vault revision.
func (g *Egress) ListBindings(ctx context.Context) ([]BindingMetadata, int64, error) {
	var out struct {
		Revision int64             `json:"revision"`
		Bindings []BindingMetadata `json:"bindings"`
	}
	if err := g.t.do(ctx, request{method: "GET", path: "/credential-vault/bindings", idempotent: true}, &out); err != nil {
		return nil, 0, fmt.Errorf("list bindings: %w", err)
	}
	return out.Bindings, out.Revision, nil
}
