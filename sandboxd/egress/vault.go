package egress

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/alineo-labs/alineo/redact"
)

// Credential is a named secret. Source.Value is write-only: no response, log
// line or JSON encoding of this package contains it.
type Credential struct {
	Name   string           `json:"name"`
	Source CredentialSource `json:"source"`
}

// CredentialSource holds a credential's value. Type is "inline" (empty means inline).
type CredentialSource struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// String hides the value.
func (s CredentialSource) String() string { return s.Type + ":[REDACTED]" }

// GoString hides the value.
func (s CredentialSource) GoString() string { return s.String() }

// LogValue hides the value.
func (s CredentialSource) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON encodes the type only: the value is write-only.
func (s CredentialSource) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type string `json:"type"`
	}{s.Type})
}

// Match selects outbound requests. Empty fields take the defaults: schemes
// [https], ports [443], methods [GET POST PUT PATCH DELETE], paths ["/*"]. Hosts
// are FQDNs, "*.domain" or IPs; a path ending in "*" matches by prefix.
type Match struct {
	Hosts   []string `json:"hosts"`
	Schemes []string `json:"schemes,omitempty"`
	Ports   []int    `json:"ports,omitempty"`
	Methods []string `json:"methods,omitempty"`
	Paths   []string `json:"paths,omitempty"`
}

// Auth is how a credential is injected: Type "bearer" (Authorization: Bearer v),
// "basic" (Authorization: Basic v, v already base64 user:pass), "apiKey" (header
// Name: v) or "customHeaders" (each of Headers). Credential names a credential.
type Auth struct {
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

// Binding binds credentials to matching requests.
type Binding struct {
	Name  string `json:"name"`
	Match Match  `json:"match"`
	Auth  Auth   `json:"auth"`
}

// CredentialMetadata is a stored credential without its value.
type CredentialMetadata struct {
	Name       string `json:"name"`
	SourceType string `json:"sourceType"`
	Revision   int64  `json:"revision"`
}

// AuthMetadata is a binding's auth without credential references.
type AuthMetadata struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
}

// BindingMetadata is a stored binding (match with defaults filled in).
type BindingMetadata struct {
	Name     string        `json:"name"`
	Revision int64         `json:"revision"`
	Match    *Match        `json:"match,omitempty"`
	Auth     *AuthMetadata `json:"auth,omitempty"`
}

// VaultState is the sanitized vault: names, types and revisions, never values.
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
	Add     []Binding `json:"add,omitempty"`
	Replace []Binding `json:"replace,omitempty"`
	Delete  []string  `json:"delete,omitempty"`
}

// VaultPatch mutates the vault atomically. Deletes apply first, then replaces,
// then adds; credentials before bindings.
type VaultPatch struct {
	ExpectedRevision *int64             `json:"expectedRevision,omitempty"`
	Credentials      *CredentialChanges `json:"credentials,omitempty"`
	Bindings         *BindingChanges    `json:"bindings,omitempty"`
}

const maxCredentialBytes = 16 << 10

var defaultMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}

type storedCred struct {
	value, sourceType string
	rev               int64
}

type storedBinding struct {
	b       Binding // normalized, defaults filled in
	rev     int64
	hosts   []Target
	schemes []string
	ports   []int
	methods []string
}

// vaultSnap is an immutable vault version.
type vaultSnap struct {
	rev      int64
	creds    map[string]storedCred
	bindings []storedBinding // in creation order
}

// Vault is a sandbox's credential vault. Values are write-only: State and the
// list methods return metadata only; Secrets exists for redaction. Reads are
// lock-free, writes serialized. Safe for concurrent use.
type Vault struct {
	enabled bool
	policy  *Enforcer
	cur     atomic.Pointer[vaultSnap] // nil: no vault
	// mu serializes writers.
	mu sync.Mutex
}

func newVault(enabled bool, policy *Enforcer) *Vault {
	return &Vault{enabled: enabled, policy: policy}
}

func (v *Vault) precondition() error {
	if !v.enabled {
		return fmt.Errorf("%w: the sandbox needs a credential proxy and an egress token", ErrPrecondition)
	}
	return nil
}

