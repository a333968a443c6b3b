package execd_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd/execd"
)

func (e *env) newSession(body any) string {
	e.t.Helper()
	var out struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(wantStatus(e.t, e.do("POST", "/session", body), 200), &out); err != nil || out.SessionID == "" {
		e.t.Fatalf("create session: %+v %v", out, err)
	}
	return out.SessionID
}

func TestSessionCarriesExportsAndCwd(t *testing.T) {
	e := newEnv(t, execd.Config{})
	id := e.newSession(nil)
	run := func(cmd string) result {
		t.Helper()
		return e.stream("/session/"+id+"/run", map[string]any{"command": cmd})
	}
	run(`export MY_VAR=42; export SPACED="a 'b' \"c\""; NOT_EXPORTED=1; mkdir -p sub/dir; cd sub/dir`)
	res := run(`echo "$MY_VAR|$SPACED|${NOT_EXPORTED:-unset}"; pwd`)
	if len(res.stdout) != 2 {
		t.Fatalf("stdout = %q", res.stdout)
	}
	if got, want := res.stdout[0], `42|a 'b' "c"|unset`; got != want {
		t.Fatalf("env line = %q, want %q", got, want)
	}
	if got, want := res.stdout[1], filepath.Join(e.root, "sub", "dir"); got != want {
		t.Fatalf("pwd = %q, want %q", got, want)
	}
	// No trailing newline, a nonzero exit and output on stderr do not break the session.
	if res := run(`printf 'no newline'; printf 'err' >&2; export AFTER=1; exit 4`); res.exitCode != 4 ||
		strings.Join(res.stdout, "") != "no newline" || strings.Join(res.stderr, "") != "err" {
		t.Fatalf("run = stdout %q stderr %q exit %d", res.stdout, res.stderr, res.exitCode)
	}
	if res := run(`echo "$MY_VAR $AFTER"; basename "$PWD"`); strings.Join(res.stdout, " ") != "42 1 dir" {
		t.Fatalf("after failing run: %q", res.stdout)
	}
	// A cwd override applies to the run.
	if res := run(`pwd`); res.stdout[0] != filepath.Join(e.root, "sub", "dir") {
		t.Fatalf("pwd = %q", res.stdout)
	}
	res = e.stream("/session/"+id+"/run", map[string]any{"command": `pwd; echo "$PWD"; set -u; echo "$MY_VAR"`, "cwd": "/sub"})
	want := filepath.Join(e.root, "sub")
	if got := strings.Join(res.stdout, "|"); got != want+"|"+want+"|42" {
		t.Fatalf("pwd, $PWD, $MY_VAR with cwd override = %q, want %q twice and 42", got, want)
	}
	// Timeout kills the run.
	res = e.stream("/session/"+id+"/run", map[string]any{"command": "sleep 30", "timeout": 200})
	if res.evalue != "-1" {
		t.Fatalf("timed-out run evalue = %q, want -1", res.evalue)
	}

	wantError(t, e.do("POST", "/session/"+id+"/run", `{}`), 400, "INVALID_REQUEST_BODY")
	wantError(t, e.do("POST", "/session/"+id+"/run", `{"command":"true","cwd":"/nope"}`), 400, "INVALID_REQUEST_BODY")
	wantStatus(t, e.do("DELETE", "/session/"+id, nil), 200)
	wantError(t, e.do("DELETE", "/session/"+id, nil), 404, "CONTEXT_NOT_FOUND")
	wantError(t, e.do("POST", "/session/"+id+"/run", `{"command":"true"}`), 404, "CONTEXT_NOT_FOUND")
}

