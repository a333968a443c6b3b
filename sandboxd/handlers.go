package sandboxd

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/egress"
)

const (
	maxBody    = 1 << 20
	drainLimit = 64 << 20 // bytes of an oversized body read before the 413
)

// api serves the lifecycle API of the OpenSandbox protocol over a Server:
// each handler decodes a request, asks the server and writes the answer.
type api struct{ s *Server }

// routes builds the lifecycle API, mounted under /v1 and at the root.
func (s *Server) routes() http.Handler {
	a := &api{s: s}
	mux := http.NewServeMux()
	for _, p := range []string{"", "/v1"} {
		mux.HandleFunc("GET "+p+"/health", a.handleHealth)
		mux.HandleFunc("POST "+p+"/sandboxes", a.handleCreate)
		mux.HandleFunc("GET "+p+"/sandboxes", a.handleList)
		mux.HandleFunc("GET "+p+"/sandboxes/{id}", a.handleGet)
		mux.HandleFunc("DELETE "+p+"/sandboxes/{id}", a.handleDelete)
		mux.HandleFunc("PATCH "+p+"/sandboxes/{id}/metadata", a.handlePatchMetadata)
		mux.HandleFunc("POST "+p+"/sandboxes/{id}/pause", a.handlePause)
		mux.HandleFunc("POST "+p+"/sandboxes/{id}/resume", a.handleResume)
		mux.HandleFunc("POST "+p+"/sandboxes/{id}/renew-expiration", a.handleRenew)
		mux.HandleFunc("GET "+p+"/sandboxes/{id}/endpoints/{port}", a.handleEndpoint)
		mux.HandleFunc(p+"/sandboxes/{id}/proxy/{port}", a.handleProxy)
		mux.HandleFunc(p+"/sandboxes/{id}/proxy/{port}/{rest...}", a.handleProxy)
		mux.HandleFunc("GET "+p+"/sandboxes/{id}/diagnostics/{kind}", a.handleDiagnostics)
		a.snapshotRoutes(mux, p)
	}
	return a.middleware(mux)
}

var proxyPath = regexp.MustCompile(`^(/v1)?/sandboxes/[^/]+/proxy/\d+(/|$)`)

// middleware echoes or assigns X-Request-ID, checks the API key and turns the
// mux's plain-text 404/405 into JSON errors.
func (a *api) middleware(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rid := r.Header.Get("X-Request-ID")
		if rid == "" {
			rid = newID()
		}
		w.Header().Set("X-Request-ID", rid)
		path := r.URL.Path
		isProxy := proxyPath.MatchString(path) && !strings.Contains(path, "..")
		if a.s.cfg.APIKey != "" && !isProxy && path != "/health" && path != "/v1/health" {
			key := r.Header.Get(APIKeyHeader)
			switch {
			case key == "":
				writeError(w, http.StatusUnauthorized, "MISSING_API_KEY", "missing header "+APIKeyHeader)
				return
			case subtle.ConstantTimeCompare([]byte(key), []byte(a.s.cfg.APIKey)) != 1:
				writeError(w, http.StatusUnauthorized, "INVALID_API_KEY", "invalid "+APIKeyHeader)
				return
			}
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			// Find out whether the path exists with another method.
			status, code := http.StatusNotFound, "NOT_FOUND"
			for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodPatch} {
				r2 := r.Clone(r.Context())
				r2.Method = m
				if _, p := mux.Handler(r2); p != "" {
					status, code = http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED"
					break
				}
			}
			writeError(w, status, code, fmt.Sprintf("no route for %s %s", r.Method, path))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, errorBody{Code: code, Message: msg})
}

// writeErr maps an error to its status and {code,message} body, the
// message without the server's own paths (public).
func (a *api) writeErr(w http.ResponseWriter, err error) {
	writeError := func(w http.ResponseWriter, status int, code, msg string) {
		writeError(w, status, code, a.s.public(msg))
	}
	var re *RequestError
	var oe *OpError
	var ie *ImageError
	switch {
	case errors.As(err, &ie):
		writeError(w, ie.status(), ie.Reason, ie.Message)
	case errors.As(err, &re):
		status := http.StatusBadRequest
		if re.Status != 0 {
			status = re.Status
		}
		writeError(w, status, re.Code, re.Error())
	case errors.As(err, &oe):
		writeError(w, http.StatusInternalServerError, "SANDBOX_"+strings.ToUpper(oe.Op)+"_FAILED", err.Error())
	case errors.Is(err, ErrSnapshotNotFound):
		writeError(w, http.StatusNotFound, "SNAPSHOT_NOT_FOUND", err.Error())
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", err.Error())
	case errors.Is(err, ErrConflict):
		writeError(w, http.StatusConflict, "INVALID_STATE", err.Error())
	case errors.Is(err, ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", err.Error())
	default:
		a.s.log.Error("sandboxd: request failed", "err", err)
		writeError(w, http.StatusInternalServerError, "GENERAL::UNKNOWN_ERROR", err.Error())
	}
}

// decode reads a JSON body into v; a malformed body is a RequestError.
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return invalid("INVALID_REQUEST", "", "read body: %v", err)
	}
	if len(b) > maxBody {
		// Read (and drop) the rest, bounded, so that the client reads this
		// answer rather than a connection reset.
		_, _ = io.CopyN(io.Discard, r.Body, drainLimit)
		e := invalid("REQUEST_TOO_LARGE", "body", "larger than %d bytes", maxBody)
		e.Status = http.StatusRequestEntityTooLarge
		return e
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return invalid("INVALID_REQUEST", "", "empty body; a JSON object is required")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return invalid("INVALID_REQUEST", "", "malformed JSON body: %v", err)
	}
	return nil
}

