package api

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
)

// Defaults of Config.
const (
	DefaultPageSize     = 100
	MaxPageSize         = 1000
	DefaultHeartbeat    = 15 * time.Second
	DefaultMaxStreams   = 1024
	DefaultStreamBuffer = 4096
	// TokenCookie is the cookie the dashboard carries the token in.
	TokenCookie  = "alineo_token"
	maxBodyBytes = jobs.MaxSpecBytes
)

// Store is what the API reads: the tables a projector keeps (an
// adapters.Store such as sqlite.Store or postgres.Store serves it). Listings,
// details and environments come from the read-model half; a session's
// events and checkpoints, and DELETE, from the ledger half of the same
// tables. Every method must be safe for concurrent use.
type Store interface {
	ListSandboxDetails(ctx context.Context, name string, opts adapters.ListOptions) ([]adapters.SandboxDetails, error)
	ListAllSandboxDetails(ctx context.Context, opts adapters.ListOptions) ([]adapters.SandboxDetails, error)
	GetSandboxDetails(ctx context.Context, name, sandboxID string) (*adapters.SandboxDetails, error)
	ListEnvironments(ctx context.Context) ([]adapters.EnvironmentRecord, error)
	ReadAll(ctx context.Context, name, sandboxID string) ([]events.Entry, error)
	ListCheckpoints(ctx context.Context, name, sandboxID string) ([]adapters.CheckpointInfo, error)
	DeleteSandbox(ctx context.Context, name, sandboxID string) error
}

// Config configures New. Store is required; the zero value of every other
// field is valid.
type Config struct {
	// Store is the read model the sandbox routes read (and DELETE deletes from).
	Store Store
	// Bus feeds /v1/events/stream; nil answers it with 503.
	Bus *bus.Bus
	// Queue serves /v1/jobs; nil answers those routes with 503.
	Queue *jobs.Queue
	// Token, when set, is one admin's token, the user AdminName (see the
	// package doc).
	Token string
	// Users are the named tokens with their roles (a token file, ParseTokens);
	// the caller may Replace them while the server runs (a reload). With
	// neither Token nor Users the API and the dashboard are open: every
	// request is AnonymousName's, an admin's.
	Users *Users
	// Registry receives the API's metrics and is served at /metrics. Default a
	// new registry.
	Registry *prometheus.Registry
	// Heartbeat is the period of SSE keep-alive comments. Default 15 s.
	Heartbeat time.Duration
	// MaxStreams bounds concurrent SSE streams; beyond it the answer is 503.
	// Default 1024.
	MaxStreams int
	// StreamBuffer bounds the events queued for one live stream of a shared
	// feed; a stream further behind is cut off and resumes with
	// Last-Event-ID. Default 4096.
	StreamBuffer int
	// Logger, default discard.
	Logger *slog.Logger
}

// Server is the API's http.Handler. Safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	streams chan struct{} // one slot per open SSE stream
	hub     hub
	m       *metrics
}

// New returns the API handler. It does no I/O.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: Store is required", ErrInvalidConfig)
	}
	if cfg.Heartbeat < 0 || cfg.MaxStreams < 0 {
		return nil, fmt.Errorf("%w: negative Heartbeat or MaxStreams", ErrInvalidConfig)
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.MaxStreams == 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.StreamBuffer <= 0 {
		cfg.StreamBuffer = DefaultStreamBuffer
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), streams: make(chan struct{}, cfg.MaxStreams)}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	s.m = m
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	api := func(pattern string, h http.HandlerFunc) {
		s.mux.Handle(pattern, s.instrument(pattern, s.requireRole(RoleRead, h)))
	}
	admin := func(pattern string, h http.HandlerFunc) {
		s.mux.Handle(pattern, s.instrument(pattern, s.requireRole(RoleAdmin, h)))
	}
	write := func(pattern string, h http.HandlerFunc) {
		s.mux.Handle(pattern, s.instrument(pattern, s.requireWrite(h)))
	}
	open := func(pattern string, h http.Handler) {
		s.mux.Handle(pattern, s.instrument(pattern, h))
	}
	open("GET /healthz", http.HandlerFunc(s.healthz))
	open("GET /metrics", promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{Registry: s.cfg.Registry}))
	open("GET /v1/openapi.json", http.HandlerFunc(s.openapi))

	api("GET /v1/sandboxes", s.listSandboxes)
	api("GET /v1/sandboxes/{name}/{id}", s.getSandbox)
	write("DELETE /v1/sandboxes/{name}/{id}", s.deleteSandbox)
	api("GET /v1/sandboxes/{name}/{id}/events", s.sandboxEvents)
	api("GET /v1/sandboxes/{name}/{id}/checkpoints", s.sandboxCheckpoints)
	api("GET /v1/sandboxes/{name}/{id}/execs/{step}/output", s.execOutput)
	api("GET /v1/environments", s.environments)
	write("POST /v1/jobs", s.submitJob)
	api("GET /v1/jobs", s.listJobs)
	api("GET /v1/jobs/{id}", s.getJob)
	write("POST /v1/jobs/{id}/cancel", s.cancelJob)
	write("POST /v1/jobs/{id}/retry", s.retryJob)
	admin("GET /v1/executors", s.listExecutors)
	api("GET /v1/events/stream", s.stream)
	// Anything else under /v1 is a JSON 404 (after auth, so it reveals nothing).
	api("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no route " + r.Method + " " + r.URL.Path})
	})

	open("GET /login", http.HandlerFunc(s.login))
	open("GET /{$}", s.requireTokenHTML(RoleRead, s.dashboardList))
	open("GET /ui/sandboxes/{name}/{id}", s.requireTokenHTML(RoleRead, s.dashboardSandbox))
	open("GET /ui/sandboxes/{name}/{id}/execs/{step}", s.requireTokenHTML(RoleRead, s.dashboardExec))
	open("GET /ui/runs/{run}", s.requireTokenHTML(RoleRead, s.dashboardRun))
	open("GET /ui/jobs", s.requireTokenHTML(RoleRead, s.dashboardJobs))
	open("GET /ui/jobs/{id}", s.requireTokenHTML(RoleRead, s.dashboardJob))
	open("GET /ui/executors", s.requireTokenHTML(RoleAdmin, s.dashboardExecutors))
	open("GET /ui/assets/", s.assets())
}

