package sandboxd_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

type timedEvent struct {
	streamEvent
	at time.Duration
}

// streamCommand posts command to execd and returns every event with the time
// it arrived.
func streamCommand(t *testing.T, execdURL, token, command string) []timedEvent {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"command": command})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", execdURL+"/command", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(sandboxd.ExecdTokenHeader, token)
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("status %d %s: %s", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	var evs []timedEvent
	br := bufio.NewReader(res.Body)
	for {
		line, err := br.ReadBytes('\n')
		if l := bytes.TrimSpace(line); len(l) > 0 {
			var ev streamEvent
			if err := json.Unmarshal(l, &ev); err != nil {
				t.Fatalf("event %q: %v", l, err)
			}
			evs = append(evs, timedEvent{ev, time.Since(start)})
			if ev.Type == "error" || ev.Type == "execution_complete" {
				return evs
			}
		}
		if err != nil {
			t.Fatalf("stream ended without a terminal event (%v): %+v", err, evs)
		}
	}
}

// TestCommandEndToEnd runs a command through a real isolated sandbox, directly
// and through the server proxy, and checks the stream arrives event by event.
func TestCommandEndToEnd(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)
	for _, proxy := range []bool{false, true} {
		t.Run(fmt.Sprintf("proxy=%v", proxy), func(t *testing.T) {
			u, tok := execdEndpoint(t, base, id, proxy)
			evs := streamCommand(t, u, tok, "echo one; sleep 0.5; echo two; echo err >&2; exit 3")
			if evs[0].Type != "init" || evs[0].Text == "" {
				t.Errorf("first event = %+v, want init with the command id", evs[0])
			}
			var one, last timedEvent
			var out, errs []string
			for _, ev := range evs {
				switch ev.Type {
				case "stdout":
					out = append(out, ev.Text)
					if ev.Text == "one" {
						one = ev
					}
				case "stderr":
					errs = append(errs, ev.Text)
				}
				last = ev
			}
			if strings.Join(out, ",") != "one,two" || strings.Join(errs, ",") != "err" {
				t.Errorf("stdout %q stderr %q", out, errs)
			}
			if last.Type != "error" || last.Error == nil || last.Error.Evalue != "3" {
				t.Errorf("terminal event = %+v, want error with evalue 3", last)
			}
			if gap := last.at - one.at; gap < 400*time.Millisecond {
				t.Errorf("\"one\" arrived %v before the end, want it streamed at once (>= 400ms before)", gap)
			}
		})
	}
}

// wsEcho is a WebSocket-style echo server run inside a sandbox: it answers
// an upgrade of /ws?x=1 with 101 and then echoes bytes. It writes its port to
// /root/port.
const wsEcho = `
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(5)
open("/root/port.tmp", "w").write(str(s.getsockname()[1]))
import os
os.rename("/root/port.tmp", "/root/port")
while True:
    c, _ = s.accept()
    data = b""
    while b"\r\n\r\n" not in data:
        d = c.recv(4096)
        if not d:
            break
        data += d
    if not data.startswith(b"GET /ws?x=1 ") or b"websocket" not in data.lower():
        c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        c.close()
        continue
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
    while True:
        d = c.recv(4096)
        if not d:
            break
        c.sendall(d)
    c.close()
`

// TestProxyWebSocket upgrades a connection through the server proxy to a
// WebSocket-style echo server in a sandbox, and checks the proxy refuses a
// port no process of the sandbox listens on, such as a host service's: for a
// sandbox on the host network and for one in its own network namespace.
func TestProxyWebSocket(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/python3"); err != nil {
		t.Skip("/usr/bin/python3 is needed in the sandbox (host fallback image)")
	}
	s, base := startServer(t, sandboxd.Config{})
	hs, hbase := startServer(t, sandboxd.Config{HostNetwork: true})
	for _, c := range []struct {
		name   string
		s      *sandboxd.Server
		base   string
		policy any
	}{
		{"host network", hs, hbase, nil},
		{"default network namespace", s, base, nil},
		{"network namespace with a policy", s, base, map[string]any{"defaultAction": "deny"}},
	} {
		t.Run(c.name, func(t *testing.T) { testProxyWebSocket(t, c.s, c.base, c.policy) })
	}
}

func testProxyWebSocket(t *testing.T, s *sandboxd.Server, base string, policy any) {
	req := map[string]any{"entrypoint": []string{"python3", "-c", wsEcho}}
	if policy != nil {
		req["networkPolicy"] = policy
	}
	id := create(t, base, req)
	waitState(t, base, id, sandboxd.StateRunning)
	var port string
	testenv.Eventually(t, 10*time.Second, func() error {
		b, err := os.ReadFile(filepath.Join(s.DataDir(), "sandboxes", id, "fs", "layers", "upper", "root", "port"))
		port = string(b)
		return err
	})

	// A host service on loopback is not reachable through the proxy.
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	r := call(t, "GET", fmt.Sprintf("%s/sandboxes/%s/proxy/%d/", base, id, host.Addr().(*net.TCPAddr).Port), nil)
	wantStatus(t, r, http.StatusBadGateway)

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /v1/sandboxes/%s/proxy/%s/ws?x=1 HTTP/1.1\r\nHost: sandboxd\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", id, port)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("status %d: %s", res.StatusCode, b)
	}
	for _, msg := range []string{"hello", "again"} {
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo = %q (%v), want %q", buf, err, msg)
		}
	}
}

// TestProxyStreamsRepeatedly runs many short command streams with pauses
// through the server proxy on one keep-alive client: each must reach its
// terminal event. (Forwarding the request body as is, about one in 40 was
// cut short: execd answers before it reads its body to the end.)
func TestProxyStreamsRepeatedly(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)
	execdURL, token := execdEndpoint(t, base, id, true)
	for i := range 40 {
		lines, code, err := runErr(context.Background(), execdURL, token, "echo a; sleep 0.03; echo b; sleep 0.03; echo c")
		if err != nil || code != 0 || strings.Join(lines, "") != "abc" {
			t.Fatalf("stream %d: lines %q, exit %d, err %v; want a b c and a terminal event", i, lines, code, err)
		}
	}
}
