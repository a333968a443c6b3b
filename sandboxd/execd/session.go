package execd

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// session is a bash session (/session) or a shell code context (/code/context). As in the real
// execd each run is a fresh shell: the session keeps the exported variables (`export -p`) and
// the working directory the previous run ended with, and replays them before the next script.
type session struct {
	id       string
	language string // "" for /session sessions, "bash" for code contexts
	lock     chan struct{}
	dir      string // state files of this session

	mu      sync.Mutex
	exports string // `export -p` output of the last completed run
	cwd     string // host path
	run     *command
}

func (ss *session) current() *command {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.run
}

func (s *Server) newSession(language, cwd string) (*session, error) {
	if s.shell == "" {
		return nil, badRequest(CodeInvalidRequestBody, "this sandbox has no shell (no /bin/sh in its image): sessions and shell code contexts need one")
	}
	dir, err := s.workDir(cwd)
	if err != nil {
		return nil, err
	}
	ss := &session{id: newID(), language: language, lock: make(chan struct{}, 1), cwd: dir}
	ss.dir = filepath.Join(s.tmpDir, "session-"+ss.id)
	if err := os.Mkdir(ss.dir, 0o700); err != nil {
		return nil, runtimeError(err, "create session: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = os.RemoveAll(ss.dir)
		return nil, apiErr(http.StatusServiceUnavailable, CodeUnavailable, ErrClosed, "execd is shutting down")
	}
	if len(s.sessions) >= maxSessions {
		_ = os.RemoveAll(ss.dir)
		return nil, apiErr(http.StatusTooManyRequests, CodeRuntimeError, ErrInvalid,
			"too many sessions (%d); delete some first", maxSessions)
	}
	s.sessions[ss.id] = ss
	return ss, nil
}

func (s *Server) lookupSession(id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[id]
}

// removeSession forgets the session and kills its running run. It reports whether it existed.
func (s *Server) removeSession(id string) bool {
	s.mu.Lock()
	ss := s.sessions[id]
	delete(s.sessions, id)
	s.mu.Unlock()
	if ss == nil {
		return false
	}
	if c := ss.current(); c != nil {
		c.kill(killSignalClose)
	}
	_ = os.RemoveAll(ss.dir)
	return true
}

// runInSession runs script in ss, streaming events, then records the session's new state.
func (s *Server) runInSession(w http.ResponseWriter, r *http.Request, ss *session, script, cwd string, timeout time.Duration) error {
	if err := acquire(r.Context(), ss.lock); err != nil {
		return apiErr(http.StatusServiceUnavailable, CodeRuntimeError, err, "session %s busy: %v", ss.id, err)
	}
	defer func() { <-ss.lock }()

	ss.mu.Lock()
	dir, exports := ss.cwd, ss.exports
	ss.mu.Unlock()
	if cwd != "" {
		d, err := s.workDir(cwd)
		if err != nil {
			return err
		}
		dir = d
	} else if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		dir = s.root // the session's directory was removed
	}
	envFile, cwdFile := filepath.Join(ss.dir, "env"), filepath.Join(ss.dir, "cwd")
	_ = os.Remove(envFile)
	_ = os.Remove(cwdFile)

	var b strings.Builder
	if exports != "" {
		// Readonly or special variables may refuse to be set again; that is not the script's error.
		b.WriteString("{\n" + exports + "\n} 2>/dev/null\n")
	}
	// On exit, save the cwd and the exported variables except the ones the shell manages itself.
	// (A script that installs its own EXIT trap replaces this one; its run then keeps no state.)
	// The trap calls no `exit`: the shell keeps the script's exit status, and a run killed by a
	// signal still dies by that signal (bash and dash both behave so).
	b.WriteString("trap 'set +e; pwd >" + shellQuote(cwdFile) + " 2>/dev/null; " +
		"unset PWD OLDPWD SHLVL 2>/dev/null; export -p >" + shellQuote(envFile) + " 2>/dev/null' EXIT\n")
	b.WriteString(script)
	b.WriteString("\n")

	spec := procSpec{argv: []string{s.shell, "-c", b.String()}, dir: dir, env: s.env, raw: wantsExact(r)}
	c := newCommand(script, false)
	ss.mu.Lock()
	ss.run = c
	ss.mu.Unlock()
	err := s.runStream(w, r, c, spec, timeout)
	ss.mu.Lock()
	ss.run = nil
	if env, e1 := os.ReadFile(envFile); e1 == nil {
		ss.exports = string(env)
	}
	if wd, e2 := os.ReadFile(cwdFile); e2 == nil && len(wd) > 1 {
		ss.cwd = strings.TrimSuffix(string(wd), "\n")
	}
	ss.mu.Unlock()
	return err
}

