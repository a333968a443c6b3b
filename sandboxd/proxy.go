package sandboxd

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"

	"github.com/alineo-labs/alineo/sandboxd/egress"
	"github.com/alineo-labs/alineo/sandboxd/internal/runtime"
)

// maxBufferedBody is the largest request body the proxy reads whole before
// forwarding it.
const maxBufferedBody = 1 << 20

// strippedHeaders are headers the proxy never forwards to a sandbox, besides the standard
// hop-by-hop ones httputil.ReverseProxy drops.
var strippedHeaders = []string{"Authorization", "Cookie", APIKeyHeader}

// sandboxPort returns the sandbox named id and the port of a /sandboxes/{id}/…/{port} route: an
// unknown sandbox is the error of get, a port outside 1..65535 an INVALID_REQUEST.
func (s *Server) sandboxPort(id, portText string) (*sandbox, int, error) {
	sb, err := s.get(id)
	if err != nil {
		return nil, 0, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return nil, 0, invalid("INVALID_REQUEST", "port", "port must be an integer in 1..65535, got %q", portText)
	}
	return sb, port, nil
}

// handleProxy forwards /sandboxes/{id}/proxy/{port}/{rest...} to the sandbox:
// port 44772 to its execd, port 18080 of a sandbox with a network policy to
// its egress API, any other port to 127.0.0.1:port (in the sandbox's network
// namespace, or the host's for a sandbox that shares it) if a process of the
// sandbox listens there. HTTP and WebSocket; responses are flushed at once, so
// command streams arrive event by event. The caller must send the execd token
// itself: the proxy adds no credentials.
func (a *api) handleProxy(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb, port, err := a.s.sandboxPort(id, r.PathValue("port"))
	if err != nil {
		a.writeErr(w, err)
		return
	}
	sb.mu.Lock()
	st, execdPort, p := sb.rec.Status.State, sb.rec.ExecdPort, sb.proc
	sb.mu.Unlock()
	if st != StateRunning || p == nil {
		a.writeErr(w, &StateError{SandboxID: id, Op: "proxy", State: st})
		return
	}
	if h := p.EgressHandler(); port == egress.Port && h != nil {
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = "/"+r.PathValue("rest"), ""
		h.ServeHTTP(w, r2)
		return
	}
	target := port
	if port == ExecdPort {
		target = execdPort
	} else if !p.ListensOn(port) {
		writeError(w, http.StatusBadGateway, "BAD_GATEWAY", fmt.Sprintf("no process of sandbox %s listens on port %d", id, port))
		return
	}
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength >= 0 && r.ContentLength <= maxBufferedBody {
		// Read a small body whole before forwarding it. Forwarded as is, an
		// upstream that answers before it read its body to the end (execd
		// decodes one JSON object and starts streaming) makes the transport
		// close this request's body unread, and now and then the connection's
		// context is cancelled mid-stream: about one in 40 command streams
		// with pauses was cut short. Larger and chunked bodies stream.
		b, err := io.ReadAll(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "read request body: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	u := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(target)}
	rest := "/" + r.PathValue("rest")
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.URL.Path = rest
			pr.Out.URL.RawPath = ""
			pr.Out.URL.RawQuery = r.URL.RawQuery
			pr.SetXForwarded()
			for _, h := range strippedHeaders {
				pr.Out.Header.Del(h)
			}
		},
		FlushInterval: -1,
		Transport:     transport(p, port),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, http.StatusBadGateway, "BAD_GATEWAY", "sandbox "+id+" port "+strconv.Itoa(port)+": "+err.Error())
		},
	}
	rp.ServeHTTP(w, r)
}

// transport reaches port of the sandbox: the default transport for execd and
// for a sandbox on the host network, else one that dials in the sandbox's
// network namespace (Process.Transport).
func transport(p *runtime.Process, port int) http.RoundTripper {
	if port == ExecdPort {
		return nil
	}
	return p.Transport()
}