func (a *api) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "healthy"})
}

func (a *api) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req CreateRequest
	if err := decode(r, &req); err != nil {
		a.writeErr(w, err)
		return
	}
	_, h, err := a.s.create(&req)
	if err != nil {
		a.writeErr(w, err)
		return
	}
	// As the real server, answer once the sandbox runs (or failed to start):
	// clients ask for its endpoint at once.
	sb := a.s.awaitStart(r.Context(), h)
	if ie := imageFailure(sb); ie != nil {
		// The image could not be had: the create did not happen, as on
		// a server that pulls before it creates anything.
		if err := a.s.remove(sb.ID); err != nil && !errors.Is(err, ErrNotFound) {
			a.s.log.Warn("sandboxd: forget a sandbox whose image could not be had", "id", sb.ID, "err", err)
		}
		a.writeErr(w, ie)
		return
	}
	w.Header().Set("Location", strings.TrimSuffix(r.URL.Path, "/")+"/"+sb.ID)
	writeJSON(w, http.StatusAccepted, createResponse{
		ID: sb.ID, Platform: sb.Platform, Status: sb.Status, Metadata: sb.Metadata,
		Entrypoint: sb.Entrypoint, ExpiresAt: sb.ExpiresAt, CreatedAt: sb.CreatedAt,
	})
}

func positiveInt(q string, def int, name string) (int, error) {
	if q == "" {
		return def, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 {
		return 0, invalid("INVALID_REQUEST", name, "%s must be an integer >= 1, got %q", name, q)
	}
	return n, nil
}

func (a *api) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, size, err := pageQuery(q)
	if err != nil {
		a.writeErr(w, err)
		return
	}
	meta, err := parseMetadataFilter(q.Get("metadata"))
	if err != nil {
		a.writeErr(w, err)
		return
	}
	items, pg := paginate(a.s.list(stateQuery[State](q), meta), page, size)
	writeJSON(w, http.StatusOK, listResponse{Items: items, Pagination: pg})
}

// pageQuery reads the page (default 1) and pageSize (default 20, at most 200) parameters
// of a list request.
func pageQuery(q url.Values) (page, size int, err error) {
	if page, err = positiveInt(q.Get("page"), 1, "page"); err != nil {
		return 0, 0, err
	}
	if size, err = positiveInt(q.Get("pageSize"), 20, "pageSize"); err != nil {
		return 0, 0, err
	}
	return page, min(size, 200), nil
}

// stateQuery reads the state filter of a list request: every state parameter, each a
// comma-separated list. An empty set means every state.
func stateQuery[S ~string](q url.Values) map[S]bool {
	states := map[S]bool{}
	for _, v := range q["state"] {
		for _, st := range strings.Split(v, ",") {
			if st = strings.TrimSpace(st); st != "" {
				states[S(st)] = true
			}
		}
	}
	return states
}

// paginate returns page (from 1) of all, never nil, and its pagination.
func paginate[T any](all []T, page, size int) ([]T, Pagination) {
	total := len(all)
	pages := (total + size - 1) / size
	lo := min((page-1)*size, total)
	hi := min(lo+size, total)
	items := all[lo:hi]
	if items == nil {
		items = []T{}
	}
	return items, Pagination{Page: page, PageSize: size, TotalItems: total, TotalPages: pages, HasNextPage: page < pages}
}

func (a *api) handleGet(w http.ResponseWriter, r *http.Request) {
	sb, err := a.s.get(r.PathValue("id"))
	if err != nil {
		a.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sb.snapshot())
}

