package execd

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// TokenHeader is the request header that carries the access token.
const TokenHeader = "X-EXECD-ACCESS-TOKEN"

// Defaults applied by New to zero Config fields.
const (
	DefaultPingInterval = 3 * time.Second
	DefaultMaxLine      = 4 << 20
	DefaultPath         = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

	maxJSONBody      = 8 << 20 // request bodies other than uploads
	maxFinishedCmds  = 1024    // finished command records kept for /command/status
	maxSessions      = 1024    // live sessions and code contexts
	interruptGrace   = 3 * time.Second
	drainAfterExit   = 100 * time.Millisecond
	minMaxLine       = 256
	eventQueueLength = 64
)

// Config configures a Server. The zero value is valid (no auth, real root, defaults below).
type Config struct {
	Token string   // required on every route (X-EXECD-ACCESS-TOKEN); empty = no auth (tests only)
	Root  string   // filesystem root that file-API paths and command cwd resolve under; "" or "/" = real root
	Env   []string // base environment of commands (default: a sane PATH, HOME=/root, LANG=C.UTF-8)
	// Shell runs /command, /code and session scripts as Shell -c script. Default: bash if it is on
	// the PATH of Env (the real execd runs bash), else /bin/sh.
	Shell        string
	Logger       *slog.Logger
	PingInterval time.Duration // default 3 s (stream keep-alive ping)
	MaxLine      int           // default 4 MiB: longer output lines are split into several events, never lost; bounds each event's encoded JSON line (min 256)
	// OOMScoreAdj, when not 0, is each command's oom_score_adj from its
	// first instruction (children it forks at once inherit it), so that at a
	// memory limit the OOM killer takes a command, not execd.
	OOMScoreAdj int
	// Cwd is the cwd of commands and sessions that give none (a path under
	// Root, e.g. an image's WorkingDir); "" is Root itself.
	Cwd string
	// UID and GID, when UID is set, are the credentials of commands that give
	// no uid (an image's User); GID nil means UID's primary group.
	UID, GID *uint32
	// CommandDone, when set, is told how long each POST /command and POST
	// /code took, from the request to the end of its answer (the command's
	// stream), whatever path reached it (/proxy/44772/... included).
	CommandDone func(time.Duration)
}

// Server is the execd HTTP API. It is safe for concurrent use. After Close every request is
// answered 503 and no new process is started.
type Server struct {
	cfg     Config
	log     *slog.Logger
	root    string // absolute, cleaned; "/" = real root
	env     []string
	shell   string
	tmpDir  string // background logs and session state; removed by Close
	mux     *http.ServeMux
	closing chan struct{} // closed by Close: ends /metrics/watch streams

	// wg counts goroutines that wait for processes; Close waits for it.
	wg sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	cmds     map[string]*command
	finished []string // ids of finished commands, oldest first
	sessions map[string]*session
	ptys     map[string]*ptySession
	interps  map[string]*interp
}

var _ http.Handler = (*Server)(nil)

// New validates cfg, fills in defaults and returns a Server. It creates a private temporary
// directory (for background-command logs and session state) that Close removes.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = DefaultMaxLine
	}
	if cfg.MaxLine < minMaxLine {
		return nil, fmt.Errorf("new execd: MaxLine %d below minimum %d: %w", cfg.MaxLine, minMaxLine, ErrInvalid)
	}
	root := cfg.Root
	if root == "" {
		root = "/"
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("new execd: root %q: %w", cfg.Root, err)
	}
	if root != "/" {
		// The root itself may be reached through host symlinks; resolve them once so that
		// later prefix checks compare real paths.
		if root, err = filepath.EvalSymlinks(root); err != nil {
			return nil, fmt.Errorf("new execd: root %q: %w", cfg.Root, err)
		}
	}
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("new execd: root %q: %w", cfg.Root, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("new execd: root %q is not a directory: %w", cfg.Root, ErrInvalid)
	}
	// Keys missing from Env get the defaults, so an image environment without PATH still works.
	env := slices.Clone(cfg.Env)
	for _, kv := range []string{"PATH=" + DefaultPath, "HOME=/root", "LANG=C.UTF-8"} {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") }) {
			env = append(env, kv)
		}
	}
	shell := cfg.Shell
	if shell == "" {
		shell = "/bin/sh"
		if p, err := lookPath("bash", envValue(env, "PATH")); err == nil {
			shell = p
		} else if _, err := os.Stat(filepath.Join(root, "bin", "sh")); err != nil {
			// An image without a shell: commands that need none still run
			// (see shellSpec).
			shell = ""
		}
	}
	tmp, err := makeTempDir()
	if err != nil {
		return nil, fmt.Errorf("new execd: temp dir: %w", err)
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		root:     root,
		env:      env,
		shell:    shell,
		tmpDir:   tmp,
		cmds:     make(map[string]*command),
		sessions: make(map[string]*session),
		ptys:     make(map[string]*ptySession),
		interps:  make(map[string]*interp),
		closing:  make(chan struct{}),
	}
	s.routes()
	return s, nil
}

