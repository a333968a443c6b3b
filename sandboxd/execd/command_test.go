package execd_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/alineo-labs/alineo/sandboxd/execd"
	"github.com/alineo-labs/alineo/testenv"
)

func TestPingAndAuth(t *testing.T) {
	e := newEnv(t, execd.Config{Token: "s3cret"})
	if b := wantStatus(t, e.do("GET", "/ping", nil, execd.TokenHeader, "s3cret"), 200); len(b) != 0 {
		t.Fatalf("ping body = %q, want empty", b)
	}
	wantUnauthorized(t, e.do("GET", "/ping", nil))
	wantUnauthorized(t, e.do("GET", "/ping", nil, execd.TokenHeader, "wrong"))
	wantUnauthorized(t, e.do("POST", "/command", `{"command":"true"}`))
	wantUnauthorized(t, e.do("GET", "/files/info?path=/", nil))
	wantNotFoundPage(t, e.do("GET", "/nope", nil, execd.TokenHeader, "s3cret"))
	wantNotFoundPage(t, e.do("PUT", "/files/info", nil, execd.TokenHeader, "s3cret"))
	wantNotFoundPage(t, e.do("GET", "/command/a/b", nil, execd.TokenHeader, "s3cret"))
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := execd.New(execd.Config{Root: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Fatal("New with a missing root: err = nil, want an error")
	}
	if _, err := execd.New(execd.Config{MaxLine: 3}); !errors.Is(err, execd.ErrInvalid) {
		t.Fatalf("New with MaxLine 3: err = %v, want ErrInvalid", err)
	}
}

func TestCommandExitCodes(t *testing.T) {
	e := newEnv(t, execd.Config{})
	res := e.run("echo hello; echo err >&2; exit 3")
	if got, want := res.exitCode, 3; got != want {
		t.Fatalf("exit = %d, want %d", got, want)
	}
	if got, want := res.evalue, "3"; got != want {
		t.Fatalf("evalue = %q, want %q", got, want)
	}
	if len(res.stdout) != 1 || res.stdout[0] != "hello" || len(res.stderr) != 1 || res.stderr[0] != "err" {
		t.Fatalf("stdout %q stderr %q, want [hello] [err]", res.stdout, res.stderr)
	}
	if len(res.trace) != 1 || res.trace[0] != "exit status 3" {
		t.Fatalf("traceback = %q, want [exit status 3]", res.trace)
	}
	if got := res.events[len(res.events)-1].Error.Ename; got != "CommandExecError" {
		t.Fatalf("ename = %q, want CommandExecError", got)
	}
	ok := e.run("echo fine")
	if last := ok.events[len(ok.events)-1]; last.Type != "execution_complete" || last.Error != nil {
		t.Fatalf("last event = %+v, want execution_complete", last)
	}
	if ok.events[1].Type != "ping" {
		t.Fatalf("second event = %+v, want ping", ok.events[1])
	}
}

func TestCommandValidation(t *testing.T) {
	e := newEnv(t, execd.Config{})
	for _, tc := range []struct {
		name string
		body string
	}{
		{"bad json", `{"command":`},
		{"empty body", ``},
		{"missing command", `{"cwd":"/"}`},
		{"blank command", `{"command":"  "}`},
		{"missing cwd", `{"command":"true","cwd":"/does/not/exist"}`},
		{"cwd is a file", `{"command":"true","cwd":"/f"}`},
		{"gid without uid", `{"command":"true","gid":1}`},
		{"negative timeout", `{"command":"true","timeout":-1}`},
		{"bad env name", `{"command":"true","envs":{"A=B":"x"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(e.root, "f"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			wantError(t, e.do("POST", "/command", tc.body), 400, "INVALID_REQUEST_BODY")
		})
	}
}

func TestCommandCwdAndEnvs(t *testing.T) {
	e := newEnv(t, execd.Config{Env: []string{"PATH=" + os.Getenv("PATH"), "BASE=base", "OVER=old"}})
	if err := os.MkdirAll(filepath.Join(e.root, "proj", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := e.stream("/command", map[string]any{
		"command": `touch here; echo "$BASE $OVER $EXTRA"`,
		"cwd":     "/proj/../proj/dir",
		"envs":    map[string]string{"OVER": "new", "EXTRA": "x y"},
	})
	if got, want := strings.Join(res.stdout, "|"), "base new x y"; got != want {
		t.Fatalf("stdout = %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(e.root, "proj", "dir", "here")); err != nil {
		t.Fatalf("command did not run in cwd under Root: %v", err)
	}
	// Without cwd, commands run in Root.
	e.run("touch at-root")
	if _, err := os.Stat(filepath.Join(e.root, "at-root")); err != nil {
		t.Fatalf("default cwd is not Root: %v", err)
	}
}

func TestCommandLineTerminators(t *testing.T) {
	e := newEnv(t, execd.Config{})
	res := e.run(`printf 'a\r\nb\rc\n\nlast'`)
	if got, want := strings.Join(res.stdout, "|"), "a|b|c|\n|last"; got != want {
		t.Fatalf("stdout = %q, want %q", got, want)
	}
}

func TestCommandNonUTF8(t *testing.T) {
	e := newEnv(t, execd.Config{})
	res := e.run(`printf 'ok\377\376x\n'; printf 'caf\303\251\n'`)
	var evs []streamEvent
	for _, ev := range res.events {
		if ev.Type == "stdout" {
			evs = append(evs, ev)
		}
	}
	if len(evs) != 2 {
		t.Fatalf("stdout events = %+v, want 2", evs)
	}
	// The real execd marshals the raw bytes with encoding/json: one U+FFFD per invalid byte.
	if got, want := evs[0].Text, "ok\uFFFD\uFFFDx"; got != want {
		t.Fatalf("text = %q, want %q", got, want)
	}
	raw, err := base64.StdEncoding.DecodeString(evs[0].Data)
	if err != nil || string(raw) != "ok\xff\xfex" {
		t.Fatalf("data = %q (%v), want the exact bytes", raw, err)
	}
	if evs[1].Text != "café" || evs[1].Data != "" {
		t.Fatalf("valid UTF-8 event = %+v, want text café and no data", evs[1])
	}
}

// streamPieces runs cmd and returns its stdout events and the longest event line on the wire.
func (e *env) streamPieces(cmd string) ([]streamEvent, int) {
	e.t.Helper()
	resp := e.do("POST", "/command", map[string]any{"command": cmd})
	defer resp.Body.Close()
	sr := newStreamReader(resp.Body)
	var out []streamEvent
	for {
		ev, err := sr.Next()
		if err == io.EOF {
			return out, sr.longest
		}
		if err != nil {
			e.t.Fatal(err)
		}
		if ev.Type == "stdout" {
			out = append(out, ev)
		}
	}
}

// rawBytes returns the exact bytes of an output event: data when present, else text.
func rawBytes(t *testing.T, ev streamEvent) []byte {
	if ev.Data == "" {
		return []byte(ev.Text)
	}
	b, err := base64.StdEncoding.DecodeString(ev.Data)
	if err != nil {
		t.Fatalf("data %q: %v", ev.Data, err)
	}
	return b
}

func TestCommandLongLineIsSplit(t *testing.T) {
	t.Run("default 4MiB", func(t *testing.T) {
		e := newEnv(t, execd.Config{})
		const n = 4<<20 + 12345
		evs, longest := e.streamPieces(fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a; echo; echo next`, n))
		if len(evs) < 3 || evs[len(evs)-1].Text != "next" {
			t.Fatalf("got %d stdout events, want the line in pieces, then next", len(evs))
		}
		var joined strings.Builder
		for _, ev := range evs[:len(evs)-1] {
			joined.WriteString(ev.Text)
		}
		if joined.Len() != n || strings.Trim(joined.String(), "a") != "" {
			t.Fatalf("pieces total %d bytes, want %d a's", joined.Len(), n)
		}
		// The official Go SDK reads event lines of at most 4 MiB.
		if longest > 4<<20 {
			t.Fatalf("longest event line = %d bytes, want <= 4 MiB", longest)
		}
	})
	t.Run("utf8 boundary", func(t *testing.T) {
		e := newEnv(t, execd.Config{MaxLine: 300})
		line := strings.Repeat("aé€😀<\"", 60)
		evs, longest := e.streamPieces("printf '%s\\n' '" + line + "'")
		var joined strings.Builder
		for i, ev := range evs {
			if !utf8.ValidString(ev.Text) || ev.Data != "" {
				t.Fatalf("piece %d is not valid UTF-8", i)
			}
			joined.WriteString(ev.Text)
		}
		if joined.String() != line {
			t.Fatalf("joined pieces differ from the line (%d vs %d bytes)", joined.Len(), len(line))
		}
		if len(evs) < 2 || longest > 300 {
			t.Fatalf("%d pieces, longest line %d; want several of at most 300 bytes", len(evs), longest)
		}
	})
	t.Run("binary", func(t *testing.T) {
		e := newEnv(t, execd.Config{MaxLine: 4096})
		evs, longest := e.streamPieces(`head -c 60000 /dev/urandom | tr -d '\n\r' > bin; cat bin`)
		want, err := os.ReadFile(filepath.Join(e.root, "bin"))
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		for _, ev := range evs {
			got = append(got, rawBytes(t, ev)...)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("rebuilt %d bytes, want the %d bytes written", len(got), len(want))
		}
		if longest > 4096 {
			t.Fatalf("longest event line = %d, want <= 4096", longest)
		}
	})
}

