package execd

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/internal/oomscore"
	"github.com/alineo-labs/alineo/sandboxd/internal/proctree"
)

const (
	killSignalClose      = syscall.SIGKILL
	killSignalTimeout    = syscall.SIGKILL
	killSignalDisconnect = syscall.SIGKILL
	killSignalInterrupt  = syscall.SIGTERM // escalated to SIGKILL after interruptGrace

	maxDrainAfterExit = 4 << 20 // bytes read from a pipe after the read deadline passed
)

// command is one started process (and its process group): a /command, /code or session run.
type command struct {
	id         string
	content    string
	background bool
	logPath    string // background only: merged stdout+stderr
	started    time.Time
	done       chan struct{} // closed once the process is reaped and the result recorded

	mu        sync.Mutex
	pid       int // process group id (the process is its group leader); 0 before start
	exited    bool
	sigkilled bool
	timers    []*time.Timer
	finished  time.Time
	exitCode  int
	errMsg    string
}

func newCommand(content string, background bool) *command {
	return &command{id: newID(), content: content, background: background, done: make(chan struct{})}
}

// kill signals the command's whole process group. SIGTERM is followed by SIGKILL after
// interruptGrace if the command is still running. Killing an exited command does nothing.
func (c *command) kill(sig syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exited || c.pid == 0 || c.sigkilled {
		return
	}
	c.sigkilled = sig == syscall.SIGKILL // nothing stronger can follow; skip the /proc walk next time
	// The group gets the signal at once, so the leader sees it together with its children (a
	// shell must not first see a child die and exit on its own). Processes that left the group
	// (setsid, setpgid) are found through the leader's tree, read before the leader can die.
	tree := proctree.Descendants(c.pid)
	_ = syscall.Kill(-c.pid, sig)
	for _, pid := range tree {
		_ = syscall.Kill(pid, sig)
	}
	if sig == syscall.SIGTERM {
		c.timers = append(c.timers, time.AfterFunc(interruptGrace, func() { c.kill(syscall.SIGKILL) }))
	}
}

// killAfter arms a timeout that kills the process group.
func (c *command) killAfter(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.exited {
		c.timers = append(c.timers, time.AfterFunc(d, func() { c.kill(killSignalTimeout) }))
	}
}

// result returns the exit code and error text once done is closed.
func (c *command) result() (code int, msg string, elapsed time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exitCode, c.errMsg, c.finished.Sub(c.started)
}

// procSpec says how to start a process.
type procSpec struct {
	argv   []string
	dir    string // host path
	env    []string
	uid    *uint32
	gid    *uint32
	stdout *os.File
	stderr *os.File
	// raw streams output as chunks of exact bytes, as read from the pipes,
	// instead of one event per line (see ExactOutputHeader).
	raw bool
}

// start starts c as described by spec, in its own process group, registers it and reaps it in
// the background. stdout/stderr of spec are the caller's to close after start returns.
func (s *Server) start(c *command, spec procSpec) error {
	cmd := &exec.Cmd{
		Path:   spec.argv[0],
		Args:   spec.argv,
		Dir:    spec.dir,
		Env:    spec.env,
		Stdout: spec.stdout,
		Stderr: spec.stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid: true,
		},
	}
	if spec.uid != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: *spec.uid, Gid: *spec.gid}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()

	if err := oomscore.Start(cmd, s.cfg.OOMScoreAdj); err != nil {
		s.wg.Done()
		return fmt.Errorf("start %s: %w", spec.argv[0], err)
	}
	c.mu.Lock()
	c.pid = cmd.Process.Pid
	c.started = time.Now()
	c.mu.Unlock()

	s.mu.Lock()
	s.cmds[c.id] = c
	closed := s.closed
	s.mu.Unlock()
	if closed { // Close ran while we were starting: it did not see c.
		c.kill(killSignalClose)
	}
	s.log.Debug("execd command started", "id", c.id, "pid", cmd.Process.Pid, "background", c.background)
	go func() {
		defer s.wg.Done()
		err := cmd.Wait()
		c.mu.Lock()
		c.exited = true
		c.finished = time.Now()
		for _, t := range c.timers {
			t.Stop()
		}
		c.exitCode = cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			c.errMsg = ee.Error() // "exit status 3", "signal: killed"
		default:
			c.errMsg = err.Error()
			if c.exitCode == 0 {
				c.exitCode = -1
			}
		}
		code, msg := c.exitCode, c.errMsg
		c.mu.Unlock()
		close(c.done)
		s.log.Debug("execd command finished", "id", c.id, "exit_code", code, "error", msg)
		s.retire(c)
	}()
	return nil
}

