package egress

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
)

// Action is what a rule or the default does with matching traffic.
type Action string

// Actions.
const (
	Allow Action = "allow"
	Deny  Action = "deny"
)

// Modes reported by the policy API.
const (
	ModeAllowAll  = "allow_all" // default allow, no rules
	ModeDenyAll   = "deny_all"  // default deny, no rules
	ModeEnforcing = "enforcing" // anything else
)

// Rule allows or denies one target: an exact FQDN ("api.example.com"), a
// wildcard ("*.example.com": sub-domains only, not the apex), an IP address or a
// CIDR prefix. Domains are case-insensitive.
type Rule struct {
	Action Action `json:"action"`
	Target string `json:"target"`
}

// Policy is an egress policy: the first rule whose target matches decides, else
// DefaultAction (empty means deny). Same JSON shape as the OpenSandbox
// NetworkPolicy.
type Policy struct {
	DefaultAction Action `json:"defaultAction,omitempty"`
	Egress        []Rule `json:"egress"`
}

// Mode returns allow_all, deny_all or enforcing for p.
func (p Policy) Mode() string {
	switch {
	case len(p.Egress) > 0:
		return ModeEnforcing
	case p.DefaultAction == Allow:
		return ModeAllowAll
	default:
		return ModeDenyAll
	}
}

type targetKind uint8

const (
	kindDomain   targetKind = iota + 1 // exact FQDN
	kindWildcard                       // *.domain
	kindPrefix                         // IP (full-length prefix) or CIDR
)

// Target is a parsed rule target.
type Target struct {
	kind   targetKind
	domain string // lower case, no trailing dot; for a wildcard, without "*."
	prefix netip.Prefix
}

// ParseTarget parses a rule target: an FQDN, "*.domain", an IP or a CIDR. It
// returns an error wrapping ErrInvalidPolicy for anything else.
func ParseTarget(s string) (Target, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return Target{}, &RuleError{Target: s, Reason: "empty target"}
	}
	if strings.Contains(in, "/") {
		p, err := netip.ParsePrefix(in)
		if err != nil {
			return Target{}, &RuleError{Target: s, Reason: "not a CIDR prefix: " + err.Error()}
		}
		return Target{kind: kindPrefix, prefix: unmapPrefix(p).Masked()}, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(in, "[]")); err == nil {
		if a.Zone() != "" {
			return Target{}, &RuleError{Target: s, Reason: "IP with a zone"}
		}
		a = a.Unmap()
		return Target{kind: kindPrefix, prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	d := strings.TrimSuffix(strings.ToLower(in), ".")
	kind := kindDomain
	if rest, ok := strings.CutPrefix(d, "*."); ok {
		kind, d = kindWildcard, rest
	}
	if err := checkDomain(d); err != nil {
		return Target{}, &RuleError{Target: s, Reason: err.Error()}
	}
	return Target{kind: kind, domain: d}, nil
}

func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

// checkDomain accepts a lower-case host name: dot-separated labels of letters,
// digits, '-' and '_', 1..63 bytes each, 253 in all.
func checkDomain(d string) error {
	if d == "" {
		return fmt.Errorf("empty domain")
	}
	if len(d) > 253 {
		return fmt.Errorf("domain longer than 253 bytes")
	}
	for label := range strings.SplitSeq(d, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("domain label must be 1..63 bytes")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return fmt.Errorf("invalid character %q in domain (wildcards only as a leading \"*.\")", c)
			}
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("domain label starts or ends with '-'")
		}
	}
	return nil
}

// String returns the canonical form: lower case without trailing dot, the
// address of a full-length prefix, or the masked CIDR.
func (t Target) String() string {
	switch t.kind {
	case kindDomain:
		return t.domain
	case kindWildcard:
		return "*." + t.domain
	case kindPrefix:
		if t.prefix.IsSingleIP() {
			return t.prefix.Addr().String()
		}
		return t.prefix.String()
	}
	return ""
}

// IsAddr reports whether t matches addresses (IP or CIDR) rather than names.
func (t Target) IsAddr() bool { return t.kind == kindPrefix }