// ServeHTTP serves the API and the dashboard.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

//go:embed openapi.json
var openapiDoc []byte

func (s *Server) openapi(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapiDoc)
}

// open reports whether the server has no tokens at all: every request is
// AnonymousName's.
func (s *Server) open() bool { return s.cfg.Token == "" && s.cfg.Users == nil }

// user returns who r is made by, from the bearer header or, without one, the
// dashboard's cookie (cookieOK). ok is false when r carries no token the
// server knows.
func (s *Server) user(r *http.Request, cookieOK bool) (u User, ok bool) {
	if s.open() {
		return User{Name: AnonymousName, Role: RoleAdmin}, true
	}
	if r.Header.Get("Authorization") != "" {
		scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return User{}, false
		}
		return s.lookup(strings.TrimSpace(tok))
	}
	if c, err := r.Cookie(TokenCookie); err == nil && cookieOK {
		return s.lookup(c.Value)
	}
	return User{}, false
}

// lookup returns the user of tok: the admin of Config.Token, or one of
// Config.Users. Both are compared in constant time.
func (s *Server) lookup(tok string) (User, bool) {
	if tok == "" {
		return User{}, false
	}
	if s.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1 {
		return User{Name: AdminName, Role: RoleAdmin}, true
	}
	return s.cfg.Users.Lookup(tok)
}

// unauthorized answers a request without a known token: 401.
func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="alineo"`)
	writeError(w, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: msg})
}

// forbidden answers a known user whose role is below role: 403.
func forbidden(w http.ResponseWriter, u User, role Role) {
	writeError(w, &Error{Status: http.StatusForbidden, Code: CodeForbidden,
		Message: fmt.Sprintf("user %q has the role %s; this needs %s", u.Name, u.Role, role)})
}

// requireRole guards a read route: 401 without a known token (bearer header
// or cookie), 403 for a user below role.
func (s *Server) requireRole(role Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u, ok := s.user(r, true)
		if !ok {
			unauthorized(w, "missing or wrong bearer token (Authorization: Bearer <token>)")
			return
		}
		if !u.Can(role) {
			forbidden(w, u, role)
			return
		}
		h(w, r.WithContext(withUser(r.Context(), u)))
	}
}

// requireWrite guards the routes that change something (POST, DELETE)
// against cross-site requests: a page of another origin (a sandbox's page
// served through sandboxd's proxy on another port of 127.0.0.1 is one, yet
// SameSite treats it as the same site) can make the browser send the cookie
// with a form, but neither an Authorization header nor a JSON body without
// a CORS preflight, which the API never grants. So: an Origin header, when
// sent, must be this server's (403); with a Token, the bearer header is
// required, the cookie authorizes reads only (401); the user must have the
// write role (403); a body must be application/json (415).
func (s *Server) requireWrite(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !sameOrigin(r, o) {
			writeError(w, &Error{Status: http.StatusForbidden, Code: CodeForbidden,
				Message: "cross-origin write refused (Origin " + o + ")"})
			return
		}
		u, ok := s.user(r, false)
		if !ok {
			unauthorized(w, "writes need a bearer token (Authorization: Bearer <token>); the cookie authorizes reads only")
			return
		}
		if !u.Can(RoleWrite) {
			forbidden(w, u, RoleWrite)
			return
		}
		if r.Method == http.MethodPost || r.ContentLength > 0 {
			mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if err != nil || mt != "application/json" {
				writeError(w, &Error{Status: http.StatusUnsupportedMediaType, Code: CodeUnsupportedMedia,
					Message: "the body must be Content-Type: application/json, got " + strconv.Quote(r.Header.Get("Content-Type"))})
				return
			}
		}
		h(w, r.WithContext(withUser(r.Context(), u)))
	}
}

// sameOrigin reports whether origin is the origin r was sent to.
func sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false // "null" (sandboxed frames, file:) included
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return strings.EqualFold(u.Scheme, scheme) && strings.EqualFold(u.Host, r.Host)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, e *Error) {
	writeJSON(w, e.Status, e)
}

func badRequest(field, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Field: field, Message: msg}
}

func notFound(msg string) *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: msg}
}

// storeError maps a store or bus failure to 503 (unavailable) or 500.
func (s *Server) storeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, adapters.ErrUnavailable) || errors.Is(err, adapters.ErrClosed) {
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: err.Error()})
		return
	}
	s.log.Error("api: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: err.Error()})
}

// intParam parses an optional non-negative integer query parameter.
func intParam(r *http.Request, name string, def, max int64) (int64, *Error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest(name, fmt.Sprintf("%s must be a non-negative integer, got %q", name, v))
	}
	if max > 0 && n > max {
		return 0, badRequest(name, fmt.Sprintf("%s must be at most %d, got %d", name, max, n))
	}
	return n, nil
}
