package execd_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/alineo-labs/alineo/sandboxd/execd"
)

func (e *env) newPTY(body any) string {
	e.t.Helper()
	var out struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(wantStatus(e.t, e.do("POST", "/pty", body), http.StatusCreated), &out); err != nil || out.SessionID == "" {
		e.t.Fatalf("create pty: %+v %v", out, err)
	}
	return out.SessionID
}

func (e *env) dialPTY(ctx context.Context, id, query string) *websocket.Conn {
	e.t.Helper()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.http.URL, "http")+"/pty/"+id+"/ws"+query, nil)
	if err != nil {
		e.t.Fatalf("dial: %v (%v)", err, resp)
	}
	c.SetReadLimit(4 << 20)
	return c
}

type wsFrame struct {
	text    map[string]any
	channel byte
	data    []byte
}

func readFrame(ctx context.Context, t *testing.T, c *websocket.Conn) wsFrame {
	t.Helper()
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if typ == websocket.MessageText {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("text frame %q: %v", b, err)
		}
		return wsFrame{text: m}
	}
	return wsFrame{channel: b[0], data: b[1:]}
}

// readUntil collects output until it contains want, or fails.
func readUntil(ctx context.Context, t *testing.T, c *websocket.Conn, want string) string {
	t.Helper()
	var out bytes.Buffer
	for !strings.Contains(out.String(), want) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		typ, b, err := c.Read(rctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting for %q: %v (have %q)", want, err, out.String())
		}
		f := wsFrame{channel: b[0], data: b[1:]}
		if typ == websocket.MessageText {
			f = wsFrame{text: map[string]any{"raw": string(b)}}
		}
		if f.text != nil {
			t.Fatalf("unexpected frame %v while waiting for %q (have %q)", f.text, want, out.String())
		}
		out.Write(f.data)
	}
	return out.String()
}

func stdin(ctx context.Context, t *testing.T, c *websocket.Conn, s string) {
	t.Helper()
	if err := c.Write(ctx, websocket.MessageBinary, append([]byte{0}, s...)); err != nil {
		t.Fatalf("write stdin: %v", err)
	}
}

