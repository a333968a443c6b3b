package alineo

import (
	"context"
	"fmt"
	"strings"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
)

// EgressAction is what a rule does with matching outbound traffic.
type EgressAction = events.EgressAction

// The egress actions.
const (
	EgressAllow EgressAction = events.Allow
	EgressDeny  EgressAction = events.Deny
)

// EgressRule allows or denies outbound traffic to one target: an exact domain
// ("api.example.com"), "*.domain" (sub-domains only), an IP or a CIDR.
type EgressRule struct {
	Action EgressAction
	Target string
}

// NetworkPolicy is a sandbox's egress policy: the first rule whose target
// matches decides, then DefaultAction (empty: deny). The zero NetworkPolicy
// is sent as {}, which the lifecycle spec (and sandboxd) treat as allow-all,
// still behind the egress proxy.
type NetworkPolicy struct {
	DefaultAction EgressAction
	Egress        []EgressRule
}

func validAction(a EgressAction) bool { return a == EgressAllow || a == EgressDeny }

func validateRules(field string, rules []EgressRule) error {
	for i, r := range rules {
		switch {
		case !validAction(r.Action):
			return &OptionError{Field: fmt.Sprintf("%s[%d].Action", field, i), Reason: "must be allow or deny, got " + quote(string(r.Action))}
		case strings.TrimSpace(r.Target) == "" || strings.ContainsAny(r.Target, " \t\r\n"):
			return &OptionError{Field: fmt.Sprintf("%s[%d].Target", field, i), Reason: "must be a domain, *.domain, IP or CIDR, got " + quote(r.Target)}
		}
	}
	return nil
}

func (p *NetworkPolicy) validate() error {
	if p == nil {
		return nil
	}
	if p.DefaultAction != "" && !validAction(p.DefaultAction) {
		return &OptionError{Field: "NetworkPolicy.DefaultAction", Reason: "must be allow, deny or empty, got " + quote(string(p.DefaultAction))}
	}
	return validateRules("NetworkPolicy.Egress", p.Egress)
}

// effectiveDefault is the default action the server applies under p: an
// empty one is allow-all without rules ({}), deny with rules.
func (p *NetworkPolicy) effectiveDefault() EgressAction {
	switch {
	case p.DefaultAction != "":
		return p.DefaultAction
	case len(p.Egress) == 0:
		return EgressAllow
	default:
		return EgressDeny
	}
}

// wire returns the policy as the create request carries it, or nil.
func (p *NetworkPolicy) wire() *opensandbox.NetworkPolicy {
	if p == nil {
		return nil
	}
	return &opensandbox.NetworkPolicy{DefaultAction: string(p.DefaultAction), Egress: wireRules(p.Egress)}
}

func wireRules(rules []EgressRule) []opensandbox.NetworkRule {
	out := make([]opensandbox.NetworkRule, len(rules))
	for i, r := range rules {
		out[i] = opensandbox.NetworkRule{Action: string(r.Action), Target: r.Target}
	}
	return out
}

// Egress is a sandbox's egress policy, changed at runtime through the egress
// API (port 18080) of its sidecar (OpenSandbox) or proxy (sandboxd). Changes
// apply to the next request and connection. Safe for concurrent use.
type Egress struct{ sb *Sandbox }

// Egress returns the handle's egress policy. It needs a sandbox created with a
// NetworkPolicy (or CredentialProxy); on others its calls fail with a
// *SandboxError from the server.
func (s *Sandbox) Egress() *Egress { return &Egress{sb: s} }

func (g *Egress) client(ctx context.Context) (*opensandbox.Egress, error) {
	s := g.sb
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	eg, err := s.c.os.Egress(ctx, s.id)
	if err != nil {
		return nil, &SandboxError{SandboxID: s.id, Op: "resolve egress endpoint", Err: err}
	}
	return eg, nil
}

// Add puts rules in front of the policy (the first rule for a target wins, so
// an added rule replaces an older one for the same target) and, once the server
// accepted them, records one egress.rule_added {action, target} per rule. The
// rules of one call are recorded last first, so that replaying the events in
// order, each putting its rule in front, rebuilds the policy (Client.Resume
// does). Errors: *OptionError for a bad or missing rule, ErrClosed,
// *SandboxError when the server or the ledger refused.
func (g *Egress) Add(ctx context.Context, rules ...EgressRule) error {
	if len(rules) == 0 {
		return &OptionError{Field: "rules", Reason: "is empty"}
	}
	if err := validateRules("rules", rules); err != nil {
		return err
	}
	eg, err := g.client(ctx)
	if err != nil {
		return err
	}
	if _, err := eg.PatchPolicy(ctx, wireRules(rules)...); err != nil {
		return &SandboxError{SandboxID: g.sb.id, Op: "add egress rules", Err: err}
	}
	return g.sb.recordRules(ctx, events.EgressRuleAdded, rules)
}