func (a *api) handleDelete(w http.ResponseWriter, r *http.Request) {
	if err := a.s.remove(r.PathValue("id")); err != nil {
		a.writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) handlePatchMetadata(w http.ResponseWriter, r *http.Request) {
	var patch map[string]*string
	if err := decode(r, &patch); err != nil {
		a.writeErr(w, invalid("INVALID_METADATA_FORMAT", "metadata", "the body must be a JSON object of string or null values: %v", err))
		return
	}
	if patch == nil {
		a.writeErr(w, invalid("INVALID_METADATA_FORMAT", "metadata", "the body must be a JSON object"))
		return
	}
	sb, err := a.s.patchMetadata(r.PathValue("id"), patch)
	if err != nil {
		a.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sb)
}

// handlePause and handleResume answer once the transition is done: 202 with
// no body (OpenSandbox's answer), or, for a client that prefers it (Prefer:
// return=representation, RFC 7240), 200 with the sandbox in its new state, so
// that it need not ask for it.
func (a *api) handlePause(w http.ResponseWriter, r *http.Request) {
	a.answerTransition(w, r, a.s.pause(r.Context(), r.PathValue("id")))
}

func (a *api) handleResume(w http.ResponseWriter, r *http.Request) {
	a.answerTransition(w, r, a.s.resume(r.Context(), r.PathValue("id")))
}

func (a *api) answerTransition(w http.ResponseWriter, r *http.Request, err error) {
	if err != nil {
		a.writeErr(w, err)
		return
	}
	if prefersRepresentation(r) {
		if sb, err := a.s.get(r.PathValue("id")); err == nil {
			w.Header().Set("Preference-Applied", "return=representation")
			writeJSON(w, http.StatusOK, sb.snapshot())
			return
		}
	}
	w.WriteHeader(http.StatusAccepted)
}

func (a *api) handleRenew(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := a.s.get(id); err != nil {
		a.writeErr(w, err)
		return
	}
	var req renewRequest
	if err := decode(r, &req); err != nil {
		a.writeErr(w, err)
		return
	}
	if req.ExpiresAt == nil {
		a.writeErr(w, invalid("INVALID_EXPIRATION", "expiresAt", "expiresAt is required"))
		return
	}
	at, err := time.Parse(time.RFC3339Nano, *req.ExpiresAt)
	if err != nil {
		a.writeErr(w, invalid("INVALID_EXPIRATION", "expiresAt", "expiresAt must be an RFC 3339 time: %v", err))
		return
	}
	got, err := a.s.renew(id, at)
	if err != nil {
		a.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, renewResponse{ExpiresAt: got})
}

func (a *api) handleEndpoint(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb, port, err := a.s.sandboxPort(id, r.PathValue("port"))
	if err != nil {
		a.writeErr(w, err)
		return
	}
	q := r.URL.Query()
	if q.Get("expires") != "" {
		a.writeErr(w, invalid("INVALID_REQUEST", "expires", "signed endpoints (expires) are not supported by this server"))
		return
	}
	useProxy := false
	if v := q.Get("use_server_proxy"); v != "" {
		useProxy, err = strconv.ParseBool(v)
		if err != nil {
			a.writeErr(w, invalid("INVALID_REQUEST", "use_server_proxy", "use_server_proxy must be a boolean, got %q", v))
			return
		}
	}
	// A Pending sandbox (created by a client that did not wait for the
	// answer) gets its endpoint once it runs, bounded by StartTimeout.
	a.s.awaitStart(r.Context(), sb)
	sb.mu.Lock()
	st, execdPort, token := sb.rec.Status.State, sb.rec.ExecdPort, sb.rec.ExecdToken
	hasEgress, egressPort, egressToken := sb.rec.Egress, sb.rec.EgressAPIPort, sb.rec.EgressToken
	sb.mu.Unlock()
	if st.Final() || st == StateStopping {
		a.writeErr(w, &StateError{SandboxID: id, Op: "endpoint", State: st})
		return
	}
	ep := Endpoint{}
	switch {
	case port == ExecdPort && !useProxy:
		if execdPort == 0 {
			a.writeErr(w, &StateError{SandboxID: id, Op: "endpoint", State: st})
			return
		}
		// As OpenSandbox's Docker runtime answers it: the host port of
		// execd, and execd's proxy to its own port (which execd serves
		// itself), so that the URL names the port asked for.
		ep.Endpoint = "127.0.0.1:" + strconv.Itoa(execdPort) + "/proxy/" + strconv.Itoa(ExecdPort)
	case port == egress.Port && hasEgress && !useProxy:
		if egressPort == 0 {
			a.writeErr(w, &StateError{SandboxID: id, Op: "endpoint", State: st})
			return
		}
		ep.Endpoint = "127.0.0.1:" + strconv.Itoa(egressPort)
	default:
		ep.Endpoint = r.Host + "/sandboxes/" + id + "/proxy/" + strconv.Itoa(port)
	}
	switch {
	case port == ExecdPort:
		ep.Headers = map[string]string{ExecdTokenHeader: token}
	case port == egress.Port && hasEgress:
		ep.Headers = map[string]string{egress.AuthHeader: egressToken}
	}
	writeJSON(w, http.StatusOK, ep)
}
