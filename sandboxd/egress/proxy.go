package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Proxy is one sandbox's egress proxy: an HTTP forward proxy (absolute-URI
// requests and CONNECT) that enforces the policy, and, with
// Config.CredentialProxy, injects credentials of the vault, terminating TLS
// with a per-sandbox CA for hosts that have a binding. Handler serves its API.
// Safe for concurrent use.
type Proxy struct {
	cfg       Config
	log       *slog.Logger
	policy    *Enforcer
	vault     *Vault
	ca        *ca // nil without the credential proxy
	transport *http.Transport
	rp        *httputil.ReverseProxy
	api       http.Handler
	sem       chan struct{} // bounds CONNECT tunnels
	clients   chan struct{} // bounds client connections (capListener)
	metrics   *proxyMetrics
	denials   *sampledLog
	refusals  *sampledLog
	errLog    *log.Logger

	// mu guards closed, servers and conns.
	mu      sync.Mutex
	closed  bool
	servers map[*http.Server]struct{}
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup // tunnel and TLS-terminating goroutines
}

// New returns a Proxy for cfg. It fails with an error wrapping ErrInvalidPolicy
// or ErrTooManyRules for a bad initial policy.
func New(cfg Config) (*Proxy, error) {
	cfg = cfg.withDefaults()
	pol, err := NewEnforcer(cfg.Policy, cfg.MaxRules)
	if err != nil {
		return nil, fmt.Errorf("new egress proxy: %w", err)
	}
	p := &Proxy{
		cfg:     cfg,
		log:     cfg.Logger.With("sandbox", cfg.Name),
		policy:  pol,
		vault:   newVault(cfg.CredentialProxy && cfg.Token != "", pol),
		sem:     make(chan struct{}, cfg.MaxConns),
		clients: make(chan struct{}, cfg.MaxClientConns),
		metrics: cfg.Metrics.forProxy(cfg.Name),
		servers: map[*http.Server]struct{}{},
		conns:   map[net.Conn]struct{}{},
	}
	p.denials = newSampledLog(p.log, "egress denied")
	p.refusals = newSampledLog(p.log, "egress proxy connection refused")
	p.errLog = slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	if cfg.CredentialProxy {
		if p.ca, err = newCA(cfg.Name); err != nil {
			p.metrics.release()
			return nil, fmt.Errorf("new egress proxy: %w", err)
		}
	}
	var upTLS *tls.Config
	if cfg.UpstreamTLS != nil {
		upTLS = cfg.UpstreamTLS.Clone()
	}
	p.transport = &http.Transport{
		Proxy:                 nil, // never chain to the host's proxy
		DialContext:           p.dial,
		TLSClientConfig:       upTLS,
		TLSHandshakeTimeout:   cfg.DialTimeout,
		MaxIdleConns:          64,
		IdleConnTimeout:       60 * time.Second,
		ResponseHeaderTimeout: 0,
	}
	// Pooled upstream connections were checked under the old policy: drop them.
	pol.onChange = p.transport.CloseIdleConnections
	p.rp = &httputil.ReverseProxy{
		Rewrite:       p.rewrite,
		Transport:     p.transport,
		FlushInterval: -1,
		ErrorLog:      p.errLog,
		ErrorHandler:  p.upstreamError,
	}
	p.api = p.newAPI()
	return p, nil
}

// Policy returns the policy enforcer (the API's /policy routes use it too).
func (p *Proxy) Policy() *Enforcer { return p.policy }

// Vault returns the credential vault (the API's /credential-vault routes use it
// too). Its Secrets feed redaction.
func (p *Proxy) Vault() *Vault { return p.vault }

// Handler returns the egress API (policy, credential vault, /healthz).
func (p *Proxy) Handler() http.Handler { return p.api }

// CACertPEM returns the per-sandbox CA certificate (PEM) to install in the
// sandbox's trust store (see InstallCA), or nil without the credential proxy.
func (p *Proxy) CACertPEM() []byte {
	if p.ca == nil {
		return nil
	}
	return append([]byte(nil), p.ca.certPEM...)
}

// Serve serves the proxy on l until Close; it closes l. It returns nil after
// Close, ErrClosed if called after Close, else the error that stopped it.
// The connections of every Serve of p count against one Config.MaxClientConns:
// past it, a new connection is closed as soon as it is accepted.
func (p *Proxy) Serve(l net.Listener) error {
	srv := p.newServer(http.HandlerFunc(p.serveProxy))
	if !p.track(srv) {
		l.Close()
		return ErrClosed
	}
	defer p.untrack(srv)
	err := srv.Serve(&capListener{Listener: l, sem: p.clients, m: p.metrics, refused: p.refusals})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops every Serve, closes every connection and tunnel and waits for
// their goroutines. Idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	servers := p.servers
	conns := p.conns
	p.servers, p.conns = map[*http.Server]struct{}{}, map[net.Conn]struct{}{}
	p.mu.Unlock()
	var errs []error
	for s := range servers {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for c := range conns {
		c.Close()
	}
	p.wg.Wait()
	p.transport.CloseIdleConnections()
	p.denials.close()
	p.refusals.close()
	p.metrics.release()
	return errors.Join(errs...)
}

func (p *Proxy) track(s *http.Server) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.servers[s] = struct{}{}
	return true
}

