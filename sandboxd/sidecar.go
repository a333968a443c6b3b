package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/egress"
	"golang.org/x/sys/unix"
)

// ProxyPort is the port on the sandbox's own loopback where its egress proxy
// listens; HTTP_PROXY and HTTPS_PROXY point there.
const ProxyPort = 3128

// sidecar is the egress side of a sandbox with its own network namespace: its
// egress.Proxy, fed by a listener on 127.0.0.1:ProxyPort inside the sandbox's
// namespace (the init hands it over), and the egress API served on a host
// loopback port. It lives in the server, so nothing in it (the credential
// values, the CA key) is visible from the sandbox.
type sidecar struct {
	proxy *egress.Proxy
	apiLn net.Listener
	api   *http.Server
	wg    sync.WaitGroup // the Serve goroutines
}

// newSidecar creates the egress proxy of rec and starts serving its API on a
// host loopback port.
func (s *Server) newSidecar(rec *record) (*sidecar, error) {
	px, err := egress.New(egress.Config{
		Name:            rec.ID,
		Token:           rec.EgressToken,
		Policy:          rec.NetworkPolicy,
		CredentialProxy: rec.CredentialProxy,
		UpstreamTLS:     s.cfg.EgressUpstreamTLS,
		Resolver:        s.cfg.EgressResolver,
		Dial:            s.guardDial(s.cfg.EgressDial),
		Logger:          s.log.With("id", rec.ID),
		Metrics:         s.cfg.EgressMetrics,
	})
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = px.Close()
		return nil, fmt.Errorf("egress API listener: %w", err)
	}
	sc := &sidecar{proxy: px, apiLn: ln, api: &http.Server{Handler: px.Handler(), ReadHeaderTimeout: 30 * time.Second}}
	sc.wg.Add(1)
	go func() {
		defer sc.wg.Done()
		if err := sc.api.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("sandboxd: egress API stopped", "id", rec.ID, "err", err)
		}
	}()
	return sc, nil
}

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
			if !s.hostAllowed(ap) {
				return nil, &egress.DeniedError{Host: a.String(), Port: port, Reason: "an address of the sandbox's host (the operator opens one with --allow-host HOST:PORT)"}
			}
		}
		return dial(ctx, network, address)
	}
}

// hostAllowed reports whether the operator opened ap (Config.AllowHosts).
func (s *Server) hostAllowed(ap netip.AddrPort) bool {
	for _, h := range s.cfg.AllowHosts {
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
		if hit || p != nil && (p.port == port || p.eg.apiPort() == port) {
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

// serveProxy serves the egress proxy on l (the sandbox's 127.0.0.1:ProxyPort)
// until close.
func (sc *sidecar) serveProxy(l net.Listener) {
	sc.wg.Add(1)
	go func() {
		defer sc.wg.Done()
		_ = sc.proxy.Serve(l)
	}()
}

// apiPort is the host loopback port of the egress API, 0 for a nil sidecar.
func (sc *sidecar) apiPort() int {
	if sc == nil {
		return 0
	}
	return sc.apiLn.Addr().(*net.TCPAddr).Port
}

// close stops the API and the proxy and waits for their goroutines. Safe on a
// nil sidecar and more than once.
func (sc *sidecar) close() {
	if sc == nil {
		return
	}
	_ = sc.api.Close()
	_ = sc.proxy.Close()
	sc.wg.Wait()
}

// proxyEnv points a sandbox's HTTP clients at its egress proxy.
func proxyEnv() []string {
	u := "http://127.0.0.1:" + strconv.Itoa(ProxyPort)
	return []string{
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
		"NO_PROXY=localhost,127.0.0.1", "no_proxy=localhost,127.0.0.1",
	}
}

// caEnv points TLS clients at the bundle (an absolute path in the sandbox)
// that holds the sandbox's egress CA.
func caEnv(bundle string) []string {
	return []string{
		"SSL_CERT_FILE=" + bundle, "CURL_CA_BUNDLE=" + bundle, "REQUESTS_CA_BUNDLE=" + bundle,
		"NODE_EXTRA_CA_CERTS=" + bundle, "GIT_SSL_CAINFO=" + bundle,
	}
}

// loopbackUp brings up lo in the calling process's network namespace (a fresh
// namespace has it down, without 127.0.0.1).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}