// recordRules records one event per rule, last rule first.
func (s *Sandbox) recordRules(ctx context.Context, ev events.Event, rules []EgressRule) error {
	for i := len(rules) - 1; i >= 0; i-- {
		p := events.EgressRulePayload{Action: rules[i].Action, Target: rules[i].Target}
		if err := s.ledger.write(ctx, ev, events.SandboxLevel, p); err != nil {
			return &SandboxError{SandboxID: s.id, Op: "record " + string(ev), Err: err}
		}
	}
	return nil
}

// Remove removes the rules for targets and records one egress.rule_removed
// {action, target} per rule that existed; unknown targets are ignored.
// Errors: *OptionError for no target, ErrClosed, *SandboxError when the server
// or the ledger refused.
func (g *Egress) Remove(ctx context.Context, targets ...string) error {
	if len(targets) == 0 {
		return &OptionError{Field: "targets", Reason: "is empty"}
	}
	eg, err := g.client(ctx)
	if err != nil {
		return err
	}
	st, err := eg.GetPolicy(ctx)
	if err != nil {
		return &SandboxError{SandboxID: g.sb.id, Op: "read egress policy", Err: err}
	}
	want := make(map[string]bool, len(targets))
	for _, t := range targets {
		want[strings.ToLower(t)] = true
	}
	var removed []EgressRule
	if st.Policy != nil {
		for _, r := range st.Policy.Egress {
			if want[strings.ToLower(r.Target)] {
				removed = append(removed, EgressRule{Action: EgressAction(r.Action), Target: r.Target})
			}
		}
	}
	if _, err := eg.DeletePolicy(ctx, targets...); err != nil {
		return &SandboxError{SandboxID: g.sb.id, Op: "remove egress rules", Err: err}
	}
	return g.sb.recordRules(ctx, events.EgressRuleRemoved, removed)
}

// List returns the policy in force, as the server reports it.
// Errors: ErrClosed, *SandboxError.
func (g *Egress) List(ctx context.Context) (NetworkPolicy, error) {
	eg, err := g.client(ctx)
	if err != nil {
		return NetworkPolicy{}, err
	}
	st, err := eg.GetPolicy(ctx)
	if err != nil {
		return NetworkPolicy{}, &SandboxError{SandboxID: g.sb.id, Op: "read egress policy", Err: err}
	}
	var p NetworkPolicy
	if st.Policy != nil {
		p.DefaultAction = EgressAction(st.Policy.DefaultAction)
		for _, r := range st.Policy.Egress {
			p.Egress = append(p.Egress, EgressRule{Action: EgressAction(r.Action), Target: r.Target})
		}
	}
	return p, nil
}

// sessionPolicy is the network policy a session's ledger records: its rules
// (policyFromLedger) and the default action its sandbox.created recorded
// (empty for sessions recorded without one: by the TypeScript SDK, or before
// the field existed). has is false when the session had no policy.
func sessionPolicy(es []events.Entry) (rules []EgressRule, def EgressAction, has bool, err error) {
	if rules, has, err = policyFromLedger(es); err != nil {
		return nil, "", false, err
	}
	for _, e := range es {
		if !e.Event.Is(events.SandboxCreated) {
			continue
		}
		var p events.SandboxCreatedPayload
		if err := e.Decode(&p); err != nil {
			return nil, "", false, fmt.Errorf("decode %s: %w", e.Event, err)
		}
		if p.EgressDefault != "" {
			def, has = p.EgressDefault, true
		}
		break
	}
	return rules, def, has, nil
}

// policyFromLedger rebuilds the egress rules of a session from its
// egress.rule_added and egress.rule_removed events: each added rule goes in
// front and replaces an older rule for its target; a removed one goes.
func policyFromLedger(es []events.Entry) ([]EgressRule, bool, error) {
	var rules []EgressRule
	seen := false
	for _, e := range es {
		if e.Event != events.EgressRuleAdded && e.Event != events.EgressRuleRemoved {
			continue
		}
		seen = true
		var p events.EgressRulePayload
		if err := e.Decode(&p); err != nil {
			return nil, false, fmt.Errorf("decode %s: %w", e.Event, err)
		}
		kept := rules[:0:0]
		if e.Event == events.EgressRuleAdded {
			kept = append(kept, EgressRule{Action: p.Action, Target: p.Target})
		}
		for _, r := range rules {
			if !strings.EqualFold(r.Target, p.Target) {
				kept = append(kept, r)
			}
		}
		rules = kept
	}
	return rules, seen, nil
}

// credentialProxy returns the create request's credentialProxy, nil when off.
func credentialProxy(on bool) *opensandbox.CredentialProxy {
	if !on {
		return nil
	}
	return &opensandbox.CredentialProxy{Enabled: true}
}