// timed reports to Config.CommandDone how long f took.
func (s *Server) timed(f func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	if s.cfg.CommandDone == nil {
		return f
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		t0 := time.Now()
		err := f(w, r)
		s.cfg.CommandDone(time.Since(t0))
		return err
	}
}

func (s *Server) routes() {
	m := http.NewServeMux()
	h := func(pattern string, f func(http.ResponseWriter, *http.Request) error) {
		m.HandleFunc(pattern, s.adapt(f))
	}
	h("GET /ping", func(w http.ResponseWriter, r *http.Request) error { return nil })

	h("POST /command", s.timed(s.handleRunCommand))
	h("DELETE /command", s.handleInterruptCommand)
	h("GET /command/{a}/{b}", s.handleCommandGet) // status/{id} and {id}/logs share a shape

	h("POST /session", s.handleCreateSession)
	h("POST /session/{id}/run", s.handleRunInSession)
	h("DELETE /session/{id}", s.handleDeleteSession)

	h("POST /code", s.timed(s.handleRunCode))
	h("DELETE /code", s.handleInterruptCode)
	h("POST /code/context", s.handleCreateContext)
	h("GET /code/contexts", s.handleListContexts)
	h("DELETE /code/contexts", s.handleDeleteContexts)
	h("GET /code/contexts/{id}", s.handleGetContext)
	h("DELETE /code/contexts/{id}", s.handleDeleteContext)

	h("GET /files/info", s.handleFilesInfo)
	h("DELETE /files", s.handleDeleteFiles)
	h("POST /files/permissions", s.handleChmod)
	h("POST /files/mv", s.handleMove)
	h("GET /files/search", s.handleSearch)
	h("POST /files/replace", s.handleReplace)
	h("POST /files/upload", s.handleUpload)
	h("GET /files/download", s.handleDownload)
	h("GET /directories/list", s.handleListDir)
	h("POST /directories", s.handleMakeDirs)
	h("DELETE /directories", s.handleRemoveDirs)

	h("GET /metrics", s.handleMetrics)
	h("GET /metrics/watch", s.handleWatchMetrics)

	h("POST /pty", s.handleCreatePTY)
	h("GET /pty/{id}", s.handlePTYStatus)
	h("DELETE /pty/{id}", s.handleDeletePTY)
	h("GET /pty/{id}/ws", s.handlePTYWebSocket)
	h("/proxy/{port}/{rest...}", s.handleProxy)
	h("/proxy/{port}", s.handleProxy)

	// An unknown route (or a known path with another method) answers as gin's
	// default: text/plain "404 page not found".
	m.HandleFunc("/", notFoundPage)
	s.mux = m
}

// Port is the port execd listens on in a sandbox (OpenSandbox's
// 44772); /proxy/{Port}/{rest} is execd's own {rest}.
const Port = 44772

var selfPrefix = "/proxy/" + strconv.Itoa(Port)

// selfProxied returns the path a /proxy/44772/... path stands for.
func selfProxied(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, selfPrefix)
	switch {
	case !ok:
		return "", false
	case rest == "":
		return "/", true
	case rest[0] == '/':
		return rest, true
	}
	return "", false // /proxy/447720...
}

// ptySocket reports whether r opens a terminal's WebSocket (GET
// /pty/{id}/ws), the one route that takes the token from the query too.
func ptySocket(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/pty/")
	id, ok2 := strings.CutSuffix(rest, "/ws")
	return r.Method == http.MethodGet && ok && ok2 && id != "" && !strings.Contains(id, "/")
}

// ServeHTTP checks the access token (the X-EXECD-ACCESS-TOKEN header, or
// ?token= on a terminal's WebSocket) and dispatches to the API routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rest, ok := selfProxied(r.URL.Path); ok {
		// /proxy/44772/{rest} reaches execd itself, as through the real
		// execd's proxy to its own port: the endpoint OpenSandbox's Docker
		// runtime answers for execd has that shape.
		r = r.WithContext(r.Context()) // a shallow copy, for its URL
		u := *r.URL
		u.Path, u.RawPath = rest, ""
		r.URL = &u
	}
	if s.cfg.Token != "" {
		got := r.Header.Get(TokenHeader)
		if got == "" && ptySocket(r) {
			// A browser's WebSocket cannot set headers: the TypeScript SDKs
			// pass the token as ?token= on the terminal's socket.
			got = r.URL.Query().Get("token")
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) != 1 {
			// The real execd answers {"error": ...} here, not {code, message}.
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized: invalid or missing header " + TokenHeader})
			return
		}
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		writeError(w, apiErr(http.StatusServiceUnavailable, CodeUnavailable, ErrClosed, "execd is shutting down"))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Close kills every command and session run still running (their whole process groups), waits
// for them to be reaped and removes the server's temporary files. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	var running []*command
	for _, c := range s.cmds {
		running = append(running, c)
	}
	for _, ss := range s.sessions {
		if c := ss.current(); c != nil {
			running = append(running, c)
		}
	}
	ptys, interps := s.ptys, s.interps
	s.ptys, s.interps = map[string]*ptySession{}, map[string]*interp{}
	s.mu.Unlock()
	for _, c := range running {
		c.kill(killSignalClose)
	}
	for _, p := range ptys {
		p.kill()
	}
	for _, in := range interps {
		in.kill()
	}
	s.wg.Wait()
	return os.RemoveAll(s.tmpDir)
}