func TestPTYSession(t *testing.T) {
	e := newEnv(t, execd.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := e.newPTY(map[string]string{"cwd": "/"})
	c := e.dialPTY(ctx, id, "")
	if f := readFrame(ctx, t, c); f.text["type"] != "connected" || f.text["session_id"] != id || f.text["mode"] != "pty" {
		t.Fatalf("first frame = %+v", f)
	}
	// A second client is refused while the first holds the session.
	wantError(t, e.do("GET", "/pty/"+id+"/ws", nil, "Connection", "Upgrade", "Upgrade", "websocket",
		"Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="), 409, "ALREADY_CONNECTED")

	stdin(ctx, t, c, "tty; stty size\n")
	if out := readUntil(ctx, t, c, "24 80"); !strings.Contains(out, "/dev/pts/") {
		t.Fatalf("not a terminal: %q", out)
	}
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"resize","cols":120,"rows":40}`))
	stdin(ctx, t, c, "stty size\n")
	readUntil(ctx, t, c, "40 120")
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"ping"}`))
	for {
		if f := readFrame(ctx, t, c); f.text != nil {
			if f.text["type"] != "pong" {
				t.Fatalf("ping answered %v", f.text)
			}
			break
		}
	}
	// SIGINT ends the foreground command, not the shell.
	stdin(ctx, t, c, "sleep 30\n")
	waitForProcess(t, "sleep\x0030\x00") // the shell must have started sleep before the signal
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"signal","signal":"SIGINT"}`))
	stdin(ctx, t, c, "echo after-$?\n")
	readUntil(ctx, t, c, "after-130")

	var st struct {
		SessionID    string `json:"session_id"`
		Running      bool   `json:"running"`
		OutputOffset int64  `json:"output_offset"`
	}
	if err := json.Unmarshal(wantStatus(t, e.do("GET", "/pty/"+id, nil), 200), &st); err != nil || !st.Running || st.OutputOffset == 0 || st.SessionID != id {
		t.Fatalf("status = %+v %v", st, err)
	}
	// Takeover: the first client is closed with 4001 and the second replays from offset 0.
	c2 := e.dialPTY(ctx, id, "?takeover=1&since=0")
	// Output sent before the eviction may still be in flight ahead of the close.
	var err error
	for err == nil {
		_, _, err = c.Read(ctx)
	}
	if websocket.CloseStatus(err) != 4001 {
		t.Fatalf("evicted client: %v, want close status 4001", err)
	}
	f := readFrame(ctx, t, c2)
	if f.channel != 0x03 || binary.BigEndian.Uint64(f.data[:8]) != 0 || !strings.Contains(string(f.data[8:]), "after-130") {
		t.Fatalf("replay frame = %d %q", f.channel, f.data)
	}
	if f := readFrame(ctx, t, c2); f.text["type"] != "connected" {
		t.Fatalf("after replay: %+v", f)
	}
	stdin(ctx, t, c2, "exit 7\n")
	for {
		if f := readFrame(ctx, t, c2); f.text != nil {
			if f.text["type"] != "exit" || f.text["exit_code"] != float64(7) {
				t.Fatalf("exit frame = %v", f.text)
			}
			break
		}
	}
	wantStatus(t, e.do("DELETE", "/pty/"+id, nil), 200)
	wantError(t, e.do("GET", "/pty/"+id, nil), 404, "CONTEXT_NOT_FOUND")
	wantError(t, e.do("DELETE", "/pty/"+id, nil), 404, "CONTEXT_NOT_FOUND")
}

func TestPTYPipeModeAndCommand(t *testing.T) {
	e := newEnv(t, execd.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := e.newPTY(map[string]string{"command": "read l; echo out-$l; echo err-$l >&2"})
	c := e.dialPTY(ctx, id, "?pty=0")
	if f := readFrame(ctx, t, c); f.text["mode"] != "pipe" {
		t.Fatalf("first frame = %+v", f)
	}
	stdin(ctx, t, c, "x\n")
	got := map[byte]string{}
	for {
		f := readFrame(ctx, t, c)
		if f.text != nil {
			if f.text["type"] != "exit" || f.text["exit_code"] != float64(0) {
				t.Fatalf("frame %v", f.text)
			}
			break
		}
		got[f.channel] += string(f.data)
	}
	if got[1] != "out-x\n" || got[2] != "err-x\n" {
		t.Fatalf("pipe output = %q", got)
	}
}

// waitForProcess polls /proc until a process whose command line starts with
// cmdline (NUL-separated) runs, for up to 10 s.
func waitForProcess(t *testing.T, cmdline string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.HasPrefix(string(b), cmdline) {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no process %q within 10 s", cmdline)
}

// TestPTYTokenInQuery: the terminal's WebSocket takes the access token as
// ?token= (a browser's WebSocket cannot set headers; the TypeScript SDKs do
// so), and no other route does.
func TestPTYTokenInQuery(t *testing.T) {
	e := newEnv(t, execd.Config{Token: "s3cret"})
	var created struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(wantStatus(t, e.do("POST", "/pty", map[string]any{}, execd.TokenHeader, "s3cret"), http.StatusCreated), &created); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	base := "ws" + strings.TrimPrefix(e.http.URL, "http") + "/pty/" + created.SessionID + "/ws"
	for _, q := range []string{"", "?token=wrong", "?token="} {
		if c, resp, err := websocket.Dial(ctx, base+q, nil); err == nil {
			c.CloseNow()
			t.Fatalf("dial %q: connected, want 401", q)
		} else if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("dial %q: %v (%v), want 401", q, err, resp)
		}
	}
	wantUnauthorized(t, e.do("GET", "/ping?token=s3cret", nil))
	wantUnauthorized(t, e.do("GET", "/pty/"+created.SessionID+"?token=s3cret", nil))

	c := e.dialPTY(ctx, created.SessionID, "?token=s3cret")
	defer c.CloseNow()
	if f := readFrame(ctx, t, c); f.text["type"] != "connected" {
		t.Fatalf("first frame = %+v", f)
	}
	stdin(ctx, t, c, "echo pty-$((6*7))\n")
	readUntil(ctx, t, c, "pty-42")
}

// TestSelfProxy: /proxy/44772/{rest} is execd's own {rest}, the token
// checked as on any route (?token= on the terminal's socket included), as
// the Docker runtime's execd endpoint ({host}:{port}/proxy/44772) needs.
func TestSelfProxy(t *testing.T) {
	e := newEnv(t, execd.Config{Token: "s3cret"})
	wantStatus(t, e.do("GET", "/proxy/44772/ping", nil, execd.TokenHeader, "s3cret"), http.StatusOK)
	wantUnauthorized(t, e.do("GET", "/proxy/44772/ping", nil))
	wantStatus(t, e.do("GET", "/proxy/447720/ping", nil, execd.TokenHeader, "s3cret"), http.StatusBadRequest) // a port, not execd
	var created struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(wantStatus(t, e.do("POST", "/proxy/44772/pty", map[string]any{}, execd.TokenHeader, "s3cret"), http.StatusCreated), &created); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.http.URL, "http")+"/proxy/44772/pty/"+created.SessionID+"/ws?token=s3cret", nil)
	if err != nil {
		t.Fatalf("dial the terminal through /proxy/44772: %v (%v)", err, resp)
	}
	defer c.CloseNow()
	if f := readFrame(ctx, t, c); f.text["type"] != "connected" {
		t.Fatalf("first frame = %+v", f)
	}
	stdin(ctx, t, c, "echo self-$((6*7))\n")
	readUntil(ctx, t, c, "self-42")
}
