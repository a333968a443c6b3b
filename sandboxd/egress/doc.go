// Package egress is the per-sandbox egress proxy and credential vault of
// sandboxd: the server half of OpenSandbox's egress sidecar (API-NOTES §8).
//
// A Proxy, one per sandbox, is:
//
//   - an HTTP forward proxy (Serve): absolute-URI requests and CONNECT tunnels,
//     allowed or refused (403 with a plain-text reason) by the Policy. Rules
//     match an exact FQDN, "*.domain" (sub-domains only), an IP or a CIDR,
//     case-insensitively; the first matching rule wins, then DefaultAction
//     (empty: deny). IP and CIDR rules are checked against the resolved
//     addresses, and the proxy dials exactly an address it checked, so a DNS
//     answer that changes between check and dial cannot slip through. Policy
//     changes apply at once to every new request and connection;
//   - with Config.CredentialProxy, a credential vault whose bindings add a
//     header (bearer, basic, apiKey, custom headers) to outbound requests that
//     match exactly one binding. For HTTPS the proxy terminates TLS of CONNECT
//     tunnels to hosts that have a binding with a leaf certificate signed by a
//     per-sandbox ECDSA CA held only in memory (CACertPEM; install it in the
//     sandbox's trust store with InstallCA) and forwards over TLS
//     (Config.UpstreamTLS). Other tunnels are passed through untouched;
//   - the egress API (Handler), served on the sandbox's port 18080: GET,
//     PATCH, DELETE, POST and PUT /policy, GET /healthz and the
//     /credential-vault routes, guarded by the OPENSANDBOX-EGRESS-AUTH token,
//     with text/plain errors (400, 401, 404, 409, 412, 413, 426).
//
// Credential values are write-only: no API response, log line, error or JSON
// encoding of this package contains one. Vault.Secrets and Vault.Redactor
// hand them to the caller for redaction (package redact) only.
//
// The proxy does not confine the sandbox by itself: the runtime must give the
// sandbox a network namespace whose only way out is this proxy. Requests to
// the host's own addresses (loopback included) are subject to the policy like
// any other; a deny-by-default policy keeps them out.
//
// A sandbox cannot make the proxy hold more than Config.MaxClientConns of its
// connections (idle ones included; the rest are closed as soon as accepted),
// nor flood the server's log: denials and refused connections are logged
// through a token bucket per sandbox, with host names cut to 253 bytes, and
// counted, every one, in Metrics.
//
// Of this module it imports redact only (and the standard library and the
// Prometheus client, for Metrics); it must not import sandboxd, the SDK, the
// ledger, the bus or testenv (tests may use testenv).
package egress
