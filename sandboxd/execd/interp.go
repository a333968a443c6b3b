package execd

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/internal/oomscore"
)

// A stateful code context without Jupyter: one long-lived interpreter per context runs a small
// driver that reads framed requests (one JSON object a line) on fd 3, runs each in one persistent
// namespace and writes framed events back on fd 4. What the code prints through the language's
// own stdout/stderr objects arrives as events in order; bytes written to the process's fds 1
// and 2 directly (a subprocess) are forwarded while a run is in progress.

//go:embed driver.py
var pythonDriver string

//go:embed driver.js
var nodeDriver string

// interpLanguages maps a canonical /code language to its interpreter and how it takes a script.
var interpLanguages = map[string]struct{ bin, flag string }{
	"python":     {"python3", "-c"},
	"javascript": {"node", "-e"},
}

func interpLanguage(lang string) (canonical string, ok bool) {
	switch lang {
	case "python", "python3":
		return "python", true
	case "javascript", "js", "node", "nodejs":
		return "javascript", true
	}
	return "", false
}

// driverFrame is one line from a driver: output, or the end of a run.
type driverFrame struct {
	Type   string      `json:"type"` // stdout, stderr, done
	Text   string      `json:"text,omitempty"`
	Count  int         `json:"count,omitempty"`
	Result *string     `json:"result,omitempty"`
	Error  *eventError `json:"error,omitempty"`
}

// interp is one interpreter process serving one code context.
type interp struct {
	id, language string
	lock         chan struct{} // one run at a time
	req          *os.File      // fd 3 of the driver
	events       *bufio.Reader // fd 4 of the driver; read only by the lock holder
	evFile       *os.File
	pid          int
	done         chan struct{} // closed when the process exited

	mu   sync.Mutex
	sink func(event) // the running request's stream, nil between runs
}

func (in *interp) setSink(f func(event)) {
	in.mu.Lock()
	in.sink = f
	in.mu.Unlock()
}

func (in *interp) forward(typ string, b []byte) {
	in.mu.Lock()
	f := in.sink
	in.mu.Unlock()
	if f != nil {
		f(chunkEvent(typ, b))
	}
}

// interrupt sends SIGINT to the interpreter's process group: the running code gets
// KeyboardInterrupt (python) or is broken off (node's breakOnSigint); the context survives.
func (in *interp) interrupt() { _ = syscall.Kill(-in.pid, syscall.SIGINT) }

func (in *interp) kill() {
	_ = syscall.Kill(-in.pid, syscall.SIGKILL)
	_ = in.req.Close()
}

// startInterp starts the interpreter of language (canonical) with its working directory dir.
func (s *Server) startInterp(language, dir string) (*interp, error) {
	spec := interpLanguages[language]
	driver := pythonDriver
	args := []string{"", "-u", spec.flag, driver}
	if language == "javascript" {
		driver = nodeDriver
		args = []string{"", spec.flag, driver}
	}
	bin, err := lookPath(spec.bin, envValue(s.env, "PATH"))
	if err != nil {
		return nil, runtimeError(ErrUnsupported, "language runtime server not configured: %s not found on PATH", spec.bin)
	}
	args[0] = bin
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, runtimeError(err, "create pipe: %v", err)
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, runtimeError(err, "create pipe: %v", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, runtimeError(err, "create pipe: %v", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, runtimeError(err, "create pipe: %v", err)
	}
	cmd := &exec.Cmd{
		Path: bin, Args: args, Dir: dir, Env: append(s.env[:len(s.env):len(s.env)], "PYTHONUNBUFFERED=1"),
		Stdout: outW, Stderr: errW, ExtraFiles: []*os.File{reqR, evW},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()
	err = oomscore.Start(cmd, s.cfg.OOMScoreAdj)
	for _, f := range []*os.File{reqR, evW, outW, errW} {
		_ = f.Close()
	}
	if err != nil {
		s.wg.Done()
		for _, f := range []*os.File{reqW, evR, outR, errR} {
			_ = f.Close()
		}
		return nil, startError(fmt.Errorf("start %s: %w", bin, err))
	}
	in := &interp{
		id: newID(), language: language, lock: make(chan struct{}, 1),
		req: reqW, events: bufio.NewReaderSize(evR, 64<<10), evFile: evR, pid: cmd.Process.Pid, done: make(chan struct{}),
	}
	for typ, f := range map[string]*os.File{evStdout: outR, evStderr: errR} {
		go func() {
			defer f.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					in.forward(typ, buf[:n])
				}
				if err != nil {
					return
				}
			}
		}()
	}
	go func() {
		defer s.wg.Done()
		_ = cmd.Wait()
		_ = reqW.Close()
		_ = evR.Close()
		close(in.done)
	}()
	return in, nil
}

