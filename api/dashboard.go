package api

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/api/wire"
	"github.com/alineo-labs/alineo/audit"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"ms": func(ms int64) string {
		if ms == 0 {
			return "—"
		}
		return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000")
	},
	"sandboxURL": sandboxURL,
	"execURL": func(name, id string, x *execView) string {
		return sandboxURL(name, id) + "/execs/" + x.Step()
	},
	"outputURL": func(name, id string, x *execView, stream string) string {
		return "/v1/sandboxes/" + url.PathEscape(name) + "/" + url.PathEscape(id) + "/execs/" + x.Step() + "/output?stream=" + stream
	},
	"runURL": func(run string) string { return "/ui/runs/" + url.PathEscape(run) },
	"jobURL": func(id string) string { return "/ui/jobs/" + url.PathEscape(id) },
	"retryable": func(st jobs.Status) bool {
		return (st.State == jobs.StateFailed || st.State == jobs.StateCanceled) && st.RetriedAs == ""
	},
	"summary": summary,
	"card":    cardOutput,
	"list":    func(xs ...string) []string { return xs },
	"term":    termHTML,
	"add":     func(a, b int) int { return a + b },
	"page":    func(b []byte) textPage { return pageOf(b, execPageBytes) },
	"stream":  func(x *execView, s string) []byte { return x.Stream(events.Stream(s)) },
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12] + "…"
		}
		return s
	},
	"json": func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	},
}).ParseFS(templateFS, "templates/*.html"))

// termHTML escapes recorded text for a <pre>, byte for byte: the HTML
// parser would turn CR and CR LF into LF, so CR goes as a character
// reference, which it keeps.
func termHTML(s string) template.HTML {
	return template.HTML(strings.ReplaceAll(html.EscapeString(s), "\r", "&#13;"))
}

func sandboxURL(name, id string) string {
	return "/ui/sandboxes/" + url.PathEscape(name) + "/" + url.PathEscape(id)
}

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

// page is what every dashboard template gets: the page's title and nav
// entry, and its data.
type page struct {
	Title string
	Nav   string // "sandboxes" or "jobs"
	Data  any
	// User is who is signed in (set by render); the zero User on the
	// sign-in page.
	User User
}

// CanWrite reports whether the signed-in user may submit, cancel and retry
// jobs: the pages show the write controls only then.
func (p page) CanWrite() bool { return p.User.Can(RoleWrite) }

// CanAdmin reports whether the signed-in user may see the executors.
func (p page) CanAdmin() bool { return p.User.Can(RoleAdmin) }

type errorPage struct {
	Status  int
	Title   string
	Message string
	Back    string
}

type sandboxPage struct {
	Details     *adapters.SandboxDetails
	View        sessionView
	Events      []events.Entry // the first maxRawEvents
	MoreEvents  int            // entries left out of Events
	Checkpoints []adapters.CheckpointInfo
	Rel         relation
	Parent      *adapters.SandboxDetails // the session Rel names, when it is known
	// Chain is the session's hash chain state at page load (audit.Check).
	Chain audit.Session
}

type execPage struct {
	Details *adapters.SandboxDetails
	Exec    *execView
	LastSeq uint64
	// Closed is the session's sandbox.closed, when it has one: why an
	// interrupted exec was.
	Closed *events.SandboxClosedPayload
}

type jobsPage struct {
	Jobs []jobs.Status
}

type executorsPage struct {
	ExecutorList
	Live, Running int
}

type jobPage struct {
	Job       jobs.Status
	Attempts  []jobAttempt
	Takeovers int
}

const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.User, _ = UserFrom(r.Context())
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	w.WriteHeader(status)
	if err := pages.ExecuteTemplate(w, name, p); err != nil {
		s.log.Error("api: render dashboard", "page", name, "err", err)
	}
}

// renderError shows the error page: 404 for what does not exist, 503 when a
// dependency is down, 500 otherwise.
func (s *Server) renderError(w http.ResponseWriter, r *http.Request, status int, title, msg string) {
	if status >= 500 {
		s.log.Warn("api: dashboard page failed", "path", r.URL.Path, "status", status, "err", msg)
	}
	s.render(w, r, status, "error.html", page{Title: title, Data: errorPage{Status: status, Title: title, Message: msg, Back: "/"}})
}

