package soak

import (
	"errors"
	"net/netip"
	"testing"
)

func TestPlanNetwork(t *testing.T) {
	p, err := PlanNetwork("alsoak", DefaultSubnet, 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, role, addr, port string }{
		{"ctl", RoleCtl, "198.18.0.1", "p-ctl"},
		{"nats1", RoleNATS, "198.18.0.2", "p-nats1"},
		{"nats2", RoleNATS, "198.18.0.3", "p-nats2"},
		{"nats3", RoleNATS, "198.18.0.4", "p-nats3"},
		{"pg", RolePostgres, "198.18.0.5", "p-pg"},
		{"s3", RoleS3, "198.18.0.6", "p-s3"},
		{"svc", RoleServices, "198.18.0.7", "p-svc"},
		{"h1", RoleHost, "198.18.0.8", "p-h1"},
		{"h2", RoleHost, "198.18.0.9", "p-h2"},
		{"h3", RoleHost, "198.18.0.10", "p-h3"},
	}
	if got := len(p.Nodes); got != len(want) {
		t.Fatalf("%d nodes, want %d: %+v", got, len(want), p.Nodes)
	}
	for i, w := range want {
		n := p.Nodes[i]
		if n.Name != w.name || n.Role != w.role || n.Addr.String() != w.addr || n.Port != w.port {
			t.Errorf("node %d = %s %s %s %s, want %s %s %s %s", i, n.Name, n.Role, n.Addr, n.Port, w.name, w.role, w.addr, w.port)
		}
	}
	if p.RootLink != "alsoak0" || p.Bridge != "br" {
		t.Errorf("root link %q, bridge %q", p.RootLink, p.Bridge)
	}
	if got, want := p.CIDR(p.Nodes[7].Addr), "198.18.0.8/24"; got != want {
		t.Errorf("CIDR = %s, want %s", got, want)
	}
	if got := len(p.Of(RoleHost)); got != 3 {
		t.Errorf("%d hosts", got)
	}
	if n, ok := p.Node("s3"); !ok || n.Addr.String() != "198.18.0.6" {
		t.Errorf("Node(s3) = %v %v", n, ok)
	}
}

// Every address of every plan PlanNetwork accepts is inside TestRange and
// its subnet, unique, and neither the subnet's network nor its broadcast
// address; every link name fits Linux's 15 bytes.
func TestPlanNetworkAddressesStayInTheTestRange(t *testing.T) {
	for _, tc := range []struct {
		subnet string
		hosts  int
	}{
		{"198.18.0.0/24", 3}, {"198.19.255.0/24", 200}, {"198.18.0.0/15", 50}, {"198.19.7.240/28", 7},
		{"198.18.3.4/24", 1}, // not masked: the network is 198.18.3.0/24
	} {
		p, err := PlanNetwork("a1234567", netip.MustParsePrefix(tc.subnet), 3, tc.hosts)
		if err != nil {
			t.Fatalf("%s, %d hosts: %v", tc.subnet, tc.hosts, err)
		}
		sub := netip.MustParsePrefix(tc.subnet).Masked()
		seen := map[netip.Addr]bool{}
		for _, n := range p.Nodes {
			switch {
			case !TestRange.Contains(n.Addr):
				t.Errorf("%s: %s outside %s", tc.subnet, n.Addr, TestRange)
			case !sub.Contains(n.Addr):
				t.Errorf("%s: %s outside its subnet", tc.subnet, n.Addr)
			case n.Addr == sub.Addr():
				t.Errorf("%s: %s is the network address", tc.subnet, n.Addr)
			case seen[n.Addr]:
				t.Errorf("%s: %s handed out twice", tc.subnet, n.Addr)
			case len(n.Port) > 15 || len(p.RootLink) > 15:
				t.Errorf("%s: link name %q or %q too long", tc.subnet, n.Port, p.RootLink)
			}
			seen[n.Addr] = true
		}
		last := p.Nodes[len(p.Nodes)-1].Addr
		if bc := lastAddr(sub); last == bc {
			t.Errorf("%s: %s is the broadcast address", tc.subnet, last)
		}
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	hostBits := 32 - p.Bits()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= 1<<hostBits - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func TestPlanNetworkRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, prefix, subnet string
		nats, hosts          int
	}{
		{"a private range", "alsoak", "10.0.0.0/24", 3, 3},
		{"the documentation range", "alsoak", "192.0.2.0/24", 3, 3},
		{"a subnet wider than the test range", "alsoak", "198.16.0.0/14", 3, 3},
		{"the subnet just past the test range", "alsoak", "198.20.0.0/24", 3, 3},
		{"the subnet just before it", "alsoak", "198.17.255.0/24", 3, 3},
		{"IPv6", "alsoak", "2001:db8::/64", 3, 3},
		{"too many hosts for the subnet", "alsoak", "198.18.0.0/28", 3, 10},
		{"a /31", "alsoak", "198.18.0.0/31", 1, 1},
		{"no host", "alsoak", "198.18.0.0/24", 3, 0},
		{"no NATS node", "alsoak", "198.18.0.0/24", 0, 3},
		{"an empty prefix", "", "198.18.0.0/24", 3, 3},
		{"a prefix too long for a link name", "alsoak123", "198.18.0.0/24", 3, 3},
		{"a prefix with a dash", "al-soak", "198.18.0.0/24", 3, 3},
		{"a prefix with a capital", "Alsoak", "198.18.0.0/24", 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub, _ := netip.ParsePrefix(tc.subnet)
			p, err := PlanNetwork(tc.prefix, sub, tc.nats, tc.hosts)
			if !errors.Is(err, ErrNetPlan) {
				t.Fatalf("plan = %+v, err = %v; want ErrNetPlan", p, err)
			}
		})
	}
}