func acquire(ctx context.Context, lock chan struct{}) error {
	select {
	case lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

type createSessionRequest struct {
	Cwd string `json:"cwd"`
}

func (s *Server) handleCreateSession(w http.ResponseWriter, r *http.Request) error {
	var req createSessionRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	ss, err := s.newSession("", req.Cwd)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"session_id": ss.id})
	return nil
}

type runInSessionRequest struct {
	Command string `json:"command"`
	Cwd     string `json:"cwd"`
	Timeout int64  `json:"timeout"`
}

func (s *Server) handleRunInSession(w http.ResponseWriter, r *http.Request) error {
	ss := s.lookupSession(r.PathValue("id"))
	if ss == nil {
		return contextNotFound(r.PathValue("id"))
	}
	var req runInSessionRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if err := validateRun(req.Command, req.Timeout); err != nil {
		return err
	}
	return s.runInSession(w, r, ss, req.Command, req.Cwd, time.Duration(req.Timeout)*time.Millisecond)
}

func (s *Server) handleDeleteSession(w http.ResponseWriter, r *http.Request) error {
	if !s.removeSession(r.PathValue("id")) {
		return contextNotFound(r.PathValue("id"))
	}
	return nil
}

func contextNotFound(id string) *APIError {
	return apiErr(http.StatusNotFound, CodeContextNotFound, ErrNotFound, "context %s not found", id)
}

// ---- /code ----

type codeContext struct {
	ID       string `json:"id,omitempty"`
	Language string `json:"language"`
}

type runCodeRequest struct {
	Code    string       `json:"code"`
	Context *codeContext `json:"context"`
}

func isShellLanguage(lang string) bool {
	switch strings.ToLower(lang) {
	case "", "bash", "sh", "shell":
		return true
	}
	return false
}

func (s *Server) handleRunCode(w http.ResponseWriter, r *http.Request) error {
	var req runCodeRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if strings.TrimSpace(req.Code) == "" {
		return badRequest(CodeInvalidRequestBody, "code is required")
	}
	if err := validateScript("code", req.Code); err != nil {
		return err
	}
	var lang string
	if req.Context != nil {
		lang = strings.ToLower(req.Context.Language)
		if req.Context.ID != "" {
			if in := s.lookupInterp(req.Context.ID); in != nil {
				return s.runInInterp(w, r, in, req.Code)
			}
			ss := s.lookupSession(req.Context.ID)
			if ss == nil {
				return contextNotFound(req.Context.ID)
			}
			return s.runInSession(w, r, ss, req.Code, "", 0)
		}
	}
	switch {
	case isShellLanguage(lang):
		spec, err := s.shellSpec(req.Code, "", nil)
		if err != nil {
			return err
		}
		spec.raw = wantsExact(r)
		return s.runStream(w, r, newCommand(req.Code, false), spec, 0)
	case lang == "python" || lang == "python3":
		py, err := lookPath("python3", envValue(s.env, "PATH"))
		if err != nil {
			return runtimeError(ErrUnsupported, "language runtime server not configured: python3 not found on PATH")
		}
		// Raw chunks, newlines included, as a Jupyter kernel streams them:
		// clients join code output without adding line ends.
		spec := procSpec{argv: []string{py, "-u", "-c", req.Code}, dir: s.root, env: s.env, raw: true}
		return s.runStream(w, r, newCommand(req.Code, false), spec, 0)
	}
	return runtimeError(ErrUnsupported,
		"language runtime server not configured: %q code needs a Jupyter server, which the sandboxd execd does not have", lang)
}