// MatchHost reports whether a domain target matches host (a name, any case,
// optionally with a trailing dot). Address targets never match a name.
func (t Target) MatchHost(host string) bool {
	host = normHost(host)
	switch t.kind {
	case kindDomain:
		return host == t.domain
	case kindWildcard:
		return len(host) > len(t.domain)+1 && strings.HasSuffix(host, t.domain) && host[len(host)-len(t.domain)-1] == '.'
	}
	return false
}

// MatchAddr reports whether an address target contains a.
func (t Target) MatchAddr(a netip.Addr) bool {
	return t.kind == kindPrefix && t.prefix.Contains(a.Unmap())
}

func normHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

type compiledRule struct {
	action Action
	target Target
}

// compiled is an immutable, validated policy.
type compiled struct {
	def   Action
	rules []compiledRule
}

func (c *compiled) policy() Policy {
	p := Policy{DefaultAction: c.def, Egress: make([]Rule, len(c.rules))}
	for i, r := range c.rules {
		p.Egress[i] = Rule{Action: r.action, Target: r.target.String()}
	}
	return p
}

// decide walks the rules in order for host (a name, or "" when only an address is
// known) and, when have is set, addr. needAddr reports that an address rule
// came before any decision and addr is not known yet.
func (c *compiled) decide(host string, addr netip.Addr, have bool) (act Action, reason string, needAddr bool) {
	for _, r := range c.rules {
		if r.target.IsAddr() {
			if !have {
				return "", "", true
			}
			if r.target.MatchAddr(addr) {
				return r.action, "rule " + string(r.action) + " " + r.target.String(), false
			}
			continue
		}
		if host != "" && r.target.MatchHost(host) {
			return r.action, "rule " + string(r.action) + " " + r.target.String(), false
		}
	}
	return c.def, "default action " + string(c.def), false
}

func parseAction(a Action) (Action, bool) {
	switch Action(strings.ToLower(string(a))) {
	case Allow:
		return Allow, true
	case Deny:
		return Deny, true
	}
	return "", false
}

func compileRules(rules []Rule) ([]compiledRule, error) {
	out := make([]compiledRule, 0, len(rules))
	for i, r := range rules {
		act, ok := parseAction(r.Action)
		if !ok {
			return nil, &RuleError{Index: i, Target: r.Target, Reason: fmt.Sprintf("action must be allow or deny, got %q", r.Action)}
		}
		t, err := ParseTarget(r.Target)
		if err != nil {
			re := err.(*RuleError)
			re.Index = i
			return nil, re
		}
		out = append(out, compiledRule{action: act, target: t})
	}
	return out, nil
}

// dedupe keeps the first rule per canonical target.
func dedupe(rules []compiledRule) []compiledRule {
	seen := make(map[string]bool, len(rules))
	out := rules[:0:0]
	for _, r := range rules {
		k := r.target.String()
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, r)
	}
	return out
}

// Enforcer holds the current policy. Reads are lock-free; changes are
// serialized and apply at once to every connection checked afterwards. Safe
// for concurrent use.
type Enforcer struct {
	maxRules int
	onChange func() // called after each change, under mu
	cur      atomic.Pointer[compiled]
	// mu serializes writers (read-modify-write of cur).
	mu sync.Mutex
}