func TestSessionCreateWithCwd(t *testing.T) {
	e := newEnv(t, execd.Config{})
	if err := os.Mkdir(filepath.Join(e.root, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	id := e.newSession(map[string]string{"cwd": "/ws"})
	if res := e.stream("/session/"+id+"/run", map[string]any{"command": "pwd"}); res.stdout[0] != filepath.Join(e.root, "ws") {
		t.Fatalf("pwd = %q", res.stdout)
	}
	wantError(t, e.do("POST", "/session", `{"cwd":"/missing"}`), 400, "INVALID_REQUEST_BODY")
	wantError(t, e.do("POST", "/session", `{"cwd":`), 400, "INVALID_REQUEST_BODY")
}

func TestCode(t *testing.T) {
	e := newEnv(t, execd.Config{})
	for _, lang := range []string{"", "bash", "sh"} {
		body := map[string]any{"code": "echo hi; exit 2"}
		if lang != "" {
			body["context"] = map[string]string{"language": lang}
		}
		if res := e.stream("/code", body); strings.Join(res.stdout, "") != "hi" || res.exitCode != 2 {
			t.Fatalf("language %q: stdout %q exit %d", lang, res.stdout, res.exitCode)
		}
	}
	if _, err := exec.LookPath("python3"); err == nil {
		res := e.stream("/code", map[string]any{"code": "import sys\nprint(6*7)\nsys.exit(3)", "context": map[string]string{"language": "python"}})
		// Chunks with their newlines, as from a Jupyter kernel.
		if strings.Join(res.stdout, "") != "42\n" || res.exitCode != 3 {
			t.Fatalf("python: stdout %q exit %d", res.stdout, res.exitCode)
		}
	}
	wantError(t, e.do("POST", "/code", `{"code":"x","context":{"language":"java"}}`), 500, "RUNTIME_ERROR")
	wantError(t, e.do("POST", "/code", `{"context":{"language":"bash"}}`), 400, "INVALID_REQUEST_BODY")
	wantError(t, e.do("POST", "/code", `{"code":"true","context":{"id":"nope"}}`), 404, "CONTEXT_NOT_FOUND")
	wantError(t, e.do("DELETE", "/code", nil), 400, "MISSING_QUERY")
	wantError(t, e.do("DELETE", "/code?id=nope", nil), 404, "CONTEXT_NOT_FOUND")
}

func TestCodeContexts(t *testing.T) {
	e := newEnv(t, execd.Config{})
	var ctx struct{ ID, Language string }
	if err := json.Unmarshal(wantStatus(t, e.do("POST", "/code/context", `{"language":"bash"}`), 200), &ctx); err != nil || ctx.ID == "" || ctx.Language != "bash" {
		t.Fatalf("create context: %+v %v", ctx, err)
	}
	code := func(c string) result {
		return e.stream("/code", map[string]any{"code": c, "context": map[string]string{"id": ctx.ID, "language": "bash"}})
	}
	code("export K=v; cd /")
	if res := code("echo $K; pwd"); strings.Join(res.stdout, " ") != "v /" {
		t.Fatalf("context state = %q", res.stdout)
	}
	var list []struct{ ID, Language string }
	if err := json.Unmarshal(wantStatus(t, e.do("GET", "/code/contexts?language=bash", nil), 200), &list); err != nil || len(list) != 1 || list[0].ID != ctx.ID {
		t.Fatalf("list = %+v %v", list, err)
	}
	if b := wantStatus(t, e.do("GET", "/code/contexts?language=python", nil), 200); strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("python list = %s, want []", b)
	}
	wantStatus(t, e.do("GET", "/code/contexts/"+ctx.ID, nil), 200)
	wantStatus(t, e.do("DELETE", "/code?id="+ctx.ID, nil), 200) // nothing running: no-op
	wantStatus(t, e.do("DELETE", "/code/contexts/"+ctx.ID, nil), 200)
	wantError(t, e.do("GET", "/code/contexts/"+ctx.ID, nil), 404, "CONTEXT_NOT_FOUND")
	wantError(t, e.do("DELETE", "/code/contexts/"+ctx.ID, nil), 404, "CONTEXT_NOT_FOUND")

	wantStatus(t, e.do("POST", "/code/context", `{"language":"bash"}`), 200)
	wantStatus(t, e.do("DELETE", "/code/contexts?language=bash", nil), 200)
	if b := wantStatus(t, e.do("GET", "/code/contexts", nil), 200); strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("after bulk delete: %s", b)
	}
	wantError(t, e.do("DELETE", "/code/contexts", nil), 400, "MISSING_QUERY")
	wantError(t, e.do("POST", "/code/context", `{"language":"java"}`), 501, "NOT_SUPPORTED")
	wantError(t, e.do("GET", "/pty/abc", nil), 404, "CONTEXT_NOT_FOUND")
}

