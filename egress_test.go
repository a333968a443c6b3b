package alineo

import (
	"errors"
	"fmt"
	"testing"

	"github.com/alineo-labs/alineo/events"
)

func ruleEntry(ev events.Event, action events.EgressAction, target string) events.Entry {
	return events.New(1, "n", "id", events.SandboxLevel, ev, events.EgressRulePayload{Action: action, Target: target})
}

func TestPolicyFromLedger(t *testing.T) {
	add := func(a events.EgressAction, target string) events.Entry {
		return ruleEntry(events.EgressRuleAdded, a, target)
	}
	del := func(a events.EgressAction, target string) events.Entry {
		return ruleEntry(events.EgressRuleRemoved, a, target)
	}
	other := events.New(1, "n", "id", events.SandboxLevel, events.SandboxClosed, nil)
	tests := []struct {
		name     string
		es       []events.Entry
		want     string
		wantSeen bool
	}{
		{"none", []events.Entry{other}, "[]", false},
		// Creation with [a.test allow, *.test deny] is recorded last first.
		{"initial order", []events.Entry{add("deny", "*.test"), add("allow", "a.test")}, "[{allow a.test} {deny *.test}]", true},
		{"added later goes first", []events.Entry{add("allow", "a.test"), add("allow", "b.test")}, "[{allow b.test} {allow a.test}]", true},
		{"replaces its target", []events.Entry{add("allow", "a.test"), add("allow", "b.test"), add("deny", "A.test")}, "[{deny A.test} {allow b.test}]", true},
		{"removed", []events.Entry{add("allow", "a.test"), add("allow", "b.test"), del("allow", "a.test"), other}, "[{allow b.test}]", true},
		{"all removed", []events.Entry{add("allow", "a.test"), del("allow", "a.test")}, "[]", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules, seen, err := policyFromLedger(tt.es)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(rules); got != tt.want || seen != tt.wantSeen {
				t.Fatalf("policyFromLedger = %s, %v; want %s, %v", got, seen, tt.want, tt.wantSeen)
			}
		})
	}
	bad := events.Entry{Ts: 1, Name: "n", SandboxID: "id", StepIndex: events.SandboxLevel, Event: events.EgressRuleAdded, Payload: []byte(`{"action":`)}
	if _, _, err := policyFromLedger([]events.Entry{bad}); err == nil {
		t.Fatal("policyFromLedger of a broken payload: no error")
	}
}

func FuzzPolicyFromLedger(f *testing.F) {
	f.Add([]byte(`{"action":"allow","target":"a.test"}`), true)
	f.Add([]byte(`{"action":"deny","target":"*.a.test"}`), false)
	f.Add([]byte(`null`), true)
	f.Fuzz(func(t *testing.T, payload []byte, added bool) {
		ev := events.EgressRuleRemoved
		if added {
			ev = events.EgressRuleAdded
		}
		e := events.Entry{Ts: 1, Name: "n", SandboxID: "id", StepIndex: events.SandboxLevel, Event: ev, Payload: payload}
		rules, _, err := policyFromLedger([]events.Entry{e, e})
		if err == nil && len(rules) > 1 {
			t.Fatalf("two events for one target gave %d rules", len(rules))
		}
	})
}

func TestSandboxOptionsNetworkPolicy(t *testing.T) {
	tests := []struct {
		name  string
		p     *NetworkPolicy
		field string // "" for valid
	}{
		{"nil", nil, ""},
		{"empty", &NetworkPolicy{}, ""},
		{"deny with rules", &NetworkPolicy{DefaultAction: EgressDeny, Egress: []EgressRule{{EgressAllow, "a.test"}, {EgressDeny, "10.0.0.0/8"}}}, ""},
		{"bad default", &NetworkPolicy{DefaultAction: "block"}, "NetworkPolicy.DefaultAction"},
		{"bad action", &NetworkPolicy{Egress: []EgressRule{{"ALLOW", "a.test"}}}, "NetworkPolicy.Egress[0].Action"},
		{"empty target", &NetworkPolicy{Egress: []EgressRule{{EgressAllow, "a.test"}, {EgressAllow, " "}}}, "NetworkPolicy.Egress[1].Target"},
		{"space in target", &NetworkPolicy{Egress: []EgressRule{{EgressAllow, "a.test b.test"}}}, "NetworkPolicy.Egress[0].Target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := SandboxOptions{Image: "host", NetworkPolicy: tt.p}.validate()
			var oe *OptionError
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("validate = %v, want nil", err)
			case tt.field != "" && (!errors.As(err, &oe) || oe.Field != tt.field):
				t.Fatalf("validate = %v, want an *OptionError on %s", err, tt.field)
			}
		})
	}
}