func (s *Server) renderStoreError(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	if errors.Is(err, adapters.ErrUnavailable) || errors.Is(err, adapters.ErrClosed) {
		status = http.StatusServiceUnavailable
	}
	s.renderError(w, r, status, "The read model is not available", err.Error())
}

// requireTokenHTML guards a dashboard page: without a known token it shows
// the login form (401), to a user below role the error page (403).
func (s *Server) requireTokenHTML(role Role, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, ok := s.user(r, true)
		if !ok {
			s.render(w, r, http.StatusUnauthorized, "login.html", page{Title: "sign in", Data: ""})
			return
		}
		r = r.WithContext(withUser(r.Context(), u))
		if !u.Can(role) {
			s.renderError(w, r, http.StatusForbidden, "Not allowed",
				fmt.Sprintf("%s has the role %s; this page needs %s.", u.Name, u.Role, role))
			return
		}
		h(w, r)
	})
}

// login checks ?token= and sets the dashboard cookie.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	tok := r.URL.Query().Get("token")
	_, known := s.lookup(tok)
	if !s.open() && !known {
		msg := ""
		if tok != "" {
			msg = "wrong token"
		}
		s.render(w, r, http.StatusUnauthorized, "login.html", page{Title: "sign in", Data: msg})
		return
	}
	if !s.open() {
		http.SetCookie(w, &http.Cookie{
			Name: TokenCookie, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
			Secure: r.TLS != nil, MaxAge: int((30 * 24 * time.Hour).Seconds()),
		})
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// assets serves the dashboard's CSS and JavaScript (embedded; no CDN).
func (s *Server) assets() http.Handler {
	sub, err := fs.Sub(assetFS, "assets")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	files := http.StripPrefix("/ui/assets/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no directory listings
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(w, r)
	})
}

const (
	listLimit = 200
	// maxRawEvents bounds the raw events table of a sandbox page; the JSON
	// route pages through the rest.
	maxRawEvents = 1000
)

// session reads the session the path names, its figures counted from its
// entries, or renders the error page.
func (s *Server) session(w http.ResponseWriter, r *http.Request) (*adapters.SandboxDetails, []events.Entry, bool) {
	name, id := r.PathValue("name"), r.PathValue("id")
	d, err := s.cfg.Store.GetSandboxDetails(r.Context(), name, id)
	if err != nil {
		s.renderStoreError(w, r, err)
		return nil, nil, false
	}
	if d == nil {
		s.renderError(w, r, http.StatusNotFound, "No such sandbox", "no sandbox "+id+" named "+name+" in the read model")
		return nil, nil, false
	}
	es, err := s.cfg.Store.ReadAll(r.Context(), name, id)
	if err != nil {
		s.renderStoreError(w, r, err)
		return nil, nil, false
	}
	// The page's live stream resumes after the last of es, so its figures
	// come from es too: a summary read before a projector's commit and es
	// after it would leave an exec or a close counted in neither.
	if v := adapters.DetailsOf(es); v != nil {
		d.Status, d.CompletedAt, d.ExecCount = v.Status, v.CompletedAt, v.ExecCount
	}
	return d, es, true
}

func (s *Server) dashboardSandbox(w http.ResponseWriter, r *http.Request) {
	d, es, ok := s.session(w, r)
	if !ok {
		return
	}
	cps, err := s.cfg.Store.ListCheckpoints(r.Context(), d.Name, d.SandboxID)
	if err != nil {
		s.renderStoreError(w, r, err)
		return
	}
	p := sandboxPage{Details: d, View: buildSession(es), Events: es, Checkpoints: cps, Chain: audit.Check(es)}
	if len(es) > maxRawEvents {
		p.Events, p.MoreEvents = es[:maxRawEvents], len(es)-maxRawEvents
	}
	p.Rel = relationOf(p.View.Created)
	if p.Rel.Kind == "resumed from" {
		if ps, err := s.cfg.Store.ListAllSandboxDetails(r.Context(), adapters.ListOptions{SandboxID: p.Rel.From, Limit: 1}); err == nil && len(ps) > 0 {
			p.Parent = &ps[0]
		}
	}
	s.render(w, r, http.StatusOK, "sandbox.html", page{Title: d.Name + " " + d.SandboxID, Nav: "sandboxes", Data: p})
}