func TestProxy(t *testing.T) {
	e := newEnv(t, execd.Config{Token: "tok"})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s %s token=%q", r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get(execd.TokenHeader))
	}))
	defer backend.Close()
	_, port, _ := net.SplitHostPort(backend.Listener.Addr().String())
	b := wantStatus(t, e.do("POST", "/proxy/"+port+"/a/b?x=1", "body", execd.TokenHeader, "tok"), 200)
	if got, want := string(b), `POST /a/b x=1 token=""`; got != want {
		t.Fatalf("proxied = %q, want %q", got, want)
	}
	wantUnauthorized(t, e.do("GET", "/proxy/"+port+"/a", nil))
	wantError(t, e.do("GET", "/proxy/0/a", nil, execd.TokenHeader, "tok"), 400, "INVALID_REQUEST_BODY")
	// A closed port answers 502.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	_, closed, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	wantStatus(t, e.do("GET", "/proxy/"+closed+"/", nil, execd.TokenHeader, "tok"), 502)
}

func TestInterruptCodeContext(t *testing.T) {
	e := newEnv(t, execd.Config{})
	var ctx struct{ ID string }
	if err := json.Unmarshal(wantStatus(t, e.do("POST", "/code/context", `{"language":"bash"}`), 200), &ctx); err != nil {
		t.Fatal(err)
	}
	resp := e.do("POST", "/code", map[string]any{"code": "echo started; sleep 30", "context": map[string]string{"id": ctx.ID}})
	defer resp.Body.Close()
	sr := newStreamReader(resp.Body)
	for {
		ev, err := sr.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == "stdout" && ev.Text == "started" {
			break
		}
	}
	wantStatus(t, e.do("DELETE", "/code?id="+ctx.ID, nil), 200)
	for {
		ev, err := sr.Next()
		if err != nil {
			t.Fatalf("stream ended without a terminal event: %v", err)
		}
		if ev.Type == "error" {
			if ev.Error.Evalue != "-1" || ev.Error.Traceback[0] != "signal: terminated" {
				t.Fatalf("terminal = %+v, want -1 / signal: terminated", ev.Error)
			}
			return
		}
		if ev.Type == "execution_complete" {
			t.Fatal("interrupted run completed successfully")
		}
	}
}

// TestRealRoot runs with Root "/" as the server does inside an isolated sandbox: paths are the
// real ones and `..` stops at "/".
func TestRealRoot(t *testing.T) {
	e := newEnv(t, execd.Config{Root: "/"})
	dir := t.TempDir()
	p := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(p, []byte("real"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi := e.info(p)[p]; fi.Path != p || fi.Size != 4 || fi.Mode != 600 {
		t.Fatalf("info = %+v", fi)
	}
	if b := wantStatus(t, e.do("GET", "/files/download?path=/../../"+p, nil), 200); string(b) != "real" {
		t.Fatalf("download = %q", b)
	}
	if res := e.run("pwd"); strings.Join(res.stdout, "") != "/" {
		t.Fatalf("default cwd = %q, want /", res.stdout)
	}
	wantError(t, e.do("DELETE", "/directories?path=/", nil), 400, "INVALID_REQUEST_BODY")
	wantError(t, e.do("POST", "/files/mv", []map[string]string{{"src": "/", "dest": dir + "/x"}}), 400, "INVALID_REQUEST_BODY")
}