// retire records c as finished and forgets the oldest finished commands beyond maxFinishedCmds.
func (s *Server) retire(c *command) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = append(s.finished, c.id)
	for len(s.finished) > maxFinishedCmds {
		old := s.cmds[s.finished[0]]
		delete(s.cmds, s.finished[0])
		s.finished = s.finished[1:]
		if old != nil && old.logPath != "" {
			_ = os.Remove(old.logPath)
		}
	}
}

func (s *Server) lookupCommand(id string) *command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmds[id]
}

// runStream starts c with spec, streams its output as events until it ends and then sends the
// terminal event. timeout <= 0 means none. The command is killed if the client goes away.
func (s *Server) runStream(w http.ResponseWriter, r *http.Request, c *command, spec procSpec, timeout time.Duration) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return runtimeError(err, "create pipe: %v", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return runtimeError(err, "create pipe: %v", err)
	}
	spec.stdout, spec.stderr = outW, errW
	err = s.start(c, spec)
	outW.Close()
	errW.Close()
	defer outR.Close()
	defer errR.Close()
	if err != nil {
		return startError(err)
	}
	if timeout > 0 {
		c.killAfter(timeout)
	}

	sw := newStreamWriter(w)
	if spec.raw {
		w.Header().Set(ExactOutputHeader, "1")
	}
	var sendMu sync.Mutex
	send := func(ev event) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if sw.send(ev) != nil {
			c.kill(killSignalDisconnect)
		}
	}
	_ = sw.queue(event{Type: evInit, Text: c.id}) // flushed with the ping
	send(event{Type: evPing, Text: "pong"})

	var readers sync.WaitGroup
	readers.Add(2)
	pump := s.pump
	if spec.raw {
		pump = s.pumpRaw
	}
	go pump(outR, evStdout, send, &readers)
	go pump(errR, evStderr, send, &readers)
	rd := make(chan struct{})
	var readersDone <-chan struct{} = rd
	go func() { readers.Wait(); close(rd) }()

	ticker := time.NewTicker(s.cfg.PingInterval)
	defer ticker.Stop()
	// Run until the process is reaped and both pipes are drained, whichever comes last.
	exited, ctxDone := c.done, r.Context().Done()
	for readersDone != nil || exited != nil {
		select {
		case <-readersDone:
			readersDone = nil
		case <-ticker.C:
			send(event{Type: evPing, Text: "pong"})
		case <-ctxDone:
			c.kill(killSignalDisconnect)
			ctxDone = nil
		case <-exited:
			// Output already in the pipes is read at once; a grandchild that keeps them open
			// does not hold the stream past drainAfterExit.
			deadline := time.Now().Add(drainAfterExit)
			_ = outR.SetReadDeadline(deadline)
			_ = errR.SetReadDeadline(deadline)
			exited = nil
		}
	}
	// The last event goes with the response's end, in one write, once the
	// handler returns; the readers are done, so nothing sends after it.
	_ = sw.queue(terminalEvent(c))
	return nil
}

// pump reads f to EOF (or its read deadline) and sends one event per line.
func (s *Server) pump(f *os.File, typ string, send func(event), wg *sync.WaitGroup) {
	defer wg.Done()
	sp := newLineSplitter(s.cfg.MaxLine, func(line []byte) error {
		splitForWire(line, s.cfg.MaxLine, func(piece []byte) { send(outputEvent(typ, piece)) })
		return nil
	})
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			_, _ = sp.Write(buf[:n])
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			drainAvailable(f, buf, sp)
			break
		}
		if err != nil {
			break
		}
	}
	_ = sp.Flush()
}

// pumpRaw reads f to EOF (or its read deadline) and sends what each read
// returns as one event of exact bytes (text, and data when they are not
// UTF-8), holding back a character cut at the end of a read for the next one.
func (s *Server) pumpRaw(f *os.File, typ string, send func(event), wg *sync.WaitGroup) {
	defer wg.Done()
	cw := &chunkWriter{max: s.cfg.MaxLine, emit: func(b []byte) { send(chunkEvent(typ, b)) }}
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			_, _ = cw.Write(buf[:n])
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			drainAvailable(f, buf, cw)
			break
		}
		if err != nil {
			break
		}
	}
	cw.Flush()
}

