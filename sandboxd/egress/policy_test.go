package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		in, want string
		addr     bool
		wantErr  bool
	}{
		{in: "Example.COM", want: "example.com"},
		{in: "example.com.", want: "example.com"},
		{in: "*.Example.com", want: "*.example.com"},
		{in: "10.1.2.3", want: "10.1.2.3", addr: true},
		{in: "10.1.2.3/8", want: "10.0.0.0/8", addr: true},
		{in: "::ffff:10.1.2.3", want: "10.1.2.3", addr: true},
		{in: "2001:db8::1", want: "2001:db8::1", addr: true},
		{in: "[2001:db8::1]", want: "2001:db8::1", addr: true},
		{in: "2001:db8::/32", want: "2001:db8::/32", addr: true},
		{in: "under_score.example.com", want: "under_score.example.com"},
		{in: "", wantErr: true},
		{in: "*", wantErr: true},
		{in: "*.", wantErr: true},
		{in: "a.*.example.com", wantErr: true},
		{in: "**.example.com", wantErr: true},
		{in: "exa mple.com", wantErr: true},
		{in: "-bad.example.com", wantErr: true},
		{in: "a..b", wantErr: true},
		{in: "10.0.0.0/33", wantErr: true},
		{in: "http://example.com", wantErr: true},
		{in: "example.com:443", wantErr: true},
		{in: strings.Repeat("a", 64) + ".com", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseTarget(tt.in)
		if tt.wantErr {
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("ParseTarget(%q) err = %v, want ErrInvalidPolicy", tt.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseTarget(%q) err = %v", tt.in, err)
			continue
		}
		if got.String() != tt.want || got.IsAddr() != tt.addr {
			t.Errorf("ParseTarget(%q) = %q (addr %v), want %q (addr %v)", tt.in, got, got.IsAddr(), tt.want, tt.addr)
		}
	}
}

func TestTargetMatch(t *testing.T) {
	tests := []struct {
		target, host string
		want         bool
	}{
		{"example.com", "example.com", true},
		{"example.com", "EXAMPLE.com.", true},
		{"example.com", "api.example.com", false},
		{"*.example.com", "api.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "badexample.com", false},
		{"*.example.com", "API.Example.COM", true},
		{"10.0.0.0/8", "10.0.0.0", false}, // address targets never match names
	}
	for _, tt := range tests {
		tg, err := ParseTarget(tt.target)
		if err != nil {
			t.Fatal(err)
		}
		if got := tg.MatchHost(tt.host); got != tt.want {
			t.Errorf("%q.MatchHost(%q) = %v, want %v", tt.target, tt.host, got, tt.want)
		}
	}
	addrs := []struct {
		target, addr string
		want         bool
	}{
		{"10.0.0.0/8", "10.255.1.2", true},
		{"10.0.0.0/8", "11.0.0.1", false},
		{"10.0.0.0/8", "::ffff:10.0.0.1", true},
		{"192.168.1.7", "192.168.1.7", true},
		{"192.168.1.7", "192.168.1.8", false},
		{"2001:db8::/32", "2001:db8:1::5", true},
		{"2001:db8::/32", "10.0.0.1", false},
		{"example.com", "10.0.0.1", false},
	}
	for _, tt := range addrs {
		tg, err := ParseTarget(tt.target)
		if err != nil {
			t.Fatal(err)
		}
		if got := tg.MatchAddr(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("%q.MatchAddr(%s) = %v, want %v", tt.target, tt.addr, got, tt.want)
		}
	}
}

func TestDecideFirstMatchWins(t *testing.T) {
	e, err := NewEnforcer(&Policy{DefaultAction: Allow, Egress: []Rule{
		{Deny, "evil.example.com"},
		{Allow, "*.example.com"},
		{Deny, "*.example.com"}, // duplicate target: dropped
		{Deny, "example.com"},
		{Deny, "10.0.0.0/8"},
		{Allow, "10.1.2.3"}, // shadowed by the CIDR before it
	}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(e.Policy().Egress), 5; got != want {
		t.Fatalf("rules = %d, want %d (duplicate target dropped)", got, want)
	}
	hosts := []struct {
		host     string
		want     Action
		needAddr bool
	}{
		{"evil.example.com", Deny, false},
		{"api.example.com", Allow, false},
		{"example.com", Deny, false},
		{"other.org", "", true}, // an address rule comes first: resolve
		{"10.1.2.3", Deny, false},
		{"192.0.2.1", Allow, false},
	}
	for _, tt := range hosts {
		got, _, need := e.CheckHost(tt.host)
		if got != tt.want || need != tt.needAddr {
			t.Errorf("CheckHost(%q) = %q, needAddr %v; want %q, %v", tt.host, got, need, tt.want, tt.needAddr)
		}
	}
	if got, _ := e.CheckAddr("other.org", netip.MustParseAddr("10.9.9.9")); got != Deny {
		t.Errorf("CheckAddr(other.org, 10.9.9.9) = %q, want deny", got)
	}
	if got, _ := e.CheckAddr("other.org", netip.MustParseAddr("192.0.2.1")); got != Allow {
		t.Errorf("CheckAddr(other.org, 192.0.2.1) = %q, want allow", got)
	}
	// A domain rule before the address rules decides whatever the address.
	if got, _ := e.CheckAddr("api.example.com", netip.MustParseAddr("10.9.9.9")); got != Allow {
		t.Errorf("CheckAddr(api.example.com, 10.9.9.9) = %q, want allow", got)
	}
}

func TestDefaultActionMissingIsDeny(t *testing.T) {
	e, err := NewEnforcer(&Policy{Egress: []Rule{{Allow, "a.example"}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := e.CheckHost("b.example"); got != Deny {
		t.Fatalf("CheckHost = %q, want deny", got)
	}
	e2, _ := NewEnforcer(nil, 0)
	if got, want := e2.Mode(), ModeDenyAll; got != want {
		t.Fatalf("nil policy mode = %q, want %q", got, want)
	}
}

func TestModes(t *testing.T) {
	tests := []struct {
		p    Policy
		want string
	}{
		{Policy{}, ModeDenyAll},
		{Policy{DefaultAction: Deny}, ModeDenyAll},
		{Policy{DefaultAction: Allow}, ModeAllowAll},
		{Policy{DefaultAction: Allow, Egress: []Rule{{Deny, "x.example"}}}, ModeEnforcing},
		{Policy{DefaultAction: Deny, Egress: []Rule{{Allow, "x.example"}}}, ModeEnforcing},
	}
	for _, tt := range tests {
		if got := tt.p.Mode(); got != tt.want {
			t.Errorf("%+v.Mode() = %q, want %q", tt.p, got, tt.want)
		}
	}
}

func TestPatchMergeAndDelete(t *testing.T) {
	e, err := NewEnforcer(&Policy{Egress: []Rule{{Allow, "a.example"}, {Deny, "b.example"}}}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Patch([]Rule{{Allow, "B.example"}, {Deny, "b.example"}, {Allow, "c.example"}}); err != nil {
		t.Fatal(err)
	}
	got := e.Policy().Egress
	want := []Rule{{Allow, "b.example"}, {Allow, "c.example"}, {Allow, "a.example"}}
	if len(got) != len(want) {
		t.Fatalf("rules = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("rules = %v, want %v", got, want)
		}
	}
	if err := e.Patch([]Rule{{Allow, "d.example"}, {Allow, "e.example"}}); !errors.Is(err, ErrTooManyRules) {
		t.Fatalf("Patch over the limit err = %v, want ErrTooManyRules", err)
	}
	if got, want := len(e.Policy().Egress), 3; got != want {
		t.Fatalf("rules after failed patch = %d, want %d", got, want)
	}
	if err := e.Delete([]string{"C.EXAMPLE", "unknown.example"}); err != nil {
		t.Fatal(err)
	}
	if got, want := len(e.Policy().Egress), 2; got != want {
		t.Fatalf("rules after delete = %d, want %d", got, want)
	}
	if err := e.Delete([]string{"not a target"}); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("Delete(bad) err = %v, want ErrInvalidPolicy", err)
	}
	if err := e.Patch(nil); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("Patch(nil) err = %v, want ErrInvalidPolicy", err)
	}
	var re *RuleError
	if err := e.Patch([]Rule{{Allow, "ok.example"}, {"maybe", "x.example"}}); !errors.As(err, &re) || re.Index != 1 {
		t.Fatalf("Patch(bad action) err = %v, want *RuleError at index 1", err)
	}
	if err := e.Set(Policy{DefaultAction: "sometimes"}); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("Set(bad default) err = %v, want ErrInvalidPolicy", err)
	}
}

func TestAllowsExplicitly(t *testing.T) {
	e, err := NewEnforcer(&Policy{DefaultAction: Allow, Egress: []Rule{
		{Deny, "bad.example.com"}, {Allow, "*.example.com"}, {Allow, "api.other.org"}, {Allow, "10.0.0.0/8"},
	}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host string
		want bool
	}{
		{"api.example.com", true},
		{"*.example.com", true},
		{"*.sub.example.com", true},
		{"bad.example.com", false},
		{"example.com", false}, // only the default allows it
		{"api.other.org", true},
		{"*.other.org", false},
		{"10.2.3.4", true},
		{"11.2.3.4", false},
	}
	for _, tt := range tests {
		tg, err := ParseTarget(tt.host)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.AllowsExplicitly(tg); got != tt.want {
			t.Errorf("AllowsExplicitly(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
}

func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com", "10.0.0.0/8", "::1", "[::1]", "A.B.", "*.*", "1.2.3.4/32", "::ffff:1.2.3.4/120", "-", "a_b"} {
		f.Add(s, "x.example.com")
	}
	f.Fuzz(func(t *testing.T, s, host string) {
		tg, err := ParseTarget(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("ParseTarget(%q) err = %v, not ErrInvalidPolicy", s, err)
			}
			return
		}
		c := tg.String()
		again, err := ParseTarget(c)
		if err != nil || again.String() != c {
			t.Fatalf("canonical %q of %q does not round-trip: %q, %v", c, s, again, err)
		}
		if c != strings.ToLower(c) && !tg.IsAddr() {
			t.Fatalf("canonical %q is not lower case", c)
		}
		if !tg.IsAddr() && !strings.HasPrefix(c, "*.") && !tg.MatchHost(strings.ToUpper(c)) {
			t.Fatalf("%q does not match its own name", c)
		}
		if tg.MatchHost(host) != again.MatchHost(host) {
			t.Fatalf("match of %q differs after round trip", host)
		}
	})
}