// NewEnforcer returns an Enforcer with policy p (nil: deny-all) and at most
// maxRules rules (<= 0: DefaultMaxRules).
func NewEnforcer(p *Policy, maxRules int) (*Enforcer, error) {
	if maxRules <= 0 {
		maxRules = DefaultMaxRules
	}
	e := &Enforcer{maxRules: maxRules}
	e.cur.Store(&compiled{def: Deny})
	if p != nil {
		if err := e.Set(*p); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Policy returns a copy of the current policy, targets in canonical form.
func (e *Enforcer) Policy() Policy { return e.cur.Load().policy() }

// Mode returns the current mode (allow_all, deny_all, enforcing).
func (e *Enforcer) Mode() string { return e.Policy().Mode() }

// Set replaces the policy. An empty DefaultAction means deny. Duplicate targets
// keep their first rule. Errors wrap ErrInvalidPolicy or ErrTooManyRules; the
// policy is unchanged on error.
func (e *Enforcer) Set(p Policy) error {
	def := Deny
	if p.DefaultAction != "" {
		a, ok := parseAction(p.DefaultAction)
		if !ok {
			return &RuleError{Index: -1, Reason: fmt.Sprintf("defaultAction must be allow or deny, got %q", p.DefaultAction)}
		}
		def = a
	}
	rules, err := compileRules(p.Egress)
	if err != nil {
		return err
	}
	rules = dedupe(rules)
	if len(rules) > e.maxRules {
		return fmt.Errorf("%w: %d rules, at most %d", ErrTooManyRules, len(rules), e.maxRules)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.store(&compiled{def: def, rules: rules})
	return nil
}

// Patch merges rules into the policy: they come first, in order, and the first
// rule for a target wins (so an incoming rule replaces an existing one for the
// same target). Errors wrap ErrInvalidPolicy or ErrTooManyRules.
func (e *Enforcer) Patch(rules []Rule) error {
	if len(rules) == 0 {
		return &RuleError{Index: -1, Reason: "no rules to patch"}
	}
	in, err := compileRules(rules)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.cur.Load()
	merged := dedupe(append(in, old.rules...))
	if len(merged) > e.maxRules {
		return fmt.Errorf("%w: %d rules, at most %d", ErrTooManyRules, len(merged), e.maxRules)
	}
	e.store(&compiled{def: old.def, rules: merged})
	return nil
}

// Delete removes the rules for targets (compared in canonical form); unknown
// targets are ignored. An unparsable target is an error wrapping
// ErrInvalidPolicy and removes nothing.
func (e *Enforcer) Delete(targets []string) error {
	if len(targets) == 0 {
		return &RuleError{Index: -1, Reason: "no targets to delete"}
	}
	drop := make(map[string]bool, len(targets))
	for i, s := range targets {
		t, err := ParseTarget(s)
		if err != nil {
			re := err.(*RuleError)
			re.Index = i
			return re
		}
		drop[t.String()] = true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.cur.Load()
	kept := make([]compiledRule, 0, len(old.rules))
	for _, r := range old.rules {
		if !drop[r.target.String()] {
			kept = append(kept, r)
		}
	}
	e.store(&compiled{def: old.def, rules: kept})
	return nil
}

func (e *Enforcer) store(c *compiled) {
	e.cur.Store(c)
	if e.onChange != nil {
		e.onChange()
	}
}

// CheckHost decides for a name or IP literal without resolving. needAddr
// reports that an IP/CIDR rule comes before any decision, so the caller must
// resolve host and call CheckAddr for each address.
func (e *Enforcer) CheckHost(host string) (act Action, reason string, needAddr bool) {
	c := e.cur.Load()
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		act, reason, _ = c.decide("", a.Unmap(), true)
		return act, reason, false
	}
	return c.decide(host, netip.Addr{}, false)
}

// CheckAddr decides for host resolved to addr: domain rules match host, IP and
// CIDR rules match addr, the first match wins.
func (e *Enforcer) CheckAddr(host string, addr netip.Addr) (act Action, reason string) {
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		host = ""
	}
	act, reason, _ = e.cur.Load().decide(host, addr.Unmap(), true)
	return act, reason
}

// AllowsExplicitly reports whether every host t covers is allowed by a rule,
// not just by the default action: the first rule that matches t decides. For a
// wildcard t, a rule matches when it is the same wildcard or a wider one. Bindings
// require it.
func (e *Enforcer) AllowsExplicitly(t Target) bool {
	for _, r := range e.cur.Load().rules {
		var match bool
		switch {
		case t.kind == kindPrefix:
			match = r.target.kind == kindPrefix && r.target.prefix.Bits() <= t.prefix.Bits() && r.target.prefix.Contains(t.prefix.Addr())
		case t.kind == kindDomain:
			match = r.target.MatchHost(t.domain)
		case r.target.kind == kindWildcard:
			match = t.domain == r.target.domain || strings.HasSuffix(t.domain, "."+r.target.domain)
		}
		if match {
			return r.action == Allow
		}
	}
	return false
}