// adapt turns a handler returning an error into an http.HandlerFunc. The error is answered as
// JSON unless the handler already committed a response (then it is only logged).
func (s *Server) adapt(f func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cw := &commitWriter{ResponseWriter: w}
		err := f(cw, r)
		if err == nil {
			return
		}
		if cw.committed {
			s.log.Debug("execd request failed after response started", "method", r.Method, "path", r.URL.Path, "err", err)
			return
		}
		var ae *APIError
		if !errors.As(err, &ae) {
			ae = runtimeError(err, "%v", err)
		}
		if ae.Status >= 500 {
			s.log.Warn("execd request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		writeError(cw, ae)
	}
}

// commitWriter records whether a handler has started its response.
type commitWriter struct {
	http.ResponseWriter
	committed bool
}

func (c *commitWriter) WriteHeader(code int) {
	c.committed = true
	c.ResponseWriter.WriteHeader(code)
}

func (c *commitWriter) Write(b []byte) (int, error) {
	c.committed = true
	return c.ResponseWriter.Write(b)
}

func (c *commitWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// ReadFrom keeps io.Copy into the response on the sendfile path.
func (c *commitWriter) ReadFrom(r io.Reader) (int64, error) {
	c.committed = true
	if rf, ok := c.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(c.ResponseWriter, r)
}

func writeError(w http.ResponseWriter, e *APIError) {
	writeJSON(w, e.Status, map[string]string{"code": e.Code, "message": e.Message})
}

// jsonContentType is what the real execd (gin) sends with every JSON answer.
const jsonContentType = "application/json; charset=utf-8"

// writeJSON answers v as gin's c.JSON does: no trailing newline.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":"UNKNOWN","message":"encode response"}`)
	}
	w.Header().Set("Content-Type", jsonContentType)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// notFoundPage is gin's answer to a request no route matches.
func notFoundPage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusNotFound)
	_, _ = io.WriteString(w, "404 page not found")
}

// drainLimit bounds the bytes of an oversized request body read (and dropped)
// before the 413 answer, so that the client reads the answer instead of a
// connection reset.
const drainLimit = 64 << 20

// tooLarge answers 413 for a body over limit after draining it (bounded).
func tooLarge(r *http.Request, limit int64, field string) *APIError {
	_, _ = io.CopyN(io.Discard, r.Body, drainLimit)
	return apiErr(http.StatusRequestEntityTooLarge, CodeInvalidRequestBody, ErrInvalid,
		"%s: request body larger than %d bytes", field, limit)
}

// decodeJSON reads a JSON request body into v. An empty body is an error unless allowEmpty.
func decodeJSON(r *http.Request, v any, allowEmpty bool) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxJSONBody+1))
	if err != nil {
		return badRequest(CodeInvalidRequestBody, "read request body: %v", err)
	}
	if len(b) > maxJSONBody {
		return tooLarge(r, maxJSONBody, "body")
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		if allowEmpty {
			return nil
		}
		return badRequest(CodeInvalidRequestBody, "empty request body")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return badRequest(CodeInvalidRequestBody, "error parsing request body: %v", err)
	}
	return nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// mergeEnv returns base with the overrides applied (later keys win, one entry per key).
func mergeEnv(base []string, over map[string]string) []string {
	out := make([]string, 0, len(base)+len(over))
	idx := make(map[string]int, len(base)+len(over))
	add := func(k, v string) {
		if i, ok := idx[k]; ok {
			out[i] = k + "=" + v
			return
		}
		idx[k] = len(out)
		out = append(out, k+"="+v)
	}
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		add(k, v)
	}
	for k, v := range over {
		add(k, v)
	}
	return out
}

// lookPath finds an executable named file in the colon-separated path list.
func lookPath(file, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return exec.LookPath(file)
}

// makeTempDir creates execd's private directory in $TMPDIR or /tmp. A minimal image may have
// no /tmp; it is then created (mode 1777, as usual), and /run and /dev/shm are tried last.
func makeTempDir() (string, error) {
	dir, err := os.MkdirTemp("", "execd-")
	if err == nil {
		return dir, nil
	}
	if _, statErr := os.Stat("/tmp"); errors.Is(statErr, fs.ErrNotExist) && os.Mkdir("/tmp", 0o755) == nil {
		_ = os.Chmod("/tmp", 0o777|os.ModeSticky) // Mkdir is subject to the umask
	}
	if dir, err2 := os.MkdirTemp("/tmp", "execd-"); err2 == nil {
		return dir, nil
	}
	for _, base := range []string{"/run", "/dev/shm"} {
		if dir, err2 := os.MkdirTemp(base, "execd-"); err2 == nil {
			return dir, nil
		}
	}
	return "", err
}
