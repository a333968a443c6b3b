package sandboxd_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
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

// TestProxyWebSocket upgrades a connection through the server proxy to a
// WebSocket-style echo server on a loopback port.
func TestProxyWebSocket(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	echo := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" || r.URL.Path != "/ws" || r.URL.RawQuery != "x=1" {
			http.Error(w, "want an upgrade of /ws?x=1", http.StatusBadRequest)
			return
		}
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		io.Copy(conn, rw)
	})}
	go echo.Serve(ln)
	t.Cleanup(func() { echo.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /v1/sandboxes/%s/proxy/%d/ws?x=1 HTTP/1.1\r\nHost: sandboxd\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", id, port)
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
