package api_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// screenshotDir is where the Chromium tests write their screenshots:
// go test ./api -run Chromium -args -screenshots DIR (or ALINEO_SCREENSHOTS=DIR);
// by default each test's temp dir.
var screenshotDir = flag.String("screenshots", os.Getenv("ALINEO_SCREENSHOTS"), "write the dashboard tests' screenshots (PNG) to this directory")

// browser is headless Chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: commands on fd 3, answers on fd 4, NUL-delimited).
type browser struct {
	cmd  *exec.Cmd
	in   *os.File // our end of fd 3
	out  *bufio.Reader
	mu   sync.Mutex
	next int
}

func chromium(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/chromium"); serr != nil {
			testenv.SkipOrFail(t, "no chromium (apt-get install -y chromium)")
		}
		path = "/usr/bin/chromium"
	}
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	resR, resW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--window-size=1280,900", "--hide-scrollbars", "--font-render-hinting=none",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{cmdR, resW}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		testenv.SkipOrFail(t, "start chromium: "+err.Error())
	}
	cmdR.Close()
	resW.Close()
	b := &browser{cmd: cmd, in: cmdW, out: bufio.NewReader(resR)}
	t.Cleanup(func() {
		b.in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		resR.Close()
		if t.Failed() {
			t.Logf("chromium stderr (tail): %s", tail(stderr.String(), 2000))
		}
	})
	return b
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// call sends one command and waits for its answer (events are skipped).
func (b *browser) call(session, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	id := b.next
	msg := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	if _, err := b.in.Write(append(data, 0)); err != nil {
		return nil, err
	}
	for {
		raw, err := b.out.ReadBytes(0)
		if err != nil {
			return nil, fmt.Errorf("read devtools: %w", err)
		}
		var res struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(raw[:len(raw)-1], &res); err != nil {
			return nil, err
		}
		if res.ID != id {
			continue
		}
		if res.Error != nil {
			return nil, errors.New(method + ": " + res.Error.Message)
		}
		return res.Result, nil
	}
}

// eval evaluates a JavaScript expression in the page and returns its value as a string.
func (b *browser) eval(session, expr string) (string, error) {
	raw, err := b.call(session, "Runtime.evaluate", map[string]any{"expression": "String(" + expr + ")", "returnByValue": true})
	if err != nil {
		return "", err
	}
	var r struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", err
	}
	return r.Result.Value, nil
}

// open opens url in a new tab and returns the tab's session.
func (b *browser) open(t testing.TB, url string) string {
	t.Helper()
	raw, err := b.call("", "Target.createTarget", map[string]any{"url": url})
	if err != nil {
		t.Fatal(err)
	}
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := json.Unmarshal(raw, &target); err != nil {
		t.Fatal(err)
	}
	raw, err = b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	if err != nil {
		t.Fatal(err)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(raw, &att); err != nil {
		t.Fatal(err)
	}
	return att.SessionID
}

// navigate loads url in the tab and waits until its script has run
// (body[data-ready]) or, for pages without it, the document is complete.
func (b *browser) navigate(t testing.TB, s, url string) {
	t.Helper()
	if _, err := b.call(s, "Page.navigate", map[string]any{"url": url}); err != nil {
		t.Fatal(err)
	}
	b.ready(t, s, url)
}

// ready waits until the tab shows url with its script run.
func (b *browser) ready(t testing.TB, s, url string) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, func() error {
		v, err := b.eval(s, `location.href + " " + document.readyState + " " + (document.body && document.body.getAttribute("data-ready"))`)
		if err != nil {
			return err
		}
		if v != url+" complete 1" {
			return fmt.Errorf("tab at %q, want %q loaded", v, url)
		}
		return nil
	})
}

// waitEval polls expr until it evaluates to want.
func (b *browser) waitEval(t testing.TB, s, expr, want string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		v, err := b.eval(s, expr)
		if err != nil {
			return err
		}
		if v != want {
			return fmt.Errorf("%s = %q, want %q", expr, v, want)
		}
		return nil
	})
}

// mustEval evaluates expr and fails t on an error.
func (b *browser) mustEval(t testing.TB, s, expr string) string {
	t.Helper()
	v, err := b.eval(s, expr)
	if err != nil {
		t.Fatalf("eval %s: %v", expr, err)
	}
	return v
}