func (s *Server) dashboardExec(w http.ResponseWriter, r *http.Request) {
	k, ok := parseExecKey(r.PathValue("step"))
	if !ok {
		s.renderError(w, r, http.StatusNotFound, "No such exec", "an exec is named by its step number (and -branch), got "+strconv.Quote(r.PathValue("step")))
		return
	}
	d, es, ok := s.session(w, r)
	if !ok {
		return
	}
	v := buildSession(es)
	x := v.find(k)
	if x == nil {
		s.renderError(w, r, http.StatusNotFound, "No such exec", "sandbox "+d.SandboxID+" has no exec "+k.String())
		return
	}
	s.render(w, r, http.StatusOK, "exec.html", page{Title: "exec " + k.String() + " · " + d.Name, Nav: "sandboxes",
		Data: execPage{Details: d, Exec: x, LastSeq: v.LastSeq, Closed: v.Closed}})
}

func (s *Server) dashboardRun(w http.ResponseWriter, r *http.Request) {
	run := r.PathValue("run")
	l, err := buildLineage(r.Context(), s.cfg.Store, run)
	if err != nil {
		s.renderStoreError(w, r, err)
		return
	}
	if l.Count == 0 {
		s.renderError(w, r, http.StatusNotFound, "No such run", "no sandbox belongs to run "+run)
		return
	}
	s.render(w, r, http.StatusOK, "run.html", page{Title: "run " + run, Nav: "sandboxes", Data: l})
}

func (s *Server) dashboardJobs(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Queue == nil {
		s.renderError(w, r, http.StatusServiceUnavailable, "No jobs queue", "this API serves no jobs queue (start it with a bus)")
		return
	}
	sts, err := s.cfg.Queue.List(r.Context(), listLimit)
	if err != nil {
		s.renderError(w, r, http.StatusServiceUnavailable, "The jobs queue is not available", err.Error())
		return
	}
	s.render(w, r, http.StatusOK, "jobs.html", page{Title: "jobs", Nav: "jobs", Data: jobsPage{Jobs: sts}})
}

func (s *Server) dashboardJob(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Queue == nil {
		s.renderError(w, r, http.StatusServiceUnavailable, "No jobs queue", "this API serves no jobs queue (start it with a bus)")
		return
	}
	id := r.PathValue("id")
	if !jobs.ValidID(id) {
		s.renderError(w, r, http.StatusNotFound, "No such job", "a job id is 32 lowercase hex digits, got "+strconv.Quote(id))
		return
	}
	st, err := s.cfg.Queue.Status(r.Context(), id)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		s.renderError(w, r, http.StatusNotFound, "No such job", "no job "+id)
		return
	case err != nil:
		s.renderError(w, r, http.StatusServiceUnavailable, "The jobs queue is not available", err.Error())
		return
	}
	as, err := jobAttempts(r.Context(), s.cfg.Store, st)
	if err != nil {
		s.renderStoreError(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "job.html", page{Title: "job " + st.Name, Nav: "jobs", Data: jobPage{Job: st, Attempts: as, Takeovers: takeovers(as)}})
}

func (s *Server) dashboardExecutors(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Queue == nil {
		s.renderError(w, r, http.StatusServiceUnavailable, "No jobs queue", "this API serves no jobs queue (start it with a bus)")
		return
	}
	l, err := executors(r.Context(), s.cfg.Queue, time.Now())
	if err != nil {
		s.renderError(w, r, http.StatusServiceUnavailable, "The jobs queue is not available", err.Error())
		return
	}
	p := executorsPage{ExecutorList: l}
	for _, x := range l.Executors {
		if x.State == wire.ExecutorLive || x.State == wire.ExecutorDraining {
			p.Live++
		}
		p.Running += len(x.Jobs)
	}
	s.render(w, r, http.StatusOK, "executors.html", page{Title: "executors", Nav: "executors", Data: p})
}
