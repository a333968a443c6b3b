package execd_test

import (
	"testing"

	"github.com/alineo-labs/alineo/sandboxd/execd"
)

func TestPingAndAuth(t *testing.T) {
	e := newEnv(t, execd.Config{Token: "s3cret"})
	wantStatus(t, e.do("GET", "/ping", nil, execd.TokenHeader, "s3cret"), 200)
	wantError(t, e.do("GET", "/ping", nil), 401, "UNAUTHORIZED")
	wantError(t, e.do("GET", "/ping", nil, execd.TokenHeader, "wrong"), 401, "UNAUTHORIZED")
	wantError(t, e.do("POST", "/command", `{"command":"true"}`), 401, "UNAUTHORIZED")
	wantError(t, e.do("GET", "/nope", nil, execd.TokenHeader, "s3cret"), 404, "NOT_FOUND")
}

func TestCommandExitCodes(t *testing.T) {
	e := newEnv(t, execd.Config{})
	res := e.run("echo hello; echo err >&2; exit 3")
	if got, want := res.exitCode, 3; got != want {
		t.Fatalf("exit = %d, want %d", got, want)
	}
	if len(res.stdout) != 1 || res.stdout[0] != "hello" || len(res.stderr) != 1 || res.stderr[0] != "err" {
		t.Fatalf("stdout %q stderr %q", res.stdout, res.stderr)
	}
	if got, want := res.trace, []string{"exit status 3"}; len(got) != 1 || got[0] != want[0] {
		t.Fatalf("traceback = %q, want %q", got, want)
	}
	ok := e.run("echo fine")
	if last := ok.events[len(ok.events)-1]; last.Type != "execution_complete" {
		t.Fatalf("last event = %+v, want execution_complete", last)
	}
	if ok.events[1].Type != "ping" {
		t.Fatalf("second event = %+v, want ping", ok.events[1])
	}
}
