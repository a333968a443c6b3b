package sandboxd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/alineo-labs/alineo/sandboxd"
)

// TestPTYInSandbox drives execd's WebSocket terminal of a sandbox under the
// OCI runtime, directly and through the server proxy: the shell runs inside
// the sandbox (its own PID namespace, hostname and /tmp, on a pty of its own
// devpts), resizes, takes signals, reports its exit code, and its terminal
// ends when the sandbox is deleted.
func TestPTYInSandbox(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	hostFile, err := os.CreateTemp("/tmp", "alineo-pty-host-")
	if err != nil {
		t.Fatal(err)
	}
	hostFile.Close()
	t.Cleanup(func() { os.Remove(hostFile.Name()) })
	hostPIDNS, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	for _, proxy := range []bool{false, true} {
		t.Run(fmt.Sprintf("server proxy %v", proxy), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			id := create(t, base, nil)
			waitState(t, base, id, sandboxd.StateRunning)
			execd, token := execdEndpoint(t, base, id, proxy)

			r := call(t, "POST", execd+"/pty", map[string]string{"cwd": "/tmp"}, sandboxd.ExecdTokenHeader, token)
			wantStatus(t, r, http.StatusCreated)
			var created struct {
				SessionID string `json:"session_id"`
			}
			r.decode(t, &created)
			// Without the token the terminal is refused before the upgrade.
			if _, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(execd, "http")+"/pty/"+created.SessionID+"/ws", nil); err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("dial without token: %v, %v; want 401", res, err)
			}
			c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(execd, "http")+"/pty/"+created.SessionID+"/ws",
				&websocket.DialOptions{HTTPHeader: http.Header{sandboxd.ExecdTokenHeader: {token}}})
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer c.CloseNow()
			term := newTerminal(ctx, t, c)
			if f := term.text(); f["type"] != "connected" || f["mode"] != "pty" {
				t.Fatalf("first frame = %v", f)
			}

			term.stdin(fmt.Sprintf("tty; pwd; hostname; readlink /proc/self/ns/pid; test -e %s && echo host-file-visible || echo host-file-hidden; echo end-$((1+1))\n", hostFile.Name()))
			out := term.until("end-2\r\n")
			host, _ := os.Hostname()
			for _, want := range []string{"/dev/pts/", "\r\n/tmp\r\n", "host-file-hidden"} {
				if !strings.Contains(out, want) {
					t.Errorf("terminal output lacks %q: %q", want, out)
				}
			}
			if strings.Contains(out, "\r\n"+hostPIDNS+"\r\n") || strings.Contains(out, "\r\n"+host+"\r\n") {
				t.Errorf("the shell shares the host's PID namespace or hostname: %q", out)
			}

			term.control(map[string]any{"type": "resize", "cols": 132, "rows": 43})
			term.stdin("stty size\n")
			term.until("43 132")
			term.stdin(`sh -c 'trap "echo got-INT; exit 0" INT; echo trap-set; while :; do sleep 0.1; done'` + "\n")
			term.until("trap-set\r\n")
			term.control(map[string]any{"type": "signal", "signal": "SIGINT"})
			term.until("got-INT\r\n")

			// An exit ends the terminal with its code.
			term.stdin("exit 7\n")
			if code := term.exit(); code != 7 {
				t.Fatalf("exit code = %d, want 7", code)
			}

			// A second session's terminal ends when its sandbox is deleted.
			r = call(t, "POST", execd+"/pty", nil, sandboxd.ExecdTokenHeader, token)
			wantStatus(t, r, http.StatusCreated)
			r.decode(t, &created)
			c2, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(execd, "http")+"/pty/"+created.SessionID+"/ws",
				&websocket.DialOptions{HTTPHeader: http.Header{sandboxd.ExecdTokenHeader: {token}}})
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer c2.CloseNow()
			term2 := newTerminal(ctx, t, c2)
			term2.text()
			term2.stdin("echo alive-$((2*2))\n")
			term2.until("alive-4\r\n")
			wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+id, nil), http.StatusNoContent)
			term2.closed()
		})
	}
}

// terminal reads a PTY WebSocket in a goroutine (a Read whose ctx ends
// closes the connection, so reads cannot time out one by one).
type terminal struct {
	t      *testing.T
	ctx    context.Context
	c      *websocket.Conn
	frames chan wsFrame
	err    chan error
	buf    bytes.Buffer
}

type wsFrame struct {
	text map[string]any
	data []byte // output bytes, channel byte stripped
}

func newTerminal(ctx context.Context, t *testing.T, c *websocket.Conn) *terminal {
	term := &terminal{t: t, ctx: ctx, c: c, frames: make(chan wsFrame, 1024), err: make(chan error, 1)}
	go func() {
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				term.err <- err
				return
			}
			var f wsFrame
			if typ == websocket.MessageText {
				_ = json.Unmarshal(b, &f.text)
			} else if len(b) > 0 {
				f.data = b[1:]
			}
			term.frames <- f
		}
	}()
	return term
}

// next returns the next frame, failing the test after 15 s or at the end of
// the connection.
func (term *terminal) next() wsFrame {
	term.t.Helper()
	select {
	case f := <-term.frames:
		return f
	default:
	}
	select {
	case f := <-term.frames:
		return f
	case err := <-term.err:
		term.t.Fatalf("terminal ended: %v (output %q)", err, term.buf.String())
	case <-time.After(15 * time.Second):
		term.t.Fatalf("no frame in 15 s (output %q)", term.buf.String())
	}
	return wsFrame{}
}

func (term *terminal) text() map[string]any {
	term.t.Helper()
	for {
		if f := term.next(); f.text != nil {
			return f.text
		}
	}
}

func (term *terminal) until(want string) string {
	term.t.Helper()
	for !strings.Contains(term.buf.String(), want) {
		f := term.next()
		if f.text != nil {
			term.t.Fatalf("frame %v while waiting for %q (output %q)", f.text, want, term.buf.String())
		}
		term.buf.Write(f.data)
	}
	out := term.buf.String()
	term.buf.Reset()
	return out
}

func (term *terminal) exit() int {
	term.t.Helper()
	for {
		f := term.next()
		if f.text == nil {
			continue
		}
		if f.text["type"] != "exit" {
			term.t.Fatalf("frame %v, want exit", f.text)
		}
		code, _ := f.text["exit_code"].(float64)
		return int(code)
	}
}

// closed waits for the connection to end.
func (term *terminal) closed() {
	term.t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case <-term.frames:
		case <-term.err:
			return
		case <-deadline:
			term.t.Fatal("the terminal is still open 15 s after its sandbox was deleted")
		}
	}
}

func (term *terminal) stdin(s string) {
	term.t.Helper()
	if err := term.c.Write(term.ctx, websocket.MessageBinary, append([]byte{0}, s...)); err != nil {
		term.t.Fatalf("write stdin: %v", err)
	}
}

func (term *terminal) control(v any) {
	term.t.Helper()
	b, _ := json.Marshal(v)
	if err := term.c.Write(term.ctx, websocket.MessageText, b); err != nil {
		term.t.Fatalf("write %s: %v", b, err)
	}
}
