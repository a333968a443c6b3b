package egress

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"time"
)

// Defaults for Config.
const (
	DefaultMaxRules        = 1000
	DefaultMaxConns        = 512
	DefaultMaxClientConns  = 512
	DefaultHeaderTimeout   = 10 * time.Second
	DefaultIdleTimeout     = 60 * time.Second
	DefaultMaxBodyBytes    = 1 << 20
	DefaultDialTimeout     = 10 * time.Second
	DefaultEnforcementMode = "proxy"
)

// AuthHeader carries the egress API token (OpenSandbox's name).
const AuthHeader = "OPENSANDBOX-EGRESS-AUTH"

// Port is the egress API port of a sandbox in OpenSandbox.
const Port = 18080

// Resolver resolves host names; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Proxy. The zero value is valid: a deny-all proxy with no
// API token and no credential proxy.
type Config struct {
	// Name identifies the sandbox in logs and in the CA's subject.
	Name string
	// Token, when set, is required in the OPENSANDBOX-EGRESS-AUTH header of every
	// API request but /healthz. The credential vault needs it.
	Token string
	// Policy is the initial policy; nil means deny-all.
	Policy *Policy
	// CredentialProxy enables the credential vault and TLS termination with a
	// per-sandbox CA for hosts that have a binding. Needs Token.
	CredentialProxy bool
	// MaxRules caps the policy (API status 413 above). Default DefaultMaxRules.
	MaxRules int
	// MaxConns caps concurrent CONNECT tunnels (503 above). Default DefaultMaxConns.
	MaxConns int
	// MaxClientConns caps the connections from the sandbox to the proxy open
	// at once, idle ones and tunnels included: past it, a new connection is
	// closed as soon as it is accepted, before the HTTP server sees it, and
	// counted in Metrics. Each open connection costs the server a goroutine
	// and its buffers (about 10 KB), which no cgroup of the sandbox charges.
	// Default DefaultMaxClientConns.
	MaxClientConns int
	// HeaderTimeout bounds the reading of a request's headers; on a new
	// connection it counts from the accept, so a connection that sends
	// nothing is closed after it. Default DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that sends no new request
	// for this long. Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxBodyBytes caps API request bodies (413 above). Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// DialTimeout bounds each upstream dial. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// EnforcementMode is reported by the policy API. Default "proxy".
	EnforcementMode string
	// UpstreamTLS configures TLS to upstream servers when the proxy terminates
	// TLS (RootCAs: nil means the host's roots). Cloned; ServerName is set per host.
	UpstreamTLS *tls.Config
	// Resolver resolves host names. Default net.DefaultResolver.
	Resolver Resolver
	// Dial connects to an upstream address "ip:port" the policy allowed.
	// Default a net.Dialer with DialTimeout.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Logger receives the proxy's logs (hosts, rules, binding names; never
	// credential values). Host names longer than a DNS name (253 bytes) are
	// cut; denials and refused connections are logged at most 10 at once,
	// then one a second, with a line saying how many more there were.
	// Default: discard.
	Logger *slog.Logger
	// Metrics counts every denial and refused connection, per sandbox (Name).
	// Default: metrics of this proxy's own, which nothing exports.
	Metrics *Metrics
}

func (c Config) withDefaults() Config {
	if c.MaxRules <= 0 {
		c.MaxRules = DefaultMaxRules
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxClientConns <= 0 {
		c.MaxClientConns = DefaultMaxClientConns
	}
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = DefaultHeaderTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.EnforcementMode == "" {
		c.EnforcementMode = DefaultEnforcementMode
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.Dial == nil {
		d := &net.Dialer{Timeout: c.DialTimeout}
		c.Dial = d.DialContext
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	return c
}
