package alineo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/alineo-labs/alineo/events"
)

// CredentialBinding says which outbound requests of a sandbox get a credential
// injected (Hosts, and optionally Schemes, Ports, Methods, Paths; empty ones
// take the server's defaults: https, 443, GET/POST/PUT/PATCH/DELETE, "/*") and
// how: Type CredentialBearer ("Authorization: Bearer <value>"), CredentialBasic
// ("Authorization: Basic <value>", the value already base64 user:password),
// CredentialAPIKey (header Header: <value>) or CredentialCustomHeaders (each of
// Headers: <value>). It never holds the value; it is recorded as is in
// credential.bound.
type CredentialBinding = events.CredentialBinding

// The binding types.
const (
	CredentialBearer        = "bearer"
	CredentialBasic         = "basic"
	CredentialAPIKey        = "apiKey"
	CredentialCustomHeaders = "customHeaders"
)

// CredentialSource says where a credential's value came from, e.g.
// "env:OPENAI_API_KEY" or "vault:prod/openai". It is recorded in
// credential.bound (it must not be the value) and is free-form for the SDK.
type CredentialSource string

// CredentialPatch changes a bound credential: a nil field stays as it is.
type CredentialPatch struct {
	Value   *string
	Binding *CredentialBinding
}

// BoundCredential is a credential bound to a sandbox, without its value.
type BoundCredential struct {
	Name    string
	Binding CredentialBinding
}

func sortBound(bs []BoundCredential) {
	slices.SortFunc(bs, func(a, b BoundCredential) int { return strings.Compare(a.Name, b.Name) })
}

// CredentialResolver supplies the value of a credential a resumed sandbox must
// re-register (ResumeOptions.ResolveCredential).
type CredentialResolver func(ctx context.Context, name string, binding CredentialBinding) (value string, err error)

// validateCredentialName accepts names of letters, digits, '-', '_', '.' and
// ':' (they appear in URLs of the vault API and in redaction markers).
func validateCredentialName(name string) error {
	ok := name != "" && len(name) <= 128
	for _, r := range name {
		ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:", r))
	}
	if !ok {
		return &OptionError{Field: "name", Reason: "must be 1 to 128 letters, digits, '-', '_', '.' or ':', got " + quote(name)}
	}
	return nil
}

func validateBinding(field string, b CredentialBinding) error {
	if len(b.Hosts) == 0 {
		return &OptionError{Field: field + ".Hosts", Reason: "is empty"}
	}
	for _, h := range b.Hosts {
		if strings.TrimSpace(h) == "" {
			return &OptionError{Field: field + ".Hosts", Reason: "holds an empty host"}
		}
	}
	switch b.Type {
	case CredentialBearer, CredentialBasic:
	case CredentialAPIKey:
		if b.Header == "" {
			return &OptionError{Field: field + ".Header", Reason: "is empty; apiKey needs the header name"}
		}
	case CredentialCustomHeaders:
		if len(b.Headers) == 0 {
			return &OptionError{Field: field + ".Headers", Reason: "is empty; customHeaders needs header names"}
		}
	default:
		return &OptionError{Field: field + ".Type", Reason: "must be bearer, basic, apiKey or customHeaders, got " + quote(b.Type)}
	}
	return nil
}

// Credentials registers credentials that the sandbox's egress proxy injects
// into matching outbound requests: the value stays with the broker
// (Options.CredentialBroker) and never enters the sandbox or the ledger. Every
// value bound through a handle is also redacted, as "[REDACTED:<name>]", from
// the command lines and output the handle records and delivers afterwards
// (execs already running keep the redaction they started with). Safe for
// concurrent use.
type Credentials struct{ sb *Sandbox }

// Credentials returns the handle's credentials. They need a sandbox created
// with SandboxOptions.CredentialProxy; on others the broker's calls fail with a
// *SandboxError.
func (s *Sandbox) Credentials() *Credentials { return &Credentials{sb: s} }

// Set stores value under name with the broker, bound by binding (replacing an
// earlier credential of that name), and records credential.bound {name,
// binding, source}. From now on the value is redacted from what the handle
// records. Each of the binding's hosts needs an explicit egress allow rule
// of the sandbox (SandboxOptions.NetworkPolicy or Egress().Add): an
// OpenSandbox server refuses a binding for a host that only the policy's
// default action allows. Errors: *OptionError for a bad name, empty value or
// bad binding, ErrClosed, *SandboxError when the broker or the ledger
// refused (a host without its allow rule among them).
func (c *Credentials) Set(ctx context.Context, name, value string, binding CredentialBinding, source CredentialSource) error {
	s := c.sb
	if err := validateCredentialName(name); err != nil {
		return err
	}
	if value == "" {
		return &OptionError{Field: "value", Reason: "is empty"}
	}
	if err := validateBinding("binding", binding); err != nil {
		return err
	}
	if strings.Contains(string(source), value) {
		return &OptionError{Field: "source", Reason: "holds the value; it is recorded and must only say where the value came from"}
	}
	if err := s.checkOpen(); err != nil {
		return err
	}
	return s.bind(ctx, name, value, binding, source)
}

