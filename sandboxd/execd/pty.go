package execd

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/alineo-labs/alineo/sandboxd/internal/oomscore"
)

// PTY WebSocket framing, as the real execd's /pty/{id}/ws (components/execd/PTY.md): binary frames
// start with a channel byte; control frames are JSON text.
const (
	ptyBinStdin  byte = 0x00 // client → server: raw stdin bytes
	ptyBinStdout byte = 0x01 // server → client: raw output bytes
	ptyBinStderr byte = 0x02 // server → client: stderr bytes (pipe mode only)
	ptyBinReplay byte = 0x03 // server → client: 8-byte big-endian offset, then raw bytes

	ptyCloseTakenOver = 4001 // close code of a client evicted by ?takeover=1

	ptyReplayCap       = 1 << 20 // bytes of output kept for ?since= replay
	ptyReadLimit       = 1 << 20
	ptyTakeoverTimeout = 5 * time.Second
	ptyPingInterval    = 30 * time.Second
	ptyExitDrain       = 200 * time.Millisecond
	maxPTYSessions     = 256
)

// WebSocket error codes of the PTY terminal (ServerFrame.code).
const (
	ptyErrStartFailed      = "START_FAILED"
	ptyErrStdinWriteFailed = "STDIN_WRITE_FAILED"
	ptyErrInvalidFrame     = "INVALID_FRAME"
	ptyErrAlreadyConnected = "ALREADY_CONNECTED"
	ptyErrTakenOver        = "TAKEN_OVER"
)

// ptyClientFrame is a JSON text frame from the client.
type ptyClientFrame struct {
	Type   string `json:"type"`
	Data   string `json:"data,omitempty"`
	Cols   int    `json:"cols,omitempty"`
	Rows   int    `json:"rows,omitempty"`
	Signal string `json:"signal,omitempty"`
}

// ptyServerFrame is a JSON text frame to the client.
type ptyServerFrame struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id,omitempty"`
	Mode      string `json:"mode,omitempty"`
	ExitCode  *int   `json:"exit_code,omitempty"`
	Error     string `json:"error,omitempty"`
	Code      string `json:"code,omitempty"`
}

// ptyChunk is output on its way to the attached client.
type ptyChunk struct {
	channel byte
	data    []byte
}

// ptySession is a bash (or the session's command) on a pseudo-terminal or, in pipe mode, on
// plain pipes. The process starts with the first WebSocket and may outlive it; its output is
// kept (bounded) for replay.
type ptySession struct {
	id      string
	dir     string // host path of the working directory
	command string

	// ws is held by the one attached client; evict asks that client to let go.
	ws chan struct{}

	mu      sync.Mutex
	running bool
	pty     bool
	ptm     *os.File // pty master, or the stdin pipe in pipe mode
	pid     int
	done    chan struct{} // closed when the process exited and its output was read
	exit    int
	evict   func()
	replay  []byte // the last ptyReplayCap bytes of output
	offset  int64  // total bytes of output so far
	sub     chan ptyChunk
	subDone chan struct{}
}

func (p *ptySession) status() (running bool, offset int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running, p.offset
}

// fanout records b in the replay buffer and hands it to the attached client, if any. It blocks
// while the client is slow (backpressure on the process), not after the client detached.
func (p *ptySession) fanout(channel byte, b []byte) {
	p.mu.Lock()
	p.replay = append(p.replay, b...)
	if over := len(p.replay) - ptyReplayCap; over > 0 {
		p.replay = append(p.replay[:0], p.replay[over:]...)
	}
	p.offset += int64(len(b))
	sub, subDone := p.sub, p.subDone
	p.mu.Unlock()
	if sub == nil {
		return
	}
	select {
	case sub <- ptyChunk{channel, b}:
	case <-subDone:
	}
}

// attach snapshots the replay buffer from byte offset since and subscribes to what follows,
// atomically, so no byte is lost or repeated between them.
func (p *ptySession) attach(since int64) (snap []byte, snapOffset int64, sub chan ptyChunk, detach func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	start := p.offset - int64(len(p.replay))
	since = max(since, start)
	if since < p.offset {
		snap = append([]byte(nil), p.replay[since-start:]...)
	}
	sub, subDone := make(chan ptyChunk, 64), make(chan struct{})
	p.sub, p.subDone = sub, subDone
	return snap, since, sub, func() {
		p.mu.Lock()
		if p.sub == sub {
			p.sub, p.subDone = nil, nil
		}
		p.mu.Unlock()
		close(subDone)
	}
}