func TestCommandBashScript(t *testing.T) {
	e := newEnv(t, execd.Config{})
	script := `set -euo pipefail
greet() { echo "hello $1"; }
for i in 1 2 3; do
  greet "$i"
done
x=$(echo ok | tr a-z A-Z)
echo "$x"
false | true
echo unreachable`
	res := e.run(script)
	if got, want := strings.Join(res.stdout, "|"), "hello 1|hello 2|hello 3|OK"; got != want {
		t.Fatalf("stdout = %q, want %q", got, want)
	}
	if res.exitCode != 1 {
		t.Fatalf("exit = %d, want 1 (pipefail)", res.exitCode)
	}
}

func TestCommandTrailingPartialLine(t *testing.T) {
	e := newEnv(t, execd.Config{})
	res := e.run(`printf 'one\ntwo'; printf 'err-no-newline' >&2`)
	if got, want := strings.Join(res.stdout, "|"), "one|two"; got != want {
		t.Fatalf("stdout = %q, want %q", got, want)
	}
	if got, want := strings.Join(res.stderr, "|"), "err-no-newline"; got != want {
		t.Fatalf("stderr = %q, want %q", got, want)
	}
}

func TestCommandPings(t *testing.T) {
	e := newEnv(t, execd.Config{PingInterval: 50 * time.Millisecond})
	res := e.run("sleep 0.4")
	pings := 0
	for _, ev := range res.events {
		if ev.Type == "ping" {
			pings++
		}
	}
	if pings < 3 {
		t.Fatalf("pings = %d, want >= 3 over 400 ms at a 50 ms interval", pings)
	}
}

