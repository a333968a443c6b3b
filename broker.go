package alineo

import (
	"context"
	"errors"
	"fmt"

	"github.com/alineo-labs/alineo/opensandbox"
)

// CredentialBroker holds credential values for sandboxes and has them injected
// into their outbound requests. The SDK calls it from Sandbox.Credentials; the
// values never reach the ledger. Implementations must be safe for concurrent
// use. Errors are returned as is; the SDK wraps them in a *SandboxError and
// retries nothing.
type CredentialBroker interface {
	// Set stores value under name for the sandbox and binds it, replacing an
	// earlier credential and binding of that name.
	Set(ctx context.Context, sandboxID, name, value string, binding CredentialBinding) error
	// Patch changes the value, the binding or both of an existing credential.
	// It returns an error wrapping ErrCredentialNotFound if there is none.
	Patch(ctx context.Context, sandboxID, name string, p CredentialPatch) error
	// Remove deletes the credential and its binding; removing an unknown name
	// is not an error.
	Remove(ctx context.Context, sandboxID, name string) error
	// List returns the sandbox's bindings, without values, ordered by name.
	List(ctx context.Context, sandboxID string) ([]BoundCredential, error)
}

// OpenSandboxBroker is the default CredentialBroker: it keeps each sandbox's
// credentials in the credential vault of its egress API (port 18080,
// /credential-vault). Each credential is stored with a binding of
// the same name. It serves an OpenSandbox server (the egress sidecar) and
// sandboxd (its egress proxy) alike: both speak the same vault API with the
// same status codes, so no second broker is needed. The vault must be enabled:
// the sandbox is created with SandboxOptions.CredentialProxy.
type OpenSandboxBroker struct {
	// Egress resolves a sandbox's egress client. Default (NewOpenSandboxBroker):
	// opensandbox.Client.Egress.
	Egress func(ctx context.Context, sandboxID string) (*opensandbox.Egress, error)
}

var _ CredentialBroker = (*OpenSandboxBroker)(nil)

// NewOpenSandboxBroker returns a broker that reaches each sandbox's vault
// through c.
func NewOpenSandboxBroker(c *opensandbox.Client) *OpenSandboxBroker {
	return &OpenSandboxBroker{Egress: c.Egress}
}

// vaultAttempts bounds the read-modify-write rounds of one change when other
// writers change the vault meanwhile (409 on the expected revision).
const vaultAttempts = 8

// update applies change to the vault under an expected revision, creating the
// vault when there is none.
func (b *OpenSandboxBroker) update(ctx context.Context, sandboxID string,
	change func(st *opensandbox.VaultState) (*opensandbox.VaultPatch, error),
	create func() ([]opensandbox.Credential, []opensandbox.CredentialBinding, error)) error {
	g, err := b.Egress(ctx, sandboxID)
	if err != nil {
		return err
	}
	for range vaultAttempts {
		st, err := g.GetVault(ctx)
		if errors.Is(err, opensandbox.ErrNotFound) {
			creds, binds, err := create()
			if err != nil {
				return err
			}
			if _, err = g.CreateVault(ctx, creds, binds); errors.Is(err, opensandbox.ErrConflict) {
				continue // created meanwhile
			}
			return err
		}
		if err != nil {
			return err
		}
		p, err := change(st)
		if err != nil || p == nil {
			return err
		}
		p.ExpectedRevision = &st.Revision
		if _, err = g.PatchVault(ctx, *p); errors.Is(err, opensandbox.ErrConflict) {
			continue // changed meanwhile
		}
		return err
	}
	return fmt.Errorf("credential vault of %s kept changing: %w", sandboxID, opensandbox.ErrConflict)
}

func hasCredential(st *opensandbox.VaultState, name string) bool {
	for _, c := range st.Credentials {
		if c.Name == name {
			return true
		}
	}
	return false
}

func hasBinding(st *opensandbox.VaultState, name string) bool {
	for _, b := range st.Bindings {
		if b.Name == name {
			return true
		}
	}
	return false
}

// putBinding returns the change that stores bind in the vault st: a replace
// when st has a binding of that name, else an add.
func putBinding(st *opensandbox.VaultState, bind opensandbox.CredentialBinding) *opensandbox.BindingChanges {
	if hasBinding(st, bind.Name) {
		return &opensandbox.BindingChanges{Replace: []opensandbox.CredentialBinding{bind}}
	}
	return &opensandbox.BindingChanges{Add: []opensandbox.CredentialBinding{bind}}
}