// Create creates the vault at revision 1. Errors wrap ErrPrecondition,
// ErrConflict (a vault exists) or ErrInvalidVault.
func (v *Vault) Create(creds []Credential, bindings []Binding) (VaultState, error) {
	if err := v.precondition(); err != nil {
		return VaultState{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cur.Load() != nil {
		return VaultState{}, fmt.Errorf("%w: credential vault exists", ErrConflict)
	}
	s := &vaultSnap{rev: 1, creds: map[string]storedCred{}}
	p := VaultPatch{Credentials: &CredentialChanges{Add: creds}, Bindings: &BindingChanges{Add: bindings}}
	if err := v.apply(s, p); err != nil {
		return VaultState{}, err
	}
	v.cur.Store(s)
	return s.state(), nil
}

// State returns the sanitized vault. ErrNotFound if there is none.
func (v *Vault) State() (VaultState, error) {
	s := v.cur.Load()
	if s == nil {
		return VaultState{}, fmt.Errorf("credential vault: %w", ErrNotFound)
	}
	return s.state(), nil
}

// Patch applies p atomically at a new revision. Errors wrap ErrPrecondition,
// ErrNotFound (no vault, or a replaced or deleted item is missing), ErrConflict
// (stale ExpectedRevision as *RevisionError, or an added item exists) or
// ErrInvalidVault; the vault is unchanged on error.
func (v *Vault) Patch(p VaultPatch) (VaultState, error) {
	if err := v.precondition(); err != nil {
		return VaultState{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	old := v.cur.Load()
	if old == nil {
		return VaultState{}, fmt.Errorf("credential vault: %w", ErrNotFound)
	}
	if p.ExpectedRevision != nil && *p.ExpectedRevision != old.rev {
		return VaultState{}, &RevisionError{Expected: *p.ExpectedRevision, Actual: old.rev}
	}
	if p.Credentials == nil && p.Bindings == nil {
		return VaultState{}, fmt.Errorf("%w: patch has no credentials or bindings changes", ErrInvalidVault)
	}
	s := &vaultSnap{rev: old.rev + 1, creds: make(map[string]storedCred, len(old.creds)), bindings: slices.Clone(old.bindings)}
	for k, c := range old.creds {
		s.creds[k] = c
	}
	if err := v.apply(s, p); err != nil {
		return VaultState{}, err
	}
	v.cur.Store(s)
	return s.state(), nil
}

// Delete removes the vault; ErrNotFound if there is none.
func (v *Vault) Delete() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cur.Load() == nil {
		return fmt.Errorf("credential vault: %w", ErrNotFound)
	}
	v.cur.Store(nil)
	return nil
}

// Credential returns one credential's metadata; ErrNotFound if missing.
func (v *Vault) Credential(name string) (CredentialMetadata, error) {
	st, err := v.State()
	if err != nil {
		return CredentialMetadata{}, err
	}
	for _, c := range st.Credentials {
		if c.Name == name {
			return c, nil
		}
	}
	return CredentialMetadata{}, fmt.Errorf("credential %q: %w", name, ErrNotFound)
}

// Binding returns one binding's metadata; ErrNotFound if missing.
func (v *Vault) Binding(name string) (BindingMetadata, error) {
	st, err := v.State()
	if err != nil {
		return BindingMetadata{}, err
	}
	for _, b := range st.Bindings {
		if b.Name == name {
			return b, nil
		}
	}
	return BindingMetadata{}, fmt.Errorf("binding %q: %w", name, ErrNotFound)
}

// Secrets returns the credential values by name, for redaction (see package
// redact). Callers must not log or persist them.
func (v *Vault) Secrets() map[string]string {
	s := v.cur.Load()
	if s == nil {
		return map[string]string{}
	}
	out := make(map[string]string, len(s.creds))
	for n, c := range s.creds {
		out[n] = c.value
	}
	return out
}

// Redactor returns a redactor for the current credential values (see package
// redact); build a new one after the vault changes.
func (v *Vault) Redactor() *redact.Redactor { return redact.New(v.Secrets()) }

func (s *vaultSnap) state() VaultState {
	st := VaultState{Revision: s.rev, Credentials: make([]CredentialMetadata, 0, len(s.creds)), Bindings: make([]BindingMetadata, 0, len(s.bindings))}
	for n, c := range s.creds {
		st.Credentials = append(st.Credentials, CredentialMetadata{Name: n, SourceType: c.sourceType, Revision: c.rev})
	}
	sort.Slice(st.Credentials, func(i, j int) bool { return st.Credentials[i].Name < st.Credentials[j].Name })
	for _, b := range s.bindings {
		m := b.b.Match
		m.Hosts, m.Schemes, m.Ports, m.Methods, m.Paths = slices.Clone(m.Hosts), slices.Clone(m.Schemes), slices.Clone(m.Ports), slices.Clone(m.Methods), slices.Clone(m.Paths)
		am := &AuthMetadata{Type: b.b.Auth.Type}
		if b.b.Auth.Type == "apiKey" {
			am.Name = b.b.Auth.Name
		}
		st.Bindings = append(st.Bindings, BindingMetadata{Name: b.b.Name, Revision: b.rev, Match: &m, Auth: am})
	}
	return st
}

// apply mutates s (a fresh copy) by p and validates the result.
func (v *Vault) apply(s *vaultSnap, p VaultPatch) error {
	if c := p.Credentials; c != nil {
		for _, n := range c.Delete {
			if _, ok := s.creds[n]; !ok {
				return fmt.Errorf("delete credential %q: %w", n, ErrNotFound)
			}
			delete(s.creds, n)
		}
		for _, cr := range c.Replace {
			if _, ok := s.creds[cr.Name]; !ok {
				return fmt.Errorf("replace credential %q: %w", cr.Name, ErrNotFound)
			}
			sc, err := checkCredential(cr)
			if err != nil {
				return err
			}
			sc.rev = s.rev
			s.creds[cr.Name] = sc
		}
		for _, cr := range c.Add {
			if _, ok := s.creds[cr.Name]; ok {
				return fmt.Errorf("add credential %q: exists: %w", cr.Name, ErrConflict)
			}
			sc, err := checkCredential(cr)
			if err != nil {
				return err
			}
			sc.rev = s.rev
			s.creds[cr.Name] = sc
		}
	}
	if b := p.Bindings; b != nil {
		index := func(name string) int {
			return slices.IndexFunc(s.bindings, func(sb storedBinding) bool { return sb.b.Name == name })
		}
		for _, n := range b.Delete {
			i := index(n)
			if i < 0 {
				return fmt.Errorf("delete binding %q: %w", n, ErrNotFound)
			}
			s.bindings = slices.Delete(s.bindings, i, i+1)
		}
		for _, nb := range b.Replace {
			i := index(nb.Name)
			if i < 0 {
				return fmt.Errorf("replace binding %q: %w", nb.Name, ErrNotFound)
			}
			sb, err := v.checkBinding(nb)
			if err != nil {
				return err
			}
			sb.rev = s.rev
			s.bindings[i] = sb
		}
		for _, nb := range b.Add {
			if index(nb.Name) >= 0 {
				return fmt.Errorf("add binding %q: exists: %w", nb.Name, ErrConflict)
			}
			sb, err := v.checkBinding(nb)
			if err != nil {
				return err
			}
			sb.rev = s.rev
			s.bindings = append(s.bindings, sb)
		}
	}
	for _, sb := range s.bindings {
		for _, ref := range sb.credentialRefs() {
			if _, ok := s.creds[ref]; !ok {
				return fmt.Errorf("%w: binding %q refers to unknown credential %q", ErrInvalidVault, sb.b.Name, ref)
			}
		}
	}
	return nil
}

func checkName(kind, n string) error {
	if n == "" || len(n) > 128 || strings.ContainsAny(n, "/\x00") {
		return fmt.Errorf("%w: %s name %q must be 1..128 bytes without '/'", ErrInvalidVault, kind, n)
	}
	return nil
}

func checkCredential(c Credential) (storedCred, error) {
	if err := checkName("credential", c.Name); err != nil {
		return storedCred{}, err
	}
	typ := c.Source.Type
	if typ == "" {
		typ = "inline"
	}
	if typ != "inline" {
		return storedCred{}, fmt.Errorf("%w: credential %q: source type must be inline, got %q", ErrInvalidVault, c.Name, c.Source.Type)
	}
	if c.Source.Value == "" || len(c.Source.Value) > maxCredentialBytes {
		return storedCred{}, fmt.Errorf("%w: credential %q: value must be 1..%d bytes", ErrInvalidVault, c.Name, maxCredentialBytes)
	}
	if strings.ContainsAny(c.Source.Value, "\r\n\x00") {
		return storedCred{}, fmt.Errorf("%w: credential %q: value must not contain CR, LF or NUL", ErrInvalidVault, c.Name)
	}
	return storedCred{value: c.Source.Value, sourceType: typ}, nil
}

func validHeaderName(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func (v *Vault) checkBinding(b Binding) (storedBinding, error) {
	bad := func(format string, args ...any) (storedBinding, error) {
		return storedBinding{}, fmt.Errorf("%w: binding %q: %s", ErrInvalidVault, b.Name, fmt.Sprintf(format, args...))
	}
	if err := checkName("binding", b.Name); err != nil {
		return storedBinding{}, err
	}
	m := b.Match
	if len(m.Hosts) == 0 {
		return bad("match.hosts is empty")
	}
	sb := storedBinding{}
	for _, h := range m.Hosts {
		t, err := ParseTarget(h)
		if err != nil {
			return bad("host %q: %v", h, err)
		}
		if !v.policy.AllowsExplicitly(t) {
			return bad("host %q needs an explicit egress allow rule", h)
		}
		sb.hosts = append(sb.hosts, t)
	}
	nm := Match{Hosts: slices.Clone(m.Hosts), Schemes: []string{"https"}, Ports: []int{443}, Methods: slices.Clone(defaultMethods), Paths: []string{"/*"}}
	if len(m.Schemes) > 0 {
		nm.Schemes = nil
		for _, sc := range m.Schemes {
			sc = strings.ToLower(sc)
			if sc != "http" && sc != "https" {
				return bad("scheme must be http or https, got %q", sc)
			}
			nm.Schemes = append(nm.Schemes, sc)
		}
	}
	if len(m.Ports) > 0 {
		for _, p := range m.Ports {
			if p < 1 || p > 65535 {
				return bad("port %d out of 1..65535", p)
			}
		}
		nm.Ports = slices.Clone(m.Ports)
	}
	if len(m.Methods) > 0 {
		nm.Methods = nil
		for _, me := range m.Methods {
			if !validHeaderName(me) {
				return bad("invalid method %q", me)
			}
			nm.Methods = append(nm.Methods, strings.ToUpper(me))
		}
	}
	if len(m.Paths) > 0 {
		for _, p := range m.Paths {
			if !strings.HasPrefix(p, "/") {
				return bad("path %q must start with '/'", p)
			}
		}
		nm.Paths = slices.Clone(m.Paths)
	}
	a := b.Auth
	na := Auth{Type: a.Type}
	switch a.Type {
	case "bearer", "basic":
		if a.Credential == "" {
			return bad("auth %s needs a credential", a.Type)
		}
		na.Credential = a.Credential
	case "apiKey":
		if !validHeaderName(a.Name) || a.Credential == "" {
			return bad("auth apiKey needs a header name (token characters) and a credential")
		}
		na.Name, na.Credential = a.Name, a.Credential
	case "customHeaders":
		if len(a.Headers) == 0 {
			return bad("auth customHeaders needs at least one header")
		}
		for _, h := range a.Headers {
			if !validHeaderName(h.Name) || h.Credential == "" {
				return bad("custom header %q needs a token name and a credential", h.Name)
			}
		}
		na.Headers = slices.Clone(a.Headers)
	default:
		return bad("auth type must be bearer, basic, apiKey or customHeaders, got %q", a.Type)
	}
	sb.b = Binding{Name: b.Name, Match: nm, Auth: na}
	sb.schemes, sb.ports, sb.methods = nm.Schemes, nm.Ports, nm.Methods
	return sb, nil
}

func (sb storedBinding) credentialRefs() []string {
	if sb.b.Auth.Type == "customHeaders" {
		out := make([]string, len(sb.b.Auth.Headers))
		for i, h := range sb.b.Auth.Headers {
			out[i] = h.Credential
		}
		return out
	}
	return []string{sb.b.Auth.Credential}
}

func (sb storedBinding) matchesHost(host string) bool {
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	for _, t := range sb.hosts {
		if err == nil && t.MatchAddr(a) || err != nil && t.MatchHost(host) {
			return true
		}
	}
	return false
}

func (sb storedBinding) matchesEndpoint(scheme, host string, port int) bool {
	return slices.Contains(sb.schemes, scheme) && slices.Contains(sb.ports, port) && sb.matchesHost(host)
}

func matchPath(patterns []string, path string) bool {
	if path == "" {
		path = "/"
	}
	for _, p := range patterns {
		if pre, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(path, pre) || p == path {
			return true
		}
	}
	return false
}

// wantsTLS reports whether a binding may apply to https://host:port, so the
// proxy must terminate TLS to inject.
func (v *Vault) wantsTLS(host string, port int) bool {
	s := v.cur.Load()
	if s == nil {
		return false
	}
	for _, sb := range s.bindings {
		if sb.matchesEndpoint("https", host, port) {
			return true
		}
	}
	return false
}

// inject sets the headers of the one binding matching the request, overriding
// any the client sent. It returns the binding's name ("" if none) and how many
// bindings matched: with more than one, nothing is injected.
func (v *Vault) inject(r *http.Request, scheme, host string, port int) (string, int) {
	s := v.cur.Load()
	if s == nil {
		return "", 0
	}
	var hit *storedBinding
	n := 0
	for i := range s.bindings {
		sb := &s.bindings[i]
		if sb.matchesEndpoint(scheme, host, port) && slices.Contains(sb.methods, r.Method) && matchPath(sb.b.Match.Paths, r.URL.Path) {
			hit = sb
			n++
		}
	}
	if n != 1 {
		return "", n
	}
	val := func(name string) string { return s.creds[name].value }
	switch a := hit.b.Auth; a.Type {
	case "bearer":
		r.Header.Set("Authorization", "Bearer "+val(a.Credential))
	case "basic":
		r.Header.Set("Authorization", "Basic "+val(a.Credential))
	case "apiKey":
		r.Header.Set(a.Name, val(a.Credential))
	case "customHeaders":
		for _, h := range a.Headers {
			r.Header.Set(h.Name, val(h.Credential))
		}
	}
	return hit.b.Name, 1
}