func (p *Proxy) untrack(s *http.Server) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.servers, s)
}

// register tracks srv (if any) and conns for Close and adds one to wg for the
// goroutine the caller starts next. False after Close.
func (p *Proxy) register(srv *http.Server, conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if srv != nil {
		p.servers[srv] = struct{}{}
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	p.wg.Add(1)
	return true
}

func (p *Proxy) unregister(srv *http.Server, conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.servers, srv)
	for _, c := range conns {
		delete(p.conns, c)
	}
}

// ctxKey carries the request's scheme, host and port to rewrite.
type ctxKey struct{}

type endpoint struct {
	scheme, host string
	port         int
}

func (p *Proxy) serveProxy(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.serveConnect(w, r)
		return
	}
	if !r.URL.IsAbs() || (r.URL.Scheme != "http" && r.URL.Scheme != "https") || r.URL.Host == "" {
		http.Error(w, "alineo egress proxy: send absolute-URI http requests or CONNECT", http.StatusBadRequest)
		return
	}
	ep, err := endpointOf(r.URL.Scheme, r.URL.Host)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := p.checkEarly(r.Context(), ep.host, ep.port); err != nil {
		p.writeDialError(w, err)
		return
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, ep)))
}

// newServer is an HTTP server of the proxy: short header and idle timeouts,
// so that a connection left silent gives its slot back.
func (p *Proxy) newServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: p.cfg.HeaderTimeout, IdleTimeout: p.cfg.IdleTimeout, ErrorLog: p.errLog}
}

// deny counts a denial in the metrics, logs it (rate-limited, see
// sampledLog) and returns it.
func (p *Proxy) deny(host, port, reason string) *DeniedError {
	p.metrics.denied.Inc()
	p.denials.log("egress denied", "host", logHost(host), "port", port, "reason", reason)
	return &DeniedError{Host: host, Port: port, Reason: reason}
}

func endpointOf(scheme, hostport string) (endpoint, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, "80"
		if scheme == "https" {
			port = "443"
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || host == "" {
		return endpoint{}, fmt.Errorf("alineo egress proxy: bad host %q", hostport)
	}
	return endpoint{scheme: scheme, host: normHost(strings.Trim(host, "[]")), port: n}, nil
}

// rewrite prepares the upstream request: to the checked endpoint, without
// proxy headers, with the credential of the one matching binding.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	ep, _ := pr.In.Context().Value(ctxKey{}).(endpoint)
	out := pr.Out
	out.URL.Scheme = ep.scheme
	out.URL.Host = net.JoinHostPort(ep.host, strconv.Itoa(ep.port))
	out.Host = pr.In.Host
	if out.Host == "" || ep.scheme == "https" {
		out.Host = out.URL.Host
	}
	out.Header.Del("Proxy-Authorization")
	out.Header.Del("Proxy-Connection")
	if p.cfg.CredentialProxy {
		name, n := p.vault.inject(out, ep.scheme, ep.host, ep.port)
		switch {
		case n == 1:
			p.log.Debug("egress credential injected", "binding", name, "host", logHost(ep.host), "method", out.Method)
		case n > 1:
			p.log.Warn("egress request matches several bindings; nothing injected", "host", logHost(ep.host), "bindings", n)
		}
	}
}

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	p.writeDialError(w, err)
}

func (p *Proxy) writeDialError(w http.ResponseWriter, err error) {
	var de *DeniedError
	if errors.As(err, &de) {
		http.Error(w, "alineo egress proxy: "+de.Error(), http.StatusForbidden)
		return
	}
	if errors.Is(err, context.Canceled) {
		return
	}
	http.Error(w, "alineo egress proxy: upstream: "+err.Error(), http.StatusBadGateway)
}

// checkEarly refuses a host the policy denies by name alone, before anything
// is resolved; dial checks again, with the addresses it dials.
func (p *Proxy) checkEarly(ctx context.Context, host string, port int) error {
	act, reason, needAddr := p.policy.CheckHost(host)
	if needAddr || act == Allow {
		return nil
	}
	return p.deny(host, strconv.Itoa(port), reason)
}

// allowedAddrs resolves host and returns the addresses the policy allows, in
// resolver order; a DeniedError if none. Dialing exactly these addresses keeps
// a DNS answer that changes after the check (rebinding) out.
func (p *Proxy) allowedAddrs(ctx context.Context, host, port string) ([]netip.Addr, error) {
	act, reason, needAddr := p.policy.CheckHost(host)
	if !needAddr && act == Deny {
		return nil, p.deny(host, port, reason)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a.Unmap()}
	} else {
		rctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
		addrs, err = p.cfg.Resolver.LookupNetIP(rctx, "ip", host)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
	}
	if !needAddr {
		return addrs, nil
	}
	var ok []netip.Addr
	for _, a := range addrs {
		act, r := p.policy.CheckAddr(host, a)
		if act == Allow {
			ok = append(ok, a.Unmap())
		} else if reason == "" {
			reason = r
		}
	}
	if len(ok) == 0 {
		if reason == "" {
			reason = "no address"
		}
		return nil, p.deny(host, port, reason)
	}
	return ok, nil
}