// Set implements CredentialBroker.
func (b *OpenSandboxBroker) Set(ctx context.Context, sandboxID, name, value string, binding CredentialBinding) error {
	cred := opensandbox.Credential{Name: name, Source: opensandbox.CredentialSource{Type: "inline", Value: value}}
	bind := vaultBinding(name, binding)
	return b.update(ctx, sandboxID, func(st *opensandbox.VaultState) (*opensandbox.VaultPatch, error) {
		p := &opensandbox.VaultPatch{Credentials: &opensandbox.CredentialChanges{}}
		if hasCredential(st, name) {
			p.Credentials.Replace = []opensandbox.Credential{cred}
		} else {
			p.Credentials.Add = []opensandbox.Credential{cred}
		}
		p.Bindings = putBinding(st, bind)
		return p, nil
	}, func() ([]opensandbox.Credential, []opensandbox.CredentialBinding, error) {
		return []opensandbox.Credential{cred}, []opensandbox.CredentialBinding{bind}, nil
	})
}

// Patch implements CredentialBroker.
func (b *OpenSandboxBroker) Patch(ctx context.Context, sandboxID, name string, p CredentialPatch) error {
	notFound := fmt.Errorf("credential %q of %s: %w", name, sandboxID, ErrCredentialNotFound)
	return b.update(ctx, sandboxID, func(st *opensandbox.VaultState) (*opensandbox.VaultPatch, error) {
		if !hasCredential(st, name) {
			return nil, notFound
		}
		vp := &opensandbox.VaultPatch{}
		if p.Value != nil {
			vp.Credentials = &opensandbox.CredentialChanges{Replace: []opensandbox.Credential{
				{Name: name, Source: opensandbox.CredentialSource{Type: "inline", Value: *p.Value}}}}
		}
		if p.Binding != nil {
			vp.Bindings = putBinding(st, vaultBinding(name, *p.Binding))
		}
		if vp.Credentials == nil && vp.Bindings == nil {
			return nil, nil
		}
		return vp, nil
	}, func() ([]opensandbox.Credential, []opensandbox.CredentialBinding, error) {
		return nil, nil, notFound
	})
}

// Remove implements CredentialBroker.
func (b *OpenSandboxBroker) Remove(ctx context.Context, sandboxID, name string) error {
	return b.update(ctx, sandboxID, func(st *opensandbox.VaultState) (*opensandbox.VaultPatch, error) {
		p := &opensandbox.VaultPatch{}
		if hasBinding(st, name) {
			p.Bindings = &opensandbox.BindingChanges{Delete: []string{name}}
		}
		if hasCredential(st, name) {
			p.Credentials = &opensandbox.CredentialChanges{Delete: []string{name}}
		}
		if p.Bindings == nil && p.Credentials == nil {
			return nil, nil
		}
		return p, nil
	}, func() ([]opensandbox.Credential, []opensandbox.CredentialBinding, error) {
		return nil, nil, nil // no vault: nothing to remove
	})
}

// List implements CredentialBroker.
func (b *OpenSandboxBroker) List(ctx context.Context, sandboxID string) ([]BoundCredential, error) {
	g, err := b.Egress(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	st, err := g.GetVault(ctx)
	if errors.Is(err, opensandbox.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]BoundCredential, 0, len(st.Bindings))
	for _, m := range st.Bindings {
		out = append(out, BoundCredential{Name: m.Name, Binding: bindingFromVault(m)})
	}
	sortBound(out)
	return out, nil
}

// vaultBinding translates a binding of credential name to the vault's form.
func vaultBinding(name string, b CredentialBinding) opensandbox.CredentialBinding {
	out := opensandbox.CredentialBinding{Name: name, Match: opensandbox.CredentialMatch{
		Hosts: b.Hosts, Schemes: b.Schemes, Ports: b.Ports, Methods: b.Methods, Paths: b.Paths,
	}}
	switch b.Type {
	case CredentialAPIKey:
		out.Auth = opensandbox.CredentialAuth{Type: b.Type, Name: b.Header, Credential: name}
	case CredentialCustomHeaders:
		out.Auth = opensandbox.CredentialAuth{Type: b.Type}
		for _, h := range b.Headers {
			out.Auth.Headers = append(out.Auth.Headers, opensandbox.CustomHeader{Name: h, Credential: name})
		}
	default:
		out.Auth = opensandbox.CredentialAuth{Type: b.Type, Credential: name}
	}
	return out
}

// bindingFromVault translates a vault binding back; fields the vault does not
// report stay empty.
func bindingFromVault(m opensandbox.BindingMetadata) CredentialBinding {
	var b CredentialBinding
	if m.Match != nil {
		b.Hosts, b.Schemes, b.Ports, b.Methods, b.Paths = m.Match.Hosts, m.Match.Schemes, m.Match.Ports, m.Match.Methods, m.Match.Paths
	}
	if m.Auth != nil {
		b.Type = m.Auth.Type
		if b.Type == CredentialAPIKey {
			b.Header = m.Auth.Name
		}
		for _, h := range m.Auth.Headers {
			b.Headers = append(b.Headers, h.Name)
		}
	}
	return b
}
