package runtime

import (
	"errors"
	"fmt"
	"net"
	"net/http"
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

// newSidecar creates the egress proxy of sb and starts serving its API on a
// host loopback port.
func (r *Runtime) newSidecar(sb *Sandbox) (*sidecar, error) {
	px, err := egress.New(egress.Config{
		Name:            sb.ID,
		Token:           sb.Egress.Token,
		Policy:          sb.Egress.Policy,
		CredentialProxy: sb.Egress.CredentialProxy,
		UpstreamTLS:     r.cfg.EgressUpstreamTLS,
		Resolver:        r.cfg.EgressResolver,
		Dial:            r.cfg.EgressDial,
		Logger:          r.log.With("id", sb.ID),
		Metrics:         r.cfg.EgressMetrics,
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
			r.log.Warn("sandboxd: egress API stopped", "id", sb.ID, "err", err)
		}
	}()
	return sc, nil
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
