package execd

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"
)

// handleProxy forwards /proxy/{port}/{rest} to http://127.0.0.1:{port}/{rest} inside the
// sandbox's network namespace (WebSocket upgrades included), like the real execd. The access
// token was checked by ServeHTTP and is not forwarded.
func (s *Server) handleProxy(w http.ResponseWriter, r *http.Request) error {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return badRequest(CodeInvalidRequestBody, "invalid port %q", r.PathValue("port"))
	}
	target := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port)}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = "/" + r.PathValue("rest")
			pr.Out.URL.RawPath = ""
			pr.Out.Header.Del(TokenHeader)
			pr.SetXForwarded()
		},
		FlushInterval: 200 * time.Millisecond,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.Debug("execd proxy", "port", port, "err", err)
			http.Error(w, "Bad Gateway", http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
	return nil
}