// signIn signs in through the login form, as a user does: the cookie
// authorizes reads, the tab keeps the token for the bearer header of writes.
func (b *browser) signIn(t testing.TB, s, base, tok string) {
	t.Helper()
	b.navigate(t, s, base+"/login")
	b.mustEval(t, s, `(document.getElementById("login-token").value = `+strconv.Quote(tok)+`, document.getElementById("login-form").requestSubmit(), "")`)
	b.ready(t, s, base+"/")
}

// screenshot writes a full-page PNG of the tab to the screenshot directory
// (the -screenshots flag, ALINEO_SCREENSHOTS, or the test's temp dir).
func (b *browser) screenshot(t testing.TB, s, name string) string {
	t.Helper()
	dir := *screenshotDir
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := b.call(s, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true})
	if err != nil {
		t.Fatal(err)
	}
	var shot struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(raw, &shot); err != nil {
		t.Fatal(err)
	}
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot %s is not a PNG (%d bytes)", name, len(png))
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", path, len(png))
	return path
}

// TestDashboardInChromium: the sandbox page renders its timeline in a real
// browser (signed in through /login's cookie) and its live tail shows a new
// event within 1 s of the event being emitted.
func TestDashboardInChromium(t *testing.T) {
	e := newEnv(t, token)
	e.session("ui", "sbui", 2, false)
	e.waitProjected()
	b := chromium(t)

	raw, err := b.call("", "Target.createTarget", map[string]any{"url": e.srv.URL + "/login?token=" + url.QueryEscape(token)})
	if err != nil {
		t.Fatal(err)
	}
	var target struct {
		TargetID string `json:"targetId"`
	}
	_ = json.Unmarshal(raw, &target)
	raw, err = b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	if err != nil {
		t.Fatal(err)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(raw, &att)
	s := att.SessionID
	// The login redirects to the list page, which shows the sandbox.
	testenv.Eventually(t, 15*time.Second, func() error {
		v, err := b.eval(s, `document.querySelectorAll('tr.sandbox[data-id="sbui"]').length`)
		if err != nil || v != "1" {
			return fmt.Errorf("list page rows = %q, %v", v, err)
		}
		return nil
	})
	if _, err := b.call(s, "Page.navigate", map[string]any{"url": e.srv.URL + "/ui/sandboxes/ui/sbui"}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, func() error {
		rows, err := b.eval(s, `document.querySelectorAll('#tail-body tr.event').length`)
		if err != nil {
			return err
		}
		st, err := b.eval(s, `document.getElementById('live-status').textContent`)
		if err != nil {
			return err
		}
		if rows != "7" || st != "live" {
			return fmt.Errorf("timeline rows %q (want 7), live status %q", rows, st)
		}
		return nil
	})

	emitted := time.Now().UnixMilli()
	e.publish("ui", "sbui", events.New(0, "", "", 3, events.ExecStarted, events.ExecStartedPayload{Kind: events.KindCommand, Cmd: "echo from-the-test"}))
	seq := e.ledger.LastSeq()
	var receivedAt int64
	testenv.Eventually(t, 5*time.Second, func() error {
		v, err := b.eval(s, fmt.Sprintf(`(document.querySelector('tr.live[data-seq="%d"]') || {getAttribute: function () { return "" }}).getAttribute('data-received-at')`, seq))
		if err != nil {
			return err
		}
		if v == "" {
			return fmt.Errorf("event %d not in the timeline yet", seq)
		}
		receivedAt, err = strconv.ParseInt(v, 10, 64)
		return err
	})
	if lat := receivedAt - emitted; lat > 1000 {
		t.Fatalf("new event shown %d ms after it was emitted, want within 1000 ms", lat)
	} else {
		t.Logf("new event shown %d ms after it was emitted", lat)
	}
	text, err := b.eval(s, fmt.Sprintf(`document.querySelector('tr.live[data-seq="%d"]').textContent`, seq))
	if err != nil || !bytes.Contains([]byte(text), []byte("from-the-test")) || !bytes.Contains([]byte(text), []byte("exec.started")) {
		t.Errorf("live row = %q, %v; want the event and its command", text, err)
	}
}