// drainAvailable reads what is already buffered in pipe f without waiting for more. The read
// deadline set after the process exit only stops waiting for writers that never close the pipe
// (a lingering grandchild); output the process wrote before exiting must not be lost just
// because the client was slow to take it.
func drainAvailable(f *os.File, buf []byte, w io.Writer) {
	if f.SetReadDeadline(time.Time{}) != nil {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// Bounded: a grandchild writing without pause must not keep us here.
	for total := 0; total < maxDrainAfterExit; {
		var n int
		err := rc.Read(func(fd uintptr) bool {
			n, _ = syscall.Read(int(fd), buf) // non-blocking: EAGAIN once the pipe is empty
			return true
		})
		if err != nil || n <= 0 {
			return
		}
		total += n
		_, _ = w.Write(buf[:n])
	}
}

func terminalEvent(c *command) event {
	code, msg, elapsed := c.result()
	if code == 0 && msg == "" {
		return event{Type: evComplete, ExecutionTime: elapsed.Milliseconds()}
	}
	return event{Type: evError, Error: &eventError{
		Ename:     "CommandExecError",
		Evalue:    strconv.Itoa(code),
		Traceback: []string{msg},
	}}
}

type runCommandRequest struct {
	Command    string            `json:"command"`
	Cwd        string            `json:"cwd"`
	Background bool              `json:"background"`
	Timeout    int64             `json:"timeout"` // milliseconds
	UID        *int64            `json:"uid"`
	GID        *int64            `json:"gid"`
	Envs       map[string]string `json:"envs"`
}

// validateScript refuses a script execve cannot pass: one with a NUL byte or
// longer than MaxCommand. field names the request field in the message.
func validateScript(field, script string) error {
	if i := strings.IndexByte(script, 0); i >= 0 {
		return badRequest(CodeInvalidRequestBody, "%s: contains a NUL byte at offset %d", field, i)
	}
	if len(script) > MaxCommand {
		return badRequest(CodeInvalidRequestBody, "%s: %d bytes, longer than the maximum of %d", field, len(script), MaxCommand)
	}
	return nil
}

// startError is the API error of a command that could not be started: 503 while execd
// shuts down, else a runtime error.
func startError(err error) error {
	if errors.Is(err, ErrClosed) {
		return apiErr(http.StatusServiceUnavailable, CodeUnavailable, err, "execd is shutting down")
	}
	return runtimeError(err, "%v", err)
}

// MaxCommand is the longest command (or code) accepted, in bytes: the kernel's
// bound on one argument of execve (MAX_ARG_STRLEN), which `shell -c script`
// passes the script as.
const MaxCommand = 128<<10 - 1

// validateRun checks the command and timeout (milliseconds) of a /command or session run.
func validateRun(command string, timeoutMS int64) error {
	if strings.TrimSpace(command) == "" {
		return badRequest(CodeInvalidRequestBody, "command is required")
	}
	if err := validateScript("command", command); err != nil {
		return err
	}
	if timeoutMS < 0 {
		return badRequest(CodeInvalidRequestBody, "timeout must be >= 0 milliseconds, got %d", timeoutMS)
	}
	return nil
}

func (s *Server) handleRunCommand(w http.ResponseWriter, r *http.Request) error {
	var req runCommandRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if err := validateRun(req.Command, req.Timeout); err != nil {
		return err
	}
	spec, err := s.shellSpec(req.Command, req.Cwd, req.Envs)
	if err != nil {
		return err
	}
	if spec.uid, spec.gid, err = s.credentials(req.UID, req.GID); err != nil {
		return err
	}
	timeout := time.Duration(req.Timeout) * time.Millisecond
	spec.raw = wantsExact(r)
	c := newCommand(req.Command, req.Background)
	if !req.Background {
		return s.runStream(w, r, c, spec, timeout)
	}
	return s.runBackground(w, c, spec, timeout)
}

// runBackground starts c detached with its output in a log file and answers at once.
func (s *Server) runBackground(w http.ResponseWriter, c *command, spec procSpec, timeout time.Duration) error {
	c.logPath = filepath.Join(s.tmpDir, c.id+".log")
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return runtimeError(err, "create log file: %v", err)
	}
	spec.stdout, spec.stderr = logf, logf
	err = s.start(c, spec)
	logf.Close()
	if err != nil {
		_ = os.Remove(c.logPath)
		return startError(err)
	}
	if timeout > 0 {
		c.killAfter(timeout)
	}
	sw := newStreamWriter(w)
	// Sent with the response's end, in one write.
	_ = sw.queue(event{Type: evInit, Text: c.id})
	_ = sw.queue(event{Type: evPing, Text: "pong"})
	_ = sw.queue(event{Type: evComplete})
	return nil
}