// openPTY opens a pseudo-terminal pair through /dev/ptmx.
func openPTY(cols, rows uint16) (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		_ = m.Close()
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	// TIOCGPTPEER needs no /dev/pts path (which may differ in a container); fall back to it.
	var s *os.File
	if sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC); errno == 0 {
		s = os.NewFile(sfd, "pty-peer")
	} else {
		n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
		if err != nil {
			_ = m.Close()
			return nil, nil, fmt.Errorf("pty number: %w", err)
		}
		if s, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0); err != nil {
			_ = m.Close()
			return nil, nil, fmt.Errorf("open pty slave: %w", err)
		}
	}
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows}); err != nil {
		_ = m.Close()
		_ = s.Close()
		return nil, nil, fmt.Errorf("set pty size: %w", err)
	}
	return m, s, nil
}

// start runs the session's process, on a pty unless pipe.
func (s *Server) startPTY(p *ptySession, pipe bool) error {
	args := []string{s.shell}
	if s.shell != "/bin/sh" {
		args = append(args, "--norc", "--noprofile")
	}
	if p.command != "" {
		args = append(args, "-c", p.command)
	}
	env := s.env
	if envValue(env, "TERM") == "" {
		env = append(env[:len(env):len(env)], "TERM=xterm-256color")
	}
	cmd := &exec.Cmd{Path: args[0], Args: args, Dir: p.dir, Env: env, SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	var in *os.File
	var outs []*os.File
	var closeAfter []*os.File
	if pipe {
		ir, iw, err := os.Pipe()
		if err != nil {
			return err
		}
		or, ow, err := os.Pipe()
		if err != nil {
			return err
		}
		er, ew, err := os.Pipe()
		if err != nil {
			return err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = ir, ow, ew
		in, outs, closeAfter = iw, []*os.File{or, er}, []*os.File{ir, ow, ew}
	} else {
		m, sl, err := openPTY(80, 24)
		if err != nil {
			return err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = sl, sl, sl
		cmd.SysProcAttr.Setctty = true
		in, outs, closeAfter = m, []*os.File{m}, []*os.File{sl}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()
	err := oomscore.Start(cmd, s.cfg.OOMScoreAdj)
	for _, f := range closeAfter {
		_ = f.Close()
	}
	if err != nil {
		s.wg.Done()
		_ = in.Close()
		for _, f := range outs[1:] {
			_ = f.Close()
		}
		return fmt.Errorf("start %s: %w", args[0], err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.running, p.pty, p.ptm, p.pid, p.done = true, !pipe, in, cmd.Process.Pid, done
	p.mu.Unlock()

	var readers sync.WaitGroup
	for i, f := range outs {
		channel := ptyBinStdout
		if i == 1 {
			channel = ptyBinStderr
		}
		readers.Add(1)
		go func() {
			defer readers.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					p.fanout(channel, append([]byte(nil), buf[:n]...))
				}
				if err != nil { // EIO on the master once every slave fd is closed
					return
				}
			}
		}()
	}
	go func() {
		defer s.wg.Done()
		_ = cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		// Output written before the exit is read first; a grandchild holding the terminal
		// open does not keep the session from ending.
		read := make(chan struct{})
		go func() { readers.Wait(); close(read) }()
		select {
		case <-read:
		case <-time.After(ptyExitDrain):
		}
		p.mu.Lock()
		p.running, p.exit = false, code
		p.mu.Unlock()
		for _, f := range outs {
			_ = f.Close()
		}
		if pipe {
			_ = in.Close()
		}
		close(done)
	}()
	return nil
}

// signal sends the named signal (SIGINT, SIGTERM, SIGKILL, SIGQUIT, SIGHUP) to the session's
// process group.
func (p *ptySession) signal(name string) {
	sig := unix.SignalNum(name)
	if sig == 0 {
		return
	}
	p.mu.Lock()
	pid, running, ptm, isPTY := p.pid, p.running, p.ptm, p.pty
	p.mu.Unlock()
	if !running || pid <= 0 {
		return
	}
	// On a terminal the signal goes where Ctrl-C would: the foreground process group, which
	// is the running job under bash's job control, else the shell's own group.
	if isPTY && ptm != nil {
		if fg, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPGRP); err == nil && fg > 0 {
			pid = fg
		}
	}
	_ = syscall.Kill(-pid, sig)
}

func (p *ptySession) resize(cols, rows int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.pty || p.ptm == nil || cols <= 0 || rows <= 0 || cols > 0xffff || rows > 0xffff {
		return nil
	}
	return unix.IoctlSetWinsize(int(p.ptm.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
}

func (p *ptySession) writeStdin(b []byte) error {
	p.mu.Lock()
	f := p.ptm
	p.mu.Unlock()
	if f == nil {
		return errors.New("session not started")
	}
	_, err := f.Write(b)
	return err
}

// kill ends the process group and frees the terminal.
func (p *ptySession) kill() {
	p.mu.Lock()
	pid, running, ptm, evict := p.pid, p.running, p.ptm, p.evict
	p.mu.Unlock()
	if running && pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	if ptm != nil && p.pty {
		_ = ptm.Close()
	}
	if evict != nil {
		evict()
	}
}

// ---- routes ----

type createPTYRequest struct {
	Cwd     string `json:"cwd,omitempty"`
	Command string `json:"command,omitempty"`
}

type ptyStatus struct {
	SessionID    string `json:"session_id"`
	Running      bool   `json:"running"`
	OutputOffset int64  `json:"output_offset"`
}

func ptyNotFound(id string) *APIError {
	return apiErr(http.StatusNotFound, CodeContextNotFound, ErrNotFound, "pty session %s not found", id)
}

func (s *Server) lookupPTY(id string) *ptySession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ptys[id]
}

func (s *Server) handleCreatePTY(w http.ResponseWriter, r *http.Request) error {
	var req createPTYRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	dir, err := s.workDir(req.Cwd)
	if err != nil {
		return err
	}
	p := &ptySession{id: newID(), dir: dir, command: req.Command, ws: make(chan struct{}, 1)}
	s.mu.Lock()
	if len(s.ptys) >= maxPTYSessions {
		s.mu.Unlock()
		return apiErr(http.StatusTooManyRequests, CodeRuntimeError, ErrInvalid, "too many pty sessions (%d); delete some first", maxPTYSessions)
	}
	s.ptys[p.id] = p
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]string{"session_id": p.id})
	return nil
}

func (s *Server) handlePTYStatus(w http.ResponseWriter, r *http.Request) error {
	p := s.lookupPTY(r.PathValue("id"))
	if p == nil {
		return ptyNotFound(r.PathValue("id"))
	}
	running, off := p.status()
	writeJSON(w, http.StatusOK, ptyStatus{SessionID: p.id, Running: running, OutputOffset: off})
	return nil
}

func (s *Server) handleDeletePTY(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	s.mu.Lock()
	p := s.ptys[id]
	delete(s.ptys, id)
	s.mu.Unlock()
	if p == nil {
		return ptyNotFound(id)
	}
	p.kill()
	return nil
}

// lockWS takes the session's one WebSocket slot; with takeover it evicts the holder and waits
// (bounded) for it to let go.
func (p *ptySession) lockWS(takeover bool) bool {
	select {
	case p.ws <- struct{}{}:
		return true
	default:
	}
	if !takeover {
		return false
	}
	p.mu.Lock()
	evict := p.evict
	p.mu.Unlock()
	if evict != nil {
		evict()
	}
	select {
	case p.ws <- struct{}{}:
		return true
	case <-time.After(ptyTakeoverTimeout):
		return false
	}
}

// handlePTYWebSocket serves GET /pty/{id}/ws, the terminal.
func (s *Server) handlePTYWebSocket(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	p := s.lookupPTY(id)
	if p == nil {
		return ptyNotFound(id)
	}
	q := r.URL.Query()
	if !p.lockWS(q.Get("takeover") == "1") {
		return apiErr(http.StatusConflict, ptyErrAlreadyConnected, ErrInvalid, "another client is already connected to pty session %s", id)
	}
	defer func() { <-p.ws }()
	// execd runs behind a trusted proxy; like the real one it accepts every origin.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return nil // Accept answered the client
	}
	defer func() { _ = conn.CloseNow() }()
	conn.SetReadLimit(ptyReadLimit)
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()

	p.mu.Lock()
	running := p.running
	p.mu.Unlock()
	if !running {
		if err := s.startPTY(p, q.Get("pty") == "0"); err != nil {
			_ = wsJSON(ctx, conn, ptyServerFrame{Type: "error", Code: ptyErrStartFailed, Error: err.Error()})
			return conn.Close(websocket.StatusInternalError, "start failed")
		}
	}
	since, _ := strconv.ParseInt(q.Get("since"), 10, 64)
	snap, snapOff, sub, detach := p.attach(since)
	defer detach()
	p.mu.Lock()
	p.evict = func() {
		_ = conn.Close(ptyCloseTakenOver, ptyErrTakenOver)
		cancel()
	}
	mode, done := "pty", p.done
	if !p.pty {
		mode = "pipe"
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.evict = nil
		p.mu.Unlock()
	}()

	if len(snap) > 0 {
		frame := make([]byte, 9+len(snap))
		frame[0] = ptyBinReplay
		binary.BigEndian.PutUint64(frame[1:9], uint64(snapOff))
		copy(frame[9:], snap)
		if err := conn.Write(ctx, websocket.MessageBinary, frame); err != nil {
			return nil
		}
	}
	if err := wsJSON(ctx, conn, ptyServerFrame{Type: "connected", SessionID: id, Mode: mode}); err != nil {
		return nil
	}
	go s.ptyPump(ctx, cancel, conn, p, sub, done)
	go func() {
		t := time.NewTicker(ptyPingInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if conn.Ping(ctx) != nil {
					cancel()
					return
				}
			}
		}
	}()
	ptyReadLoop(ctx, cancel, conn, p)
	return nil
}

