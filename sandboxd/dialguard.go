package sandboxd

import (
	"context"
	"net"
	"net/netip"
	"strconv"

	"github.com/alineo-labs/alineo/sandboxd/egress"
)

// guardDial wraps dial (nil: a net.Dialer) so that an egress proxy never
// connects to this host, whatever the sandbox's policy says (allow-all
// included): its loopback, "this host" (0.0.0.0, ::), link-local (where clouds
// serve instance metadata) and interface addresses are refused with an
// *egress.DeniedError, except the destinations the operator opened
// (Config.AllowHosts). The server's own ports (its API, every sandbox's
// execd and egress API) stay closed even then: a sandbox that reached them
// could read its own egress token and rewrite its policy, or drive other
// sandboxes.
func (s *Server) guardDial(dial func(ctx context.Context, network, address string) (net.Conn, error)) func(ctx context.Context, network, address string) (net.Conn, error) {
	if dial == nil {
		d := &net.Dialer{Timeout: egress.DefaultDialTimeout}
		dial = d.DialContext
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return nil, &egress.DeniedError{Host: address, Reason: "not an ip:port address"}
		}
		a, port := ap.Addr().Unmap(), strconv.Itoa(int(ap.Port()))
		if isHostAddr(a) {
			if s.ownPort(int(ap.Port())) {
				return nil, &egress.DeniedError{Host: a.String(), Port: port, Reason: "a port of sandboxd itself"}
			}
			if !hostAllowed(s.cfg.AllowHosts, ap) {
				return nil, &egress.DeniedError{Host: a.String(), Port: port, Reason: "an address of the sandbox's host (the operator opens one with --allow-host HOST:PORT)"}
			}
		}
		return dial(ctx, network, address)
	}
}

// hostAllowed reports whether the operator opened ap (allow: Config.AllowHosts).
func hostAllowed(allow []string, ap netip.AddrPort) bool {
	for _, h := range allow {
		host, port, err := net.SplitHostPort(h)
		if err != nil || port != strconv.Itoa(int(ap.Port())) {
			continue
		}
		if a, err := netip.ParseAddr(host); err == nil && a.Unmap() == ap.Addr().Unmap() {
			return true
		}
		if host == "localhost" && ap.Addr().Unmap().IsLoopback() {
			return true
		}
	}
	return false
}

// isHostAddr reports whether a reaches this host: loopback, unspecified,
// link-local, or one of its interface addresses.
func isHostAddr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || isLocalAddr(a)
}

// ownPort reports whether port is the server's API port or the execd or
// egress API port of one of its live sandboxes.
func (s *Server) ownPort(port int) bool {
	if port == int(s.apiPort.Load()) {
		return true
	}
	for _, sb := range s.all() {
		sb.mu.Lock()
		hit := sb.rec.ExecdPort == port || sb.rec.EgressAPIPort == port
		p := sb.proc
		sb.mu.Unlock()
		if hit || p != nil && (p.Port() == port || p.EgressAPIPort() == port) {
			return true
		}
	}
	return false
}

// isLocalAddr reports whether a is an address of this host.
func isLocalAddr(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() || a.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: refuse
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}

// HostPolicy is the egress policy of a sandbox created without a
// networkPolicy (unless Config.HostNetwork): every
// destination is allowed but the host's own addresses, so a sandbox reaches
// the network through its proxy but not the services listening on this
// machine: loopback (127.0.0.0/8, ::1), "this host" (0.0.0.0/8, ::), link-local
// (169.254.0.0/16, where clouds serve instance metadata, and fe80::/10), and
// the addresses of this machine's interfaces when the sandbox was created.
func HostPolicy() *egress.Policy {
	p := &egress.Policy{DefaultAction: egress.Allow}
	deny := func(target string) { p.Egress = append(p.Egress, egress.Rule{Action: egress.Deny, Target: target}) }
	for _, t := range []string{"127.0.0.0/8", "::1", "0.0.0.0/8", "::", "169.254.0.0/16", "fe80::/10"} {
		deny(t)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		pfx, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := pfx.Addr().Unmap()
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() {
			continue // covered above
		}
		deny(ip.String())
	}
	return p
}
