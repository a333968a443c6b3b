package soak

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
)

// TestRange is 198.18.0.0/15, the range RFC 2544 reserves for network
// tests: every address of the multi-host soak's network comes from it.
var TestRange = netip.MustParsePrefix("198.18.0.0/15")

// DefaultSubnet is the multi-host soak's subnet: 198.18.0.0/24.
var DefaultSubnet = netip.MustParsePrefix("198.18.0.0/24")

// DefaultNetPrefix names everything the multi-host soak creates: its
// namespaces' files (/run/alineo-soak/<prefix>/<node>), its link in the
// root namespace (<prefix>0) and its lock.
const DefaultNetPrefix = "alsoak"

// The roles of a network's nodes.
const (
	RoleCtl      = "ctl"      // the soak itself, in the root namespace
	RoleNATS     = "nats"     // a NATS node
	RolePostgres = "postgres" // Postgres
	RoleS3       = "s3"       // the S3 server
	RoleServices = "svc"      // the API and the projector's partitions
	RoleHost     = "host"     // a sandbox host: sandboxd and executors
)

// Node is one namespace of the soak's network (or, for RoleCtl, the root
// namespace's end of the link the soak reaches the bridge by).
type Node struct {
	// Name names the node's namespace file and its port; unique in a plan.
	Name string
	Role string
	// Addr is the node's address on the bridge.
	Addr netip.Addr
	// Port is the name of the node's link on the bridge, in the bridge's
	// namespace; the node's own end is "eth0" (RoleCtl's: the plan's
	// RootLink).
	Port string
}

// NetPlan is the layout of a multi-host soak's network: a bridge in a
// namespace of its own, one namespace per node with a link to the bridge
// and one address of Subnet, and the soak's own link from the root
// namespace. It is pure data (PlanNetwork); Network makes it real.
type NetPlan struct {
	Prefix string
	Subnet netip.Prefix
	// Bridge names the bridge's namespace.
	Bridge string
	// RootLink is the soak's link in the root namespace.
	RootLink string
	// Nodes in address order: the soak (ctl), the NATS nodes, Postgres,
	// S3, the services, the hosts.
	Nodes []Node
}

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)

// maxIfName is the longest Linux interface name (IFNAMSIZ minus its NUL).
const maxIfName = 15

// PlanNetwork lays out a network of natsNodes NATS nodes and hosts sandbox
// hosts on subnet, which must be IPv4 and inside TestRange. Addresses are
// handed out in order from the subnet's first, the network address and
// broadcast address excluded. prefix is 1 to 8 lowercase letters and
// digits, starting with a letter. Errors wrap ErrNetPlan.
func PlanNetwork(prefix string, subnet netip.Prefix, natsNodes, hosts int) (*NetPlan, error) {
	if !prefixRE.MatchString(prefix) {
		return nil, fmt.Errorf("%w: prefix %q: want 1 to 8 lowercase letters and digits, starting with a letter", ErrNetPlan, prefix)
	}
	if !subnet.IsValid() || !subnet.Addr().Is4() {
		return nil, fmt.Errorf("%w: subnet %s: want an IPv4 prefix", ErrNetPlan, subnet)
	}
	subnet = subnet.Masked()
	if subnet.Bits() < TestRange.Bits() || !TestRange.Contains(subnet.Addr()) {
		return nil, fmt.Errorf("%w: subnet %s is not inside %s, the range reserved for network tests", ErrNetPlan, subnet, TestRange)
	}
	if natsNodes < 1 || hosts < 1 {
		return nil, fmt.Errorf("%w: %d NATS nodes and %d hosts: want at least one of each", ErrNetPlan, natsNodes, hosts)
	}
	p := &NetPlan{Prefix: prefix, Subnet: subnet, Bridge: "br", RootLink: prefix + "0"}
	add := func(name, role string) {
		p.Nodes = append(p.Nodes, Node{Name: name, Role: role, Port: "p-" + name})
	}
	add(RoleCtl, RoleCtl)
	for i := range natsNodes {
		add("nats"+strconv.Itoa(i+1), RoleNATS)
	}
	add("pg", RolePostgres)
	add("s3", RoleS3)
	add(RoleServices, RoleServices)
	for i := range hosts {
		add("h"+strconv.Itoa(i+1), RoleHost)
	}
	// Usable addresses: all but the network and broadcast addresses.
	usable := uint64(1)<<(32-subnet.Bits()) - 2
	if subnet.Bits() > 30 || uint64(len(p.Nodes)) > usable {
		return nil, fmt.Errorf("%w: subnet %s has %d addresses for %d nodes", ErrNetPlan, subnet, max(0, int64(usable)), len(p.Nodes))
	}
	a := subnet.Addr()
	for i := range p.Nodes {
		a = a.Next()
		p.Nodes[i].Addr = a
		if len(p.Nodes[i].Port) > maxIfName {
			return nil, fmt.Errorf("%w: link name %q is longer than %d bytes", ErrNetPlan, p.Nodes[i].Port, maxIfName)
		}
	}
	return p, nil
}

// Of returns the plan's nodes of role, in order.
func (p *NetPlan) Of(role string) []Node {
	var out []Node
	for _, n := range p.Nodes {
		if n.Role == role {
			out = append(out, n)
		}
	}
	return out
}

// Node returns the node named name.
func (p *NetPlan) Node(name string) (Node, bool) {
	for _, n := range p.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// CIDR is a's address with the plan's prefix length, as ip addr add takes it.
func (p *NetPlan) CIDR(a netip.Addr) string {
	return netip.PrefixFrom(a, p.Subnet.Bits()).String()
}