func processGone(pid int) error {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	// A zombie is dead too: only its reaper has not collected it yet.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
			return nil
		}
	}
	return fmt.Errorf("process %d still alive", pid)
}

func TestCommandTimeoutKillsProcessGroup(t *testing.T) {
	e := newEnv(t, execd.Config{})
	start := time.Now()
	res := e.stream("/command", map[string]any{"command": "sleep 30 & echo $!; wait", "timeout": 300})
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("timeout took %v", el)
	}
	if res.evalue != "-1" || len(res.trace) != 1 || res.trace[0] != "signal: killed" {
		t.Fatalf("error evalue %q trace %q, want -1 [signal: killed]", res.evalue, res.trace)
	}
	if len(res.stdout) != 1 {
		t.Fatalf("stdout = %q, want the child pid", res.stdout)
	}
	pid, _ := strconv.Atoi(res.stdout[0])
	testenv.Eventually(t, 5*time.Second, func() error { return processGone(pid) })
}

func TestCommandClientDisconnectKills(t *testing.T) {
	e := newEnv(t, execd.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := strings.NewReader(`{"command":"sleep 60 & echo $! $$; wait"}`)
	req, _ := http.NewRequestWithContext(ctx, "POST", e.http.URL+"/command", body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sr := newStreamReader(resp.Body)
	var pids []int
	for len(pids) == 0 {
		ev, err := sr.Next()
		if err != nil {
			t.Fatalf("read stream: %v", err)
		}
		if ev.Type == "stdout" {
			for _, f := range strings.Fields(ev.Text) {
				p, _ := strconv.Atoi(f)
				pids = append(pids, p)
			}
		}
	}
	cancel()
	for _, pid := range pids {
		testenv.Eventually(t, 5*time.Second, func() error { return processGone(pid) })
	}
}

type status struct {
	ID         string  `json:"id"`
	Content    string  `json:"content"`
	Running    bool    `json:"running"`
	ExitCode   *int    `json:"exit_code"`
	Error      string  `json:"error"`
	StartedAt  string  `json:"started_at"`
	FinishedAt *string `json:"finished_at"`
}

func (e *env) status(id string) status {
	e.t.Helper()
	var st status
	if err := json.Unmarshal(wantStatus(e.t, e.do("GET", "/command/status/"+id, nil), 200), &st); err != nil {
		e.t.Fatal(err)
	}
	return st
}

func TestBackgroundCommandStatusAndLogs(t *testing.T) {
	e := newEnv(t, execd.Config{})
	cmd := "echo bg-start; echo bg-err >&2; read x < /dev/null; sleep 0.3; echo bg-end; exit 7"
	res := e.stream("/command", map[string]any{"command": cmd, "background": true})
	for _, ev := range res.events {
		if ev.Type != "init" && ev.Type != "ping" && ev.Type != "execution_complete" {
			t.Fatalf("background stream has a %q event", ev.Type)
		}
	}
	if st := e.status(res.id); st.Content != cmd || st.StartedAt == "" {
		t.Fatalf("status = %+v", st)
	}
	var st status
	testenv.Eventually(t, 10*time.Second, func() error {
		st = e.status(res.id)
		if st.Running {
			return errors.New("still running")
		}
		return nil
	})
	if st.ExitCode == nil || *st.ExitCode != 7 || st.Error != "exit status 7" || st.FinishedAt == nil {
		t.Fatalf("final status = %+v, want exit 7", st)
	}
	resp := e.do("GET", "/command/"+res.id+"/logs", nil)
	full := string(wantStatus(t, resp, 200))
	if want := "bg-start\nbg-err\nbg-end\n"; full != want {
		t.Fatalf("logs = %q, want %q", full, want)
	}
	if got, want := resp.Header.Get(execd.TailCursorHeader), strconv.Itoa(len(full)); got != want {
		t.Fatalf("cursor header = %q, want %q", got, want)
	}
	if got, want := string(wantStatus(t, e.do("GET", "/command/"+res.id+"/logs?cursor=1", nil), 200)), full[1:]; got != want {
		t.Fatalf("logs from cursor 1 = %q, want %q", got, want)
	}
	if got := wantStatus(t, e.do("GET", fmt.Sprintf("/command/%s/logs?cursor=%d", res.id, len(full)+10), nil), 200); len(got) != 0 {
		t.Fatalf("logs past the end = %q, want empty", got)
	}
	wantError(t, e.do("GET", "/command/"+res.id+"/logs?cursor=-1", nil), 400, "INVALID_REQUEST_BODY")
	wantError(t, e.do("GET", "/command/"+res.id+"/logs?cursor=x", nil), 400, "INVALID_REQUEST_BODY")
	// As the real execd: logs of an unknown id 400, status 404, both INVALID_REQUEST_BODY.
	wantError(t, e.do("GET", "/command/nope/logs", nil), 400, "INVALID_REQUEST_BODY")
	wantError(t, e.do("GET", "/command/status/nope", nil), 404, "INVALID_REQUEST_BODY")

	fg := e.run("echo fg")
	wantError(t, e.do("GET", "/command/"+fg.id+"/logs", nil), 400, "INVALID_REQUEST_BODY")
	if st := e.status(fg.id); st.Running || st.ExitCode == nil || *st.ExitCode != 0 {
		t.Fatalf("foreground status = %+v, want finished with 0", st)
	}
}

func TestInterruptCommand(t *testing.T) {
	e := newEnv(t, execd.Config{})
	res := e.stream("/command", map[string]any{"command": "sleep 30", "background": true})
	wantStatus(t, e.do("DELETE", "/command?id="+res.id, nil), 200)
	testenv.Eventually(t, 10*time.Second, func() error {
		if st := e.status(res.id); st.Running {
			return errors.New("still running")
		}
		return nil
	})
	st := e.status(res.id)
	if st.ExitCode == nil || *st.ExitCode != -1 || st.Error != "signal: terminated" {
		t.Fatalf("status = %+v, want exit -1, signal: terminated", st)
	}
	wantError(t, e.do("DELETE", "/command?id=nope", nil), 500, "RUNTIME_ERROR")
	wantError(t, e.do("DELETE", "/command", nil), 400, "MISSING_QUERY")
}

func TestBackgroundTimeout(t *testing.T) {
	e := newEnv(t, execd.Config{})
	res := e.stream("/command", map[string]any{"command": "sleep 30", "background": true, "timeout": 200})
	testenv.Eventually(t, 10*time.Second, func() error {
		if st := e.status(res.id); st.Running {
			return errors.New("still running")
		}
		return nil
	})
	if st := e.status(res.id); st.Error != "signal: killed" {
		t.Fatalf("status = %+v, want signal: killed", st)
	}
}

func TestCloseKillsCommands(t *testing.T) {
	s, err := execd.New(execd.Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: s, root: t.TempDir()}
	e.http = newHTTPServer(t, s)
	res := e.stream("/command", map[string]any{"command": "sleep 60 & echo $!; wait", "background": true})
	var pid int
	testenv.Eventually(t, 5*time.Second, func() error {
		b := wantStatus(t, e.do("GET", "/command/"+res.id+"/logs", nil), 200)
		if _, err := fmt.Sscan(string(b), &pid); err != nil {
			return fmt.Errorf("no pid in logs yet: %q", b)
		}
		return nil
	})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close waited for the shell; its killed child is not ours to reap, so give it a moment.
	testenv.Eventually(t, 5*time.Second, func() error { return processGone(pid) })
	wantError(t, e.do("GET", "/ping", nil), 503, "UNAVAILABLE")
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestCommandCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch uid; run the tests as root")
	}
	e := newEnv(t, execd.Config{})
	// The unprivileged user must be able to enter Root.
	for _, d := range []string{e.root, filepath.Dir(e.root)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	res := e.stream("/command", map[string]any{"command": "id -u; id -g", "uid": 65534, "gid": 65533})
	if got, want := strings.Join(res.stdout, " "), "65534 65533"; got != want {
		t.Fatalf("ids = %q, want %q", got, want)
	}
}

func TestCommandStartFailureIsJSONError(t *testing.T) {
	e := newEnv(t, execd.Config{Shell: "/does/not/exist/sh"})
	resp := e.do("POST", "/command", `{"command":"true"}`)
	wantError(t, resp, 500, "RUNTIME_ERROR")
	_ = io.Discard
}

// TestSlowClientLosesNoOutput reads a large output slowly: output the command wrote before it
// exited must all arrive even though the stream is drained long after the exit.
func TestSlowClientLosesNoOutput(t *testing.T) {
	e := newEnv(t, execd.Config{})
	resp := e.do("POST", "/command", `{"command":"seq 1 60000"}`)
	defer resp.Body.Close()
	sr := newStreamReader(resp.Body)
	n := 0
	for {
		ev, err := sr.Next()
		if err != nil {
			t.Fatalf("after %d lines: %v", n, err)
		}
		if ev.Type == "stdout" {
			n++
			if ev.Text != strconv.Itoa(n) {
				t.Fatalf("line %d = %q", n, ev.Text)
			}
			if n%6000 == 0 {
				time.Sleep(50 * time.Millisecond) // a slow consumer, not a wait for a condition
			}
		}
		if ev.Type == "execution_complete" || ev.Type == "error" {
			break
		}
	}
	if n != 60000 {
		t.Fatalf("got %d lines, want 60000", n)
	}
}

func TestEnvDefaults(t *testing.T) {
	e := newEnv(t, execd.Config{Env: []string{"FOO=bar", "HOME=/home/x"}})
	res := e.run(`echo "$FOO|$HOME|$LANG"; command -v sh >/dev/null && echo has-path`)
	if got, want := strings.Join(res.stdout, " "), "bar|/home/x|C.UTF-8 has-path"; got != want {
		t.Fatalf("env = %q, want %q", got, want)
	}
}

// TestTimeoutKillsEscapedDescendants: a child that left the process group (setsid) is still
// part of the command's tree and dies on timeout.
func TestTimeoutKillsEscapedDescendants(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid(1) not installed")
	}
	e := newEnv(t, execd.Config{})
	res := e.stream("/command", map[string]any{"command": "setsid sleep 60 & echo $!; wait", "timeout": 300})
	if res.evalue != "-1" || len(res.stdout) != 1 {
		t.Fatalf("evalue %q stdout %q", res.evalue, res.stdout)
	}
	pid, _ := strconv.Atoi(res.stdout[0])
	testenv.Eventually(t, 5*time.Second, func() error { return processGone(pid) })
}

// TestNoGoroutineLeak runs every kind of command, then closes the server and checks that the
// goroutines it started are gone.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		s, err := execd.New(execd.Config{Root: t.TempDir(), PingInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s)
		e := &env{t: t, srv: s, http: hs}
		e.run("echo fg; sleep 0.05")
		e.stream("/command", map[string]any{"command": "sleep 30", "background": true})
		e.stream("/command", map[string]any{"command": "sleep 30", "timeout": 50})
		id := e.newSession(nil)
		e.stream("/session/"+id+"/run", map[string]any{"command": "export A=1"})
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/command", strings.NewReader(`{"command":"echo x; sleep 30"}`))
		if resp, err := hs.Client().Do(req); err == nil {
			_, _ = newStreamReader(resp.Body).Next()
			cancel()
			resp.Body.Close()
		}
		cancel()
		hs.Client().CloseIdleConnections()
		hs.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > before {
			return fmt.Errorf("%d goroutines, %d before", n, before)
		}
		return nil
	})
}

// TestCommandsRunAtTheirOOMScore: a command and a child it forks at once both
// have the configured oom_score_adj, not execd's.
func TestCommandsRunAtTheirOOMScore(t *testing.T) {
	self, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Skip(err)
	}
	adj := 900
	if strings.TrimSpace(string(self)) == "900" {
		adj = 950
	}
	e := newEnv(t, execd.Config{OOMScoreAdj: adj})
	want := strconv.Itoa(adj)
	for i := range 40 {
		res := e.run("(cat /proc/self/oom_score_adj); cat /proc/$$/oom_score_adj")
		if res.exitCode != 0 || len(res.stdout) != 2 || res.stdout[0] != want || res.stdout[1] != want {
			t.Fatalf("run %d: exit %d, stdout %q, want the child and the shell at %s", i, res.exitCode, res.stdout, want)
		}
	}
}
