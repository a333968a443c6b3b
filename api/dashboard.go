package api

import (
	"embed"
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

//go:embed templates/*.html
var templateFS embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"ms": func(ms int64) string {
		if ms == 0 {
			return "—"
		}
		return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000")
	},
	"sandboxURL": func(name, id string) string {
		return "/ui/sandboxes/" + url.PathEscape(name) + "/" + url.PathEscape(id)
	},
	"summary": summary,
}).ParseFS(templateFS, "templates/*.html"))

// summary renders an entry's payload in one short line for the timeline.
func summary(e events.Entry) string {
	var s string
	switch e.Event.Canonical() { // either vocabulary
	case events.ExecStarted:
		var p events.ExecStartedPayload
		if e.Decode(&p) == nil {
			s = p.Text()
		}
	case events.ExecOutput:
		var p events.ExecOutputPayload
		if e.Decode(&p) == nil {
			s = string(p.Type) + ": " + p.Text
		}
	case events.ExecCompleted:
		var p events.ExecCompletedPayload
		if e.Decode(&p) == nil {
			b, _ := json.Marshal(p)
			s = string(b)
		}
	default:
		s = string(e.Payload)
	}
	if e.Error != "" {
		s += " error: " + e.Error
	}
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}

type listPage struct {
	Status    string
	Sandboxes []adapters.SandboxDetails
	Error     string
}

type sandboxPage struct {
	Details     *adapters.SandboxDetails
	Events      []events.Entry
	Checkpoints []adapters.CheckpointInfo
	LastSeq     uint64
}

func (s *Server) render(w http.ResponseWriter, status int, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'")
	w.WriteHeader(status)
	if err := pages.ExecuteTemplate(w, name, data); err != nil {
		s.log.Error("api: render dashboard", "page", name, "err", err)
	}
}

// requireTokenHTML guards a dashboard page: without the token it shows the
// login form (401).
func (s *Server) requireTokenHTML(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			s.render(w, http.StatusUnauthorized, "login.html", map[string]string{"Error": ""})
			return
		}
		h(w, r)
	})
}

// login checks ?token= and sets the dashboard cookie.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	tok := r.URL.Query().Get("token")
	if s.cfg.Token != "" && !s.tokenOK(tok) {
		msg := ""
		if tok != "" {
			msg = "wrong token"
		}
		s.render(w, http.StatusUnauthorized, "login.html", map[string]string{"Error": msg})
		return
	}
	if s.cfg.Token != "" {
		http.SetCookie(w, &http.Cookie{
			Name: TokenCookie, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
			Secure: r.TLS != nil, MaxAge: int((30 * 24 * time.Hour).Seconds()),
		})
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) dashboardList(w http.ResponseWriter, r *http.Request) {
	st := adapters.SandboxStatus(r.URL.Query().Get("status"))
	if st != adapters.StatusRunning && st != adapters.StatusCompleted {
		st = ""
	}
	p := listPage{Status: string(st)}
	ds, err := s.cfg.Store.ListAllSandboxDetails(r.Context(), adapters.ListOptions{Status: st, Limit: 200})
	if err != nil {
		p.Error = err.Error()
	}
	p.Sandboxes = ds
	s.render(w, http.StatusOK, "list.html", p)
}

func (s *Server) dashboardSandbox(w http.ResponseWriter, r *http.Request) {
	name, id := r.PathValue("name"), r.PathValue("id")
	d, err := s.cfg.Store.GetSandboxDetails(r.Context(), name, id)
	if err != nil {
		s.render(w, http.StatusServiceUnavailable, "error.html", map[string]string{"Error": err.Error()})
		return
	}
	if d == nil {
		s.render(w, http.StatusNotFound, "error.html", map[string]string{"Error": "no sandbox " + id + " named " + name})
		return
	}
	es, err := s.cfg.Store.ReadAll(r.Context(), name, id)
	if err != nil {
		s.render(w, http.StatusServiceUnavailable, "error.html", map[string]string{"Error": err.Error()})
		return
	}
	cps, _ := s.cfg.Store.ListCheckpoints(r.Context(), name, id)
	p := sandboxPage{Details: d, Events: es, Checkpoints: cps}
	for _, e := range es {
		p.LastSeq = max(p.LastSeq, e.Seq)
	}
	s.render(w, http.StatusOK, "sandbox.html", p)
}