// shellSpec builds the spec for `shell -c script` in cwd (resolved under Root) with extra envs.
func (s *Server) shellSpec(script, cwd string, envs map[string]string) (procSpec, error) {
	dir, err := s.workDir(cwd)
	if err != nil {
		return procSpec{}, err
	}
	for k, v := range envs {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return procSpec{}, badRequest(CodeInvalidRequestBody, "envs: invalid environment variable name %q", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return procSpec{}, badRequest(CodeInvalidRequestBody, "envs: the value of %s contains a NUL byte", k)
		}
	}
	env := mergeEnv(s.env, envs)
	if s.shell == "" {
		argv, err := s.noShellArgv(script, env)
		if err != nil {
			return procSpec{}, err
		}
		return procSpec{argv: argv, dir: dir, env: env}, nil
	}
	return procSpec{argv: []string{s.shell, "-c", script}, dir: dir, env: env}, nil
}

// noShellArgv is the argv of script in a root without a shell: its words,
// the first looked up in PATH, if it needs no shell (no pipes, redirections,
// expansions, globs, variable assignments or separators).
func (s *Server) noShellArgv(script string, env []string) ([]string, error) {
	argv, ok := splitWords(script)
	if !ok || len(argv) == 0 {
		return nil, badRequest(CodeInvalidRequestBody, "this sandbox has no shell (no /bin/sh in its image): only a plain command with arguments runs, and %q needs a shell", script)
	}
	if !strings.Contains(argv[0], "/") {
		p, err := lookPath(argv[0], envValue(env, "PATH"))
		if err != nil {
			return nil, badRequest(CodeInvalidRequestBody, "%s: command not found in PATH (this sandbox has no shell)", argv[0])
		}
		argv[0] = p
	}
	return argv, nil
}