// bind registers one credential and records it.
func (s *Sandbox) bind(ctx context.Context, name, value string, binding CredentialBinding, source CredentialSource) error {
	s.creds.addValue(name, value) // redact before the value can show up anywhere
	if err := s.c.broker.Set(ctx, s.id, name, value, binding); err != nil {
		return &SandboxError{SandboxID: s.id, Op: "set credential " + name, Err: err}
	}
	s.creds.setBinding(name, binding, source)
	p := events.CredentialPayload{Name: name, Binding: &binding, Source: string(source)}
	if err := s.ledger.write(ctx, events.CredentialBound, events.SandboxLevel, p); err != nil {
		return &SandboxError{SandboxID: s.id, Op: "record credential.bound", Err: err}
	}
	return nil
}

// Patch changes the value, the binding or both of a credential set earlier and
// records credential.bound with the binding now in force. Errors:
// *OptionError for a bad name, an empty patch, an empty value or a bad
// binding; ErrClosed; *SandboxError wrapping ErrCredentialNotFound when the
// sandbox has no such credential, or when the broker or the ledger refused.
func (c *Credentials) Patch(ctx context.Context, name string, p CredentialPatch) error {
	s := c.sb
	if err := validateCredentialName(name); err != nil {
		return err
	}
	switch {
	case p.Value == nil && p.Binding == nil:
		return &OptionError{Field: "CredentialPatch", Reason: "changes nothing; set Value or Binding"}
	case p.Value != nil && *p.Value == "":
		return &OptionError{Field: "CredentialPatch.Value", Reason: "is empty"}
	}
	if p.Binding != nil {
		if err := validateBinding("CredentialPatch.Binding", *p.Binding); err != nil {
			return err
		}
	}
	if err := s.checkOpen(); err != nil {
		return err
	}
	if p.Value != nil {
		s.creds.addValue(name, *p.Value)
	}
	if err := s.c.broker.Patch(ctx, s.id, name, p); err != nil {
		return &SandboxError{SandboxID: s.id, Op: "patch credential " + name, Err: err}
	}
	binding, source, ok := s.creds.binding(name)
	if p.Binding != nil {
		binding, ok = *p.Binding, true
	}
	if !ok { // set through another handle: ask the broker
		var err error
		if binding, _, err = s.brokerBinding(ctx, name); err != nil {
			return err
		}
	}
	s.creds.setBinding(name, binding, source)
	payload := events.CredentialPayload{Name: name, Binding: &binding, Source: string(source)}
	if err := s.ledger.write(ctx, events.CredentialBound, events.SandboxLevel, payload); err != nil {
		return &SandboxError{SandboxID: s.id, Op: "record credential.bound", Err: err}
	}
	return nil
}

// Remove deletes the credential and its binding from the broker and records
// credential.revoked {name, binding}; a name the sandbox does not have is
// ignored. The value stays redacted for the life of the handle (it may have
// been copied somewhere). Errors: *OptionError, ErrClosed, *SandboxError.
func (c *Credentials) Remove(ctx context.Context, name string) error {
	s := c.sb
	if err := validateCredentialName(name); err != nil {
		return err
	}
	if err := s.checkOpen(); err != nil {
		return err
	}
	binding, _, ok := s.creds.binding(name)
	if !ok {
		var err error
		if binding, ok, err = s.brokerBinding(ctx, name); err != nil || !ok {
			return err
		}
	}
	if err := s.c.broker.Remove(ctx, s.id, name); err != nil {
		return &SandboxError{SandboxID: s.id, Op: "remove credential " + name, Err: err}
	}
	s.creds.dropBinding(name)
	p := events.CredentialPayload{Name: name, Binding: &binding}
	if err := s.ledger.write(ctx, events.CredentialRevoked, events.SandboxLevel, p); err != nil {
		return &SandboxError{SandboxID: s.id, Op: "record credential.revoked", Err: err}
	}
	return nil
}

// brokerBinding returns the binding the broker holds for credential name, and
// whether it holds one: for a credential bound through another handle.
func (s *Sandbox) brokerBinding(ctx context.Context, name string) (CredentialBinding, bool, error) {
	bs, err := s.c.broker.List(ctx, s.id)
	if err != nil {
		return CredentialBinding{}, false, &SandboxError{SandboxID: s.id, Op: "list credentials", Err: err}
	}
	for _, b := range bs {
		if b.Name == name {
			return b.Binding, true, nil
		}
	}
	return CredentialBinding{}, false, nil
}

// ListBindings returns the sandbox's bound credentials, without values,
// ordered by name, as the broker reports them (bindings set through this
// handle as they were set). Errors: ErrClosed,
// *SandboxError.
func (c *Credentials) ListBindings(ctx context.Context) ([]BoundCredential, error) {
	s := c.sb
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	bs, err := s.c.broker.List(ctx, s.id)
	if err != nil {
		return nil, &SandboxError{SandboxID: s.id, Op: "list credentials", Err: err}
	}
	// A vault reports no header names of customHeaders: this handle's own
	// bindings are given as they were set.
	for i := range bs {
		if b, _, ok := s.creds.binding(bs[i].Name); ok {
			bs[i].Binding = b
		}
	}
	return bs, nil
}