// ptyPump sends output to the client and, once the process ended and its output went out, the
// exit frame.
func (s *Server) ptyPump(ctx context.Context, cancel context.CancelFunc, conn *websocket.Conn, p *ptySession, sub chan ptyChunk, done chan struct{}) {
	defer cancel()
	frame := make([]byte, 0, 32<<10+1)
	send := func(c ptyChunk) bool {
		frame = append(append(frame[:0], c.channel), c.data...)
		return conn.Write(ctx, websocket.MessageBinary, frame) == nil
	}
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-sub:
			if !send(c) {
				return
			}
		case <-done:
			for {
				select {
				case c := <-sub:
					if !send(c) {
						return
					}
					continue
				default:
				}
				break
			}
			p.mu.Lock()
			code := p.exit
			p.mu.Unlock()
			_ = wsJSON(ctx, conn, ptyServerFrame{Type: "exit", ExitCode: &code})
			_ = conn.Close(websocket.StatusNormalClosure, "process exited")
			return
		}
	}
}

func ptyReadLoop(ctx context.Context, cancel context.CancelFunc, conn *websocket.Conn, p *ptySession) {
	defer cancel()
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			if len(data) == 0 || data[0] != ptyBinStdin {
				continue // only stdin goes client → server
			}
			if err := p.writeStdin(data[1:]); err != nil {
				_ = wsJSON(ctx, conn, ptyServerFrame{Type: "error", Code: ptyErrStdinWriteFailed, Error: err.Error()})
				return
			}
			continue
		}
		var f ptyClientFrame
		if json.Unmarshal(data, &f) != nil {
			continue
		}
		switch f.Type {
		case "stdin": // wscat / debugging: plain text
			if err := p.writeStdin([]byte(f.Data)); err != nil {
				_ = wsJSON(ctx, conn, ptyServerFrame{Type: "error", Code: ptyErrStdinWriteFailed, Error: err.Error()})
				return
			}
		case "signal":
			p.signal(f.Signal)
		case "resize":
			_ = p.resize(f.Cols, f.Rows)
		case "ping":
			_ = wsJSON(ctx, conn, ptyServerFrame{Type: "pong"})
		default:
			_ = wsJSON(ctx, conn, ptyServerFrame{Type: "error", Code: ptyErrInvalidFrame, Error: fmt.Sprintf("unknown frame type %q", f.Type)})
		}
	}
}

func wsJSON(ctx context.Context, conn *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, b)
}