// dial connects to an allowed address of addr ("host:port").
func (p *Proxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	host = normHost(host)
	addrs, err := p.allowedAddrs(ctx, host, port)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		c, err := p.cfg.Dial(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		if de := (*DeniedError)(nil); errors.As(err, &de) {
			err = p.deny(de.Host, de.Port, de.Reason) // the dialer's own guard (sandboxd's)
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("dial %s: %w", addr, errors.Join(errs...))
}

func (p *Proxy) serveConnect(w http.ResponseWriter, r *http.Request) {
	ep, err := endpointOf("https", r.Host)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := p.checkEarly(r.Context(), ep.host, ep.port); err != nil {
		p.writeDialError(w, err)
		return
	}
	select {
	case p.sem <- struct{}{}:
	default:
		http.Error(w, "alineo egress proxy: too many connections", http.StatusServiceUnavailable)
		return
	}
	release := func() { <-p.sem }
	mitm := p.ca != nil && p.vault.wantsTLS(ep.host, ep.port)
	var upstream net.Conn
	if !mitm {
		upstream, err = p.dial(r.Context(), "tcp", net.JoinHostPort(ep.host, strconv.Itoa(ep.port)))
		if err != nil {
			release()
			p.writeDialError(w, err)
			return
		}
	}
	rc := http.NewResponseController(w)
	conn, brw, err := rc.Hijack()
	if err != nil {
		release()
		if upstream != nil {
			upstream.Close()
		}
		http.Error(w, "alineo egress proxy: cannot hijack", http.StatusInternalServerError)
		return
	}
	client := &bufferedConn{Conn: conn, r: brw.Reader}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		release()
		conn.Close()
		if upstream != nil {
			upstream.Close()
		}
		return
	}
	conn.SetDeadline(time.Time{})
	if mitm {
		p.terminate(client, ep, release)
		return
	}
	p.tunnel(client, upstream, release)
}

// tunnel copies bytes both ways until either side closes.
func (p *Proxy) tunnel(client, upstream net.Conn, release func()) {
	if !p.register(nil, client, upstream) {
		release()
		client.Close()
		upstream.Close()
		return
	}
	go func() {
		defer p.wg.Done()
		defer release()
		done := make(chan struct{})
		go func() {
			io.Copy(upstream, client)
			closeWrite(upstream)
			close(done)
		}()
		io.Copy(client, upstream)
		closeWrite(client)
		<-done
		client.Close()
		upstream.Close()
		p.unregister(nil, client, upstream)
	}()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// terminate serves HTTP over TLS on client with a leaf of the sandbox CA for
// the CONNECT host, forwarding each request upstream over TLS with credentials
// injected. The policy is checked again for every request.
func (p *Proxy) terminate(client net.Conn, ep endpoint, release func()) {
	tconn := tls.Server(client, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.ca.leaf(ep.host)
		},
	})
	l := newOneConnListener(tconn)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := p.checkEarly(r.Context(), ep.host, ep.port); err != nil {
			p.writeDialError(w, err)
			return
		}
		p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, ep)))
	})
	srv := p.newServer(h)
	if !p.register(srv) {
		release()
		client.Close()
		return
	}
	go func() {
		defer p.wg.Done()
		defer release()
		defer p.unregister(srv)
		srv.Serve(l)   // returns once the one connection is closed
		l.conn.Close() // in case Close came before Serve took it
	}()
}

// bufferedConn reads first what the hijacked reader already buffered.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// oneConnListener hands out one connection, then blocks Accept until that
// connection or the listener is closed, so http.Server.Serve returns with the
// connection, and http.Server.Close (which waits for Serve) does not hang.
type oneConnListener struct {
	conn      net.Conn
	done      chan struct{} // the connection was closed
	closed    chan struct{} // the listener was closed
	doneOnce  sync.Once
	closeOnce sync.Once
	// mu guards taken.
	mu    sync.Mutex
	taken bool
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{done: make(chan struct{}), closed: make(chan struct{})}
	l.conn = &notifyConn{Conn: c, closed: func() { l.doneOnce.Do(func() { close(l.done) }) }}
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.taken {
		l.taken = true
		l.mu.Unlock()
		return l.conn, nil
	}
	l.mu.Unlock()
	select {
	case <-l.done:
	case <-l.closed:
	}
	return nil, net.ErrClosed
}

// Close makes Accept return; the connection stays with the server, which
// closes it.
func (l *oneConnListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

type notifyConn struct {
	net.Conn
	closed func()
}

func (c *notifyConn) Close() error {
	err := c.Conn.Close()
	c.closed()
	return err
}