var errInterpExited = errors.New("interpreter exited")

// run sends code to the interpreter and streams its events to send until the run ends. ctx
// ending (the client left) interrupts the run; the context lives on.
func (in *interp) run(ctx context.Context, code string, send func(event)) (driverFrame, error) {
	if err := acquire(ctx, in.lock); err != nil {
		return driverFrame{}, err
	}
	defer func() { <-in.lock }()
	in.setSink(send)
	defer in.setSink(nil)
	stop := context.AfterFunc(ctx, in.interrupt)
	defer stop()
	b, _ := json.Marshal(map[string]string{"code": code})
	if _, err := in.req.Write(append(b, '\n')); err != nil {
		return driverFrame{}, fmt.Errorf("%w: %w", errInterpExited, err)
	}
	for {
		line, err := in.events.ReadBytes('\n')
		if err != nil {
			return driverFrame{}, fmt.Errorf("%w: %w", errInterpExited, err)
		}
		var f driverFrame
		if json.Unmarshal(line, &f) != nil {
			continue
		}
		switch f.Type {
		case evStdout, evStderr:
			send(event{Type: f.Type, Text: f.Text})
		case "done":
			return f, nil
		}
	}
}

// runInContext serves POST /code for an interpreter context.
func (s *Server) runInInterp(w http.ResponseWriter, r *http.Request, in *interp, code string) error {
	select {
	case <-in.done:
		return runtimeError(errInterpExited, "context %s: its interpreter has exited", in.id)
	default:
	}
	sw := newStreamWriter(w)
	var sendMu sync.Mutex
	send := func(ev event) {
		sendMu.Lock()
		defer sendMu.Unlock()
		_ = sw.send(ev)
	}
	start := time.Now()
	_ = sw.queue(event{Type: evInit, Text: in.id}) // flushed with the ping
	send(event{Type: evPing, Text: "pong"})
	pingDone := make(chan struct{})
	defer close(pingDone)
	go func() {
		t := time.NewTicker(s.cfg.PingInterval)
		defer t.Stop()
		for {
			select {
			case <-pingDone:
				return
			case <-t.C:
				send(event{Type: evPing, Text: "pong"})
			}
		}
	}()
	f, err := in.run(r.Context(), code, send)
	if err != nil {
		ename := "ContextCancelled"
		if errors.Is(err, errInterpExited) {
			ename = "InterpreterExited"
		}
		send(event{Type: evError, Error: &eventError{Ename: ename, Evalue: err.Error(), Traceback: []string{err.Error()}}})
		return nil
	}
	if f.Count > 0 {
		send(event{Type: "execution_count", ExecutionCount: f.Count})
	}
	if f.Result != nil {
		send(event{Type: "result", Results: map[string]any{"text": *f.Result}})
	}
	if f.Error != nil {
		send(event{Type: evError, Error: f.Error})
		return nil
	}
	send(event{Type: evComplete, ExecutionTime: time.Since(start).Milliseconds()})
	return nil
}

func (s *Server) lookupInterp(id string) *interp {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.interps[id]
}

func (s *Server) newInterp(language, cwd string) (*interp, error) {
	dir, err := s.workDir(cwd)
	if err != nil {
		return nil, err
	}
	in, err := s.startInterp(language, dir)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.interps)+len(s.sessions) >= maxSessions {
		in.kill()
		if s.closed {
			return nil, apiErr(http.StatusServiceUnavailable, CodeUnavailable, ErrClosed, "execd is shutting down")
		}
		return nil, apiErr(http.StatusTooManyRequests, CodeRuntimeError, ErrInvalid, "too many code contexts (%d); delete some first", maxSessions)
	}
	s.interps[in.id] = in
	return in, nil
}

func (s *Server) removeInterp(id string) bool {
	s.mu.Lock()
	in := s.interps[id]
	delete(s.interps, id)
	s.mu.Unlock()
	if in != nil {
		in.kill()
	}
	return in != nil
}
