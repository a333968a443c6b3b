package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// script writes an executable shell script at dir/name that runs body.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// answering returns a script body answering identify with id.
func answering(t *testing.T, id initIdentity) string {
	t.Helper()
	b, err := json.Marshal(id)
	if err != nil {
		t.Fatal(err)
	}
	return "[ \"$" + initEnv + "\" = identify ] || exit 3\necho '" + string(b) + "'"
}

func logged(buf *bytes.Buffer) *Runtime {
	return &Runtime{log: slog.New(slog.NewTextHandler(buf, nil))}
}

// TestPreferredInit: sandboxd binds InitName into sandboxes instead of its
// own executable only when it lies next to it and answers identify with
// sandboxd's own protocol and build; otherwise it says why and uses itself.
func TestPreferredInit(t *testing.T) {
	own := ownIdentity()
	other := own
	other.Build += " elsewhere"
	newer := own
	newer.Protocol++
	for _, c := range []struct {
		name    string
		sibling string // the script's body; "" for no sibling
		use     bool
		warn    string // in the log when not used
	}{
		{name: "same build", sibling: answering(t, own), use: true},
		{name: "no sibling"},
		{name: "another build", sibling: answering(t, other), warn: "of another build"},
		{name: "another protocol", sibling: answering(t, newer), warn: "init protocol"},
		{name: "not an init", sibling: "echo 'sandboxd: unknown role' >&2; exit 2", warn: "unknown role"},
		{name: "garbage", sibling: "echo hello", warn: "does not identify itself"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			self := script(t, dir, "sandboxd", "exit 0")
			var sibling string
			if c.sibling != "" {
				sibling = script(t, dir, InitName, c.sibling)
			}
			var log bytes.Buffer
			got := logged(&log).preferredInit(context.Background(), self)
			want := self
			if c.use {
				want = sibling
			}
			if got != want {
				t.Fatalf("preferredInit = %s, want %s (log: %s)", got, want, log.String())
			}
			if !strings.Contains(log.String(), c.warn) || (c.warn == "") != (log.Len() == 0) {
				t.Errorf("log %q, want it to say %q", log.String(), c.warn)
			}
		})
	}
}

// TestCheckedInit: an init named by Config.InitBinary must speak this
// sandboxd's protocol, else the start fails with ErrInitBinary saying why;
// another build of the same protocol is used.
func TestCheckedInit(t *testing.T) {
	own := ownIdentity()
	other := own
	other.Build = "example.com/fork@v9"
	newer := own
	newer.Protocol++
	for _, c := range []struct {
		name, body string
		missing    bool
		err        string // "" when it is used
	}{
		{name: "same build", body: answering(t, own)},
		{name: "another build", body: answering(t, other)},
		{name: "another protocol", body: answering(t, newer), err: "speaks the init protocol"},
		{name: "not an init", body: "echo 'sandboxd: unknown ALINEO_SANDBOXD_INIT role \"identify\"' >&2; exit 2", err: `unknown ALINEO_SANDBOXD_INIT role "identify"`},
		{name: "garbage", body: "head -c 100000 /dev/zero | tr '\\0' x", err: "does not identify itself"},
		{name: "missing", missing: true, err: "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "init")
			if !c.missing {
				p = script(t, filepath.Dir(p), "init", c.body)
			}
			var log bytes.Buffer
			got, err := logged(&log).checkedInit(context.Background(), p)
			if c.err == "" {
				if err != nil || got != p {
					t.Fatalf("checkedInit = %q, %v; want %s", got, err, p)
				}
				return
			}
			if !errors.Is(err, ErrInitBinary) || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), p) {
				t.Fatalf("checkedInit: %v; want ErrInitBinary naming %s and saying %q", err, p, c.err)
			}
			if len(err.Error()) > 2*identifyMaxOutput {
				t.Errorf("the error holds %d bytes of the init's output", len(err.Error()))
			}
		})
	}
}

// TestIdentifyBounded: an init that never answers is given up on when ctx
// ends, its child holding the output pipe or not.
func TestIdentifyBounded(t *testing.T) {
	p := script(t, t.TempDir(), "init", "sleep 30 & exec sleep 30")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := identify(ctx, p); err == nil {
		t.Fatal("identify of a hung init succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("identify took %v after its context ended", d)
	}
}

// TestInitProtocolMessages holds the messages sandboxd and the init pass on
// their pipes to initProtocol: a change to them must bump it, so that an
// init of an older build is refused rather than misread.
func TestInitProtocolMessages(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "protocol %d\n", initProtocol)
	for _, v := range []any{initConfig{}, initMsg{}, initIdentity{}} {
		typ := reflect.TypeOf(v)
		for f := range typ.Fields() {
			fmt.Fprintf(&b, "%s.%s %s %q\n", typ.Name(), f.Name, f.Type, f.Tag.Get("json"))
		}
	}
	const want = `protocol 1
initConfig.ID string "id"
initConfig.Isolated bool "isolated"
initConfig.Root string "root,omitempty"
initConfig.Entrypoint []string "entrypoint"
initConfig.Env []string "env"
initConfig.WorkingDir string "workingDir,omitempty"
initConfig.User string "user,omitempty"
initConfig.Token string "token"
initConfig.Netns bool "netns,omitempty"
initConfig.CACert string "caCert,omitempty"
initMsg.Port int "port,omitempty"
initMsg.Exec *float64 "exec,omitempty"
initMsg.Exit *int "exit,omitempty"
initMsg.Signal string "signal,omitempty"
initMsg.Execd string "execd,omitempty"
initMsg.Error string "error,omitempty"
initIdentity.Protocol int "protocol"
initIdentity.Build string "build"
`
	if got := b.String(); got != want {
		t.Errorf("the init's messages are not those of protocol %d; if they changed, bump initProtocol and set want to:\n%s",
			initProtocol, strings.Replace(got, fmt.Sprintf("protocol %d", initProtocol), fmt.Sprintf("protocol %d", initProtocol+1), 1))
	}
}