func (s *Server) handleInterruptCode(w http.ResponseWriter, r *http.Request) error {
	id := r.URL.Query().Get("id")
	if id == "" {
		return badRequest(CodeMissingQuery, "missing query parameter id")
	}
	if in := s.lookupInterp(id); in != nil {
		in.interrupt()
		return nil
	}
	if ss := s.lookupSession(id); ss != nil {
		if c := ss.current(); c != nil {
			c.kill(killSignalInterrupt)
		}
		return nil
	}
	if c := s.lookupCommand(id); c != nil {
		c.kill(killSignalInterrupt)
		return nil
	}
	return contextNotFound(id)
}

type createContextRequest struct {
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (s *Server) handleCreateContext(w http.ResponseWriter, r *http.Request) error {
	var req createContextRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	if lang, ok := interpLanguage(strings.ToLower(req.Language)); ok {
		in, err := s.newInterp(lang, req.Cwd)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, codeContext{ID: in.id, Language: in.language})
		return nil
	}
	if !isShellLanguage(req.Language) {
		return notSupported("a stateful " + req.Language + " code context (needs Jupyter)")
	}
	ss, err := s.newSession("bash", req.Cwd)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, codeContext{ID: ss.id, Language: ss.language})
	return nil
}

// contexts returns the code contexts, filtered by language when it is not empty, sorted by id.
func (s *Server) contexts(language string) []codeContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []codeContext{}
	for _, ss := range s.sessions {
		if ss.language == "" {
			continue
		}
		if language != "" && !(strings.EqualFold(language, ss.language) || (isShellLanguage(language) && isShellLanguage(ss.language))) {
			continue
		}
		out = append(out, codeContext{ID: ss.id, Language: ss.language})
	}
	want, _ := interpLanguage(strings.ToLower(language))
	for _, in := range s.interps {
		if language == "" || want == in.language {
			out = append(out, codeContext{ID: in.id, Language: in.language})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (s *Server) handleListContexts(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, s.contexts(r.URL.Query().Get("language")))
	return nil
}

func (s *Server) handleDeleteContexts(w http.ResponseWriter, r *http.Request) error {
	lang := r.URL.Query().Get("language")
	if lang == "" {
		return badRequest(CodeMissingQuery, "missing query parameter language")
	}
	for _, c := range s.contexts(lang) {
		if !s.removeInterp(c.ID) {
			s.removeSession(c.ID)
		}
	}
	return nil
}

func (s *Server) handleGetContext(w http.ResponseWriter, r *http.Request) error {
	if in := s.lookupInterp(r.PathValue("id")); in != nil {
		writeJSON(w, http.StatusOK, codeContext{ID: in.id, Language: in.language})
		return nil
	}
	ss := s.lookupSession(r.PathValue("id"))
	if ss == nil || ss.language == "" {
		return contextNotFound(r.PathValue("id"))
	}
	writeJSON(w, http.StatusOK, codeContext{ID: ss.id, Language: ss.language})
	return nil
}

func (s *Server) handleDeleteContext(w http.ResponseWriter, r *http.Request) error {
	if s.removeInterp(r.PathValue("id")) {
		return nil
	}
	ss := s.lookupSession(r.PathValue("id"))
	if ss == nil || ss.language == "" {
		return contextNotFound(r.PathValue("id"))
	}
	s.removeSession(ss.id)
	return nil
}
