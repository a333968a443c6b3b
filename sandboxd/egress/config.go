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
	// credential values). Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxRules <= 0 {
		c.MaxRules = DefaultMaxRules
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
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
	return c
}