// splitWords splits a command line into words as a shell would, with
// single and double quotes and backslash escapes, and reports false if it
// uses anything else of the shell's syntax.
func splitWords(script string) ([]string, bool) {
	var words []string
	var cur strings.Builder
	in := false // inside a word
	for i := 0; i < len(script); i++ {
		c := script[i]
		switch {
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\'':
			j := strings.IndexByte(script[i+1:], '\'')
			if j < 0 {
				return nil, false
			}
			cur.WriteString(script[i+1 : i+1+j])
			i += j + 1
			in = true
		case c == '"':
			i++
			for ; i < len(script) && script[i] != '"'; i++ {
				if strings.IndexByte("$`", script[i]) >= 0 {
					return nil, false
				}
				if script[i] == '\\' && i+1 < len(script) && strings.IndexByte("\"\\", script[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(script[i])
			}
			if i >= len(script) {
				return nil, false
			}
			in = true
		case c == '\\':
			if i+1 >= len(script) || script[i+1] == '\n' {
				return nil, false
			}
			i++
			cur.WriteByte(script[i])
			in = true
		case strings.IndexByte("|&;<>()$`*?[]{}~#!\n\r", c) >= 0:
			return nil, false
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	if len(words) > 0 && strings.Contains(words[0], "=") {
		return nil, false // a variable assignment
	}
	return words, true
}

// workDir resolves a command cwd under Root; "" is Config.Cwd, or Root.
func (s *Server) workDir(cwd string) (string, error) {
	if cwd == "" {
		cwd = s.cfg.Cwd
	}
	if cwd == "" {
		return s.root, nil
	}
	host, err := s.resolve(cwd, true)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(host)
	if err != nil || !fi.IsDir() {
		return "", badRequest(CodeInvalidRequestBody, "cwd %q is not an existing directory", cwd)
	}
	return host, nil
}

func (s *Server) credentials(uid, gid *int64) (*uint32, *uint32, error) {
	if uid == nil {
		if gid != nil {
			return nil, nil, badRequest(CodeInvalidRequestBody, "gid requires uid")
		}
		if s.cfg.UID == nil {
			return nil, nil, nil
		}
		u := int64(*s.cfg.UID)
		uid = &u
		if s.cfg.GID != nil {
			g := int64(*s.cfg.GID)
			gid = &g
		}
	}
	if *uid < 0 || *uid > 1<<32-2 {
		return nil, nil, badRequest(CodeInvalidRequestBody, "uid %d out of range", *uid)
	}
	u := uint32(*uid)
	g := u
	if gid != nil {
		if *gid < 0 || *gid > 1<<32-2 {
			return nil, nil, badRequest(CodeInvalidRequestBody, "gid %d out of range", *gid)
		}
		g = uint32(*gid)
	} else if pg, ok := s.primaryGroup(u); ok {
		g = pg
	}
	return &u, &g, nil
}

func (s *Server) handleInterruptCommand(w http.ResponseWriter, r *http.Request) error {
	id := r.URL.Query().Get("id")
	if id == "" {
		return badRequest(CodeMissingQuery, "missing query parameter id")
	}
	c := s.lookupCommand(id)
	if c == nil {
		return runtimeError(ErrNotFound, "no such session: %s", id)
	}
	c.kill(killSignalInterrupt)
	return nil
}

type commandStatus struct {
	ID         string  `json:"id"`
	Content    string  `json:"content"`
	Running    bool    `json:"running"`
	ExitCode   *int    `json:"exit_code,omitempty"`
	Error      string  `json:"error,omitempty"`
	StartedAt  string  `json:"started_at"`
	FinishedAt *string `json:"finished_at,omitempty"`
}

// handleCommandGet serves GET /command/status/{id} and GET /command/{id}/logs.
func (s *Server) handleCommandGet(w http.ResponseWriter, r *http.Request) error {
	a, b := r.PathValue("a"), r.PathValue("b")
	switch {
	case a == "status":
		return s.commandStatus(w, b)
	case b == "logs":
		return s.commandLogs(w, r, a)
	}
	notFoundPage(w, r)
	return nil
}

func (s *Server) commandStatus(w http.ResponseWriter, id string) error {
	c := s.lookupCommand(id)
	if c == nil {
		// The real execd: 404 with code INVALID_REQUEST_BODY.
		return apiErr(http.StatusNotFound, CodeInvalidRequestBody, ErrNotFound, "command not found: %s", id)
	}
	c.mu.Lock()
	st := commandStatus{ID: c.id, Content: c.content, Running: !c.exited, StartedAt: c.started.UTC().Format(time.RFC3339Nano)}
	if c.exited {
		code := c.exitCode
		st.ExitCode = &code
		st.Error = c.errMsg
		f := c.finished.UTC().Format(time.RFC3339Nano)
		st.FinishedAt = &f
	}
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, st)
	return nil
}

// TailCursorHeader carries the byte offset to pass as ?cursor= on the next logs call.
const TailCursorHeader = "EXECD-COMMANDS-TAIL-CURSOR"

func (s *Server) commandLogs(w http.ResponseWriter, r *http.Request, id string) error {
	c := s.lookupCommand(id)
	if c == nil {
		// The real execd: 400 INVALID_REQUEST_BODY, as for a foreground command.
		return apiErr(http.StatusBadRequest, CodeInvalidRequestBody, ErrNotFound, "command not found: %s", id)
	}
	if !c.background {
		return badRequest(CodeInvalidRequestBody, "command %s is not a background command; its output was streamed", id)
	}
	var cursor int64
	if q := r.URL.Query().Get("cursor"); q != "" {
		n, err := strconv.ParseInt(q, 10, 64)
		if err != nil || n < 0 {
			return badRequest(CodeInvalidRequestBody, "cursor must be a byte offset >= 0, got %q", q)
		}
		cursor = n
	}
	f, err := os.Open(c.logPath)
	if err != nil {
		return runtimeError(err, "open log of %s: %v", id, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return runtimeError(err, "stat log of %s: %v", id, err)
	}
	size := fi.Size()
	cursor = min(cursor, size)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set(TailCursorHeader, strconv.FormatInt(size, 10))
	w.Header().Set("Content-Length", strconv.FormatInt(size-cursor, 10))
	w.WriteHeader(http.StatusOK)
	_, err = io.Copy(w, io.NewSectionReader(f, cursor, size-cursor))
	return err
}
