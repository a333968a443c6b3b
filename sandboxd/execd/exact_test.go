package execd_test

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd/execd"
)

// exactRun runs cmd on path with the exact-output header and returns the
// concatenated bytes of each stream, taken from data when present.
func (e *env) exactRun(path string, body any) (stdout, stderr []byte, hdr http.Header) {
	e.t.Helper()
	resp := e.do("POST", path, body, execd.ExactOutputHeader, "1")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("POST %s: status %d: %s", path, resp.StatusCode, b)
	}
	evs, err := parseStream(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ev := range evs {
		b := []byte(ev.Text)
		if ev.Data != "" {
			if b, err = base64.StdEncoding.DecodeString(ev.Data); err != nil {
				e.t.Fatalf("data %q: %v", ev.Data, err)
			}
		}
		switch ev.Type {
		case "stdout":
			stdout = append(stdout, b...)
		case "stderr":
			stderr = append(stderr, b...)
		}
	}
	return stdout, stderr, resp.Header
}

func TestExactOutput(t *testing.T) {
	e := newEnv(t, execd.Config{})
	for _, tc := range []struct {
		name, cmd, want string
	}{
		{"unterminated", `printf 'abc'`, "abc"},
		{"carriage returns", `printf 'a\rb\r\nc\n'`, "a\rb\r\nc\n"},
		{"empty lines", `printf '\n\nx\n\n'`, "\n\nx\n\n"},
		{"invalid utf-8", `printf 'a\377b\n\303'`, "a\xffb\n\xc3"},
		{"nul", `printf 'a\000b'`, "a\x00b"},
		{"split character", `printf '\303'; sleep 0.2; printf '\251\n'`, "é\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, hdr := e.exactRun("/command", map[string]any{"command": tc.cmd})
			if string(out) != tc.want {
				t.Errorf("stdout = %q, want %q", out, tc.want)
			}
			if hdr.Get(execd.ExactOutputHeader) != "1" {
				t.Errorf("response lacks %s", execd.ExactOutputHeader)
			}
		})
	}
	// A 5 MiB line arrives whole, without a newline at any cut.
	out, _, _ := e.exactRun("/command", map[string]any{"command": `head -c 5242880 /dev/zero | tr '\0' x`})
	if len(out) != 5<<20 || bytes.IndexByte(out, '\n') >= 0 {
		t.Errorf("5 MiB line: %d bytes, newline at %d", len(out), bytes.IndexByte(out, '\n'))
	}
	_, errOut, _ := e.exactRun("/code", map[string]any{"code": `printf 'e1\ne2' >&2`})
	if string(errOut) != "e1\ne2" {
		t.Errorf("code stderr = %q", errOut)
	}
	sid := e.newSession(nil)
	out, _, _ = e.exactRun("/session/"+sid+"/run", map[string]any{"command": `printf 'x\r\ny'`})
	if string(out) != "x\r\ny" {
		t.Errorf("session stdout = %q", out)
	}
	// Without the header the real execd's line format stays.
	res := e.stream("/command", map[string]any{"command": `printf 'abc'`})
	if strings.Join(res.stdout, "|") != "abc" {
		t.Errorf("line format = %q", res.stdout)
	}
}

// TestBadCommands: input execve cannot take is refused with 400 naming the
// field, an oversized body with 413 (after the body was read, so the client
// gets the answer, not a reset).
func TestBadCommands(t *testing.T) {
	e := newEnv(t, execd.Config{})
	for _, tc := range []struct {
		name, path string
		body       any
		field      string
	}{
		{"nul", "/command", map[string]any{"command": "echo a\x00b"}, "command"},
		{"too long", "/command", map[string]any{"command": "echo " + strings.Repeat("x", execd.MaxCommand)}, "command"},
		{"nul in code", "/code", map[string]any{"code": "echo a\x00b"}, "code"},
		{"nul in env", "/command", map[string]any{"command": "true", "envs": map[string]string{"A": "x\x00"}}, "envs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.do("POST", tc.path, tc.body)
			b := wantStatus(t, resp, http.StatusBadRequest)
			if !strings.Contains(string(b), `"code":"INVALID_REQUEST_BODY"`) || !strings.Contains(string(b), tc.field+":") {
				t.Errorf("body = %s, want INVALID_REQUEST_BODY naming %s", b, tc.field)
			}
		})
	}
	big := `{"command":"echo ` + strings.Repeat("x", 9<<20) + `"}`
	b := wantStatus(t, e.do("POST", "/command", big), http.StatusRequestEntityTooLarge)
	if !strings.Contains(string(b), "INVALID_REQUEST_BODY") {
		t.Errorf("413 body = %s", b)
	}
}