// resumeCredentials is what a resumed sandbox restores of its session's
// network state: the egress rules and the bound credentials, with values.
type resumeCredentials struct {
	rules         []EgressRule
	defaultAction EgressAction // empty: deny
	hasPolicy     bool
	creds         []resumedCredential
}

type resumedCredential struct {
	name, value string
	binding     CredentialBinding
	source      CredentialSource
}

// policy returns the network policy the new sandbox is created with: the
// session's rules and default action (deny when the session did not record
// one), or nil when the session had no policy and no credentials.
func (r *resumeCredentials) policy() *NetworkPolicy {
	if r == nil || (!r.hasPolicy && len(r.creds) == 0) {
		return nil
	}
	def := r.defaultAction
	if def == "" {
		def = EgressDeny
	}
	return &NetworkPolicy{DefaultAction: def, Egress: r.rules}
}

func (r *resumeCredentials) proxy() bool { return r != nil && len(r.creds) > 0 }

// prepareResume reads, in the session's entries es (its exec entries may be left out:
// sessionLog.others), its egress rules and live bindings (bound and
// not revoked later) and resolves every value, before anything is created.
// Errors: *SandboxError wrapping ErrNoCredentialResolver when a binding exists
// and resolve is nil, or the resolver's error.
func (c *Client) prepareResume(ctx context.Context, sandboxID string, es []events.Entry, resolve CredentialResolver) (*resumeCredentials, error) {
	rules, def, seen, err := sessionPolicy(es)
	if err != nil {
		return nil, &SandboxError{SandboxID: sandboxID, Op: "read egress rules of the session", Err: err}
	}
	r := &resumeCredentials{rules: rules, defaultAction: def, hasPolicy: seen}
	live := map[string]events.CredentialPayload{}
	var order []string
	for _, e := range es {
		if e.Event != events.CredentialBound && e.Event != events.CredentialRevoked {
			continue
		}
		var p events.CredentialPayload
		if err := e.Decode(&p); err != nil {
			return nil, &SandboxError{SandboxID: sandboxID, Op: "read credentials of the session", Err: err}
		}
		if e.Event == events.CredentialRevoked {
			delete(live, p.Name)
			continue
		}
		if _, ok := live[p.Name]; !ok {
			order = append(order, p.Name)
		}
		live[p.Name] = p
	}
	for _, n := range order {
		p, ok := live[n]
		if !ok || p.Binding == nil {
			continue
		}
		if resolve == nil {
			return nil, &SandboxError{SandboxID: sandboxID, Op: "resolve credential " + n,
				Err: fmt.Errorf("%w: the session has bound credentials; set ResumeOptions.ResolveCredential", ErrNoCredentialResolver)}
		}
		v, err := resolve(ctx, n, *p.Binding)
		if err == nil && v == "" {
			err = errors.New("resolver returned an empty value")
		}
		if err != nil {
			return nil, &SandboxError{SandboxID: sandboxID, Op: "resolve credential " + n, Err: err}
		}
		r.creds = append(r.creds, resumedCredential{name: n, value: v, binding: *p.Binding, source: CredentialSource(p.Source)})
	}
	return r, nil
}

// restoreCredentials records the resumed sandbox's egress rules and
// re-registers its credentials.
func (s *Sandbox) restoreCredentials(ctx context.Context, r *resumeCredentials) error {
	if r == nil {
		return nil
	}
	if err := s.recordRules(ctx, events.EgressRuleAdded, r.rules); err != nil {
		return err
	}
	for _, cr := range r.creds {
		if err := s.bind(ctx, cr.name, cr.value, cr.binding, cr.source); err != nil {
			return err
		}
	}
	return nil
}

// forkCredentials is what a fork of this sandbox restores: the policy in
// force (from the server, default action included) when the session has one,
// and the credentials bound through this handle, with their values.
func (s *Sandbox) forkCredentials(ctx context.Context) (*resumeCredentials, error) {
	r := &resumeCredentials{creds: s.creds.bound()}
	es, err := s.c.store.ReadAll(ctx, s.name, s.id)
	if err != nil {
		return nil, &SandboxError{SandboxID: s.id, Op: "read egress rules", Err: err}
	}
	if _, _, r.hasPolicy, err = sessionPolicy(es); err != nil {
		return nil, &SandboxError{SandboxID: s.id, Op: "read egress rules", Err: err}
	}
	if !r.hasPolicy && len(r.creds) == 0 {
		return r, nil
	}
	p, err := s.Egress().List(ctx)
	if err != nil {
		return nil, err
	}
	r.hasPolicy, r.defaultAction, r.rules = true, p.DefaultAction, p.Egress
	return r, nil
}
