package alineo

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
)

func TestOutputPayloadMatchesEncodingJSON(t *testing.T) {
	for _, b := range []string{
		"", "hello\n", "a\nb\n", "tab\there", "quote \" and \\ back", "<html>&amp;", "\x00nul", "caf\u00e9\n",
		"\xff\xfe invalid\n", "\u2028 line sep", string(bytes.Repeat([]byte("x"), 5000)) + "\n",
	} {
		for _, s := range []events.Stream{events.Stdout, events.Stderr} {
			got := outputPayload(7, s, []byte(b))
			want, _ := json.Marshal(events.NewOutput(7, s, []byte(b)))
			if !bytes.Equal(got, want) {
				t.Errorf("outputPayload(%q) = %s, want %s", b, got, want)
			}
		}
	}
}

func FuzzOutputPayload(f *testing.F) {
	f.Add([]byte("hello\n"))
	f.Add([]byte("\xff<\"\\"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got := outputPayload(1, events.Stdout, b)
		want, _ := json.Marshal(events.NewOutput(1, events.Stdout, b))
		if !bytes.Equal(got, want) {
			t.Fatalf("outputPayload(%q) = %s, want %s", b, got, want)
		}
		var p events.ExecOutputPayload
		if err := json.Unmarshal(got, &p); err != nil || !bytes.Equal(p.Bytes(), b) {
			t.Fatalf("round trip of %q: %q, %v", b, p.Bytes(), err)
		}
	})
}

func TestStartedPayloadMatchesEncodingJSON(t *testing.T) {
	fp := events.Fingerprint(events.KindCommand, "echo hi")
	for _, p := range []events.ExecStartedPayload{
		{Seq: 1, Kind: events.KindCommand, Cmd: "echo hi", Fingerprint: fp},
		{Seq: 2, Kind: events.KindCode, Code: "print(1)\nprint(2)", Fingerprint: fp},
		{Seq: 3},
		{Seq: -1, Cmd: "x", Interactive: true},
		{Seq: 4, Cmd: "echo '<b>' && true", Fingerprint: fp},
		{Seq: 5, Cmd: "caf\u00e9 \"q\" \\ \t", Kind: events.KindCommand},
		{Seq: 6, Cmd: "\xff\xfe"},
		{Seq: 7, Cmd: "ls", Cwd: "/work"},
		{Seq: 8, Cmd: "env", Env: map[string]string{"B": "2", "A": "1"}},
		{Seq: 9, Cmd: "env", Env: map[string]string{}},
	} {
		got := startedPayload(p)
		want, _ := json.Marshal(p)
		if !bytes.Equal(got, want) {
			t.Errorf("startedPayload(%+v) = %s, want %s", p, got, want)
		}
	}
	for _, c := range [][2]int{{1, 0}, {2, 1}, {-1, -1}, {1 << 40, 255}} {
		got := completedPayload(c[0], c[1])
		want, _ := json.Marshal(events.ExecCompletedPayload{Seq: c[0], ExitCode: c[1]})
		if !bytes.Equal(got, want) {
			t.Errorf("completedPayload(%d, %d) = %s, want %s", c[0], c[1], got, want)
		}
	}
}

func FuzzStartedPayload(f *testing.F) {
	f.Add(1, "command", "echo hi\n", "", "sha256:00", false)
	f.Add(2, "code", "", "x = '<&>'", "", true)
	f.Fuzz(func(t *testing.T, seq int, kind, cmd, code, fp string, interactive bool) {
		p := events.ExecStartedPayload{Seq: seq, Kind: events.ExecKind(kind), Cmd: cmd, Code: code, Fingerprint: fp, Interactive: interactive}
		got := startedPayload(p)
		want, _ := json.Marshal(p)
		if !bytes.Equal(got, want) {
			t.Fatalf("startedPayload(%+v) = %s, want %s", p, got, want)
		}
	})
}

func TestWrapShellKeepsAnyCommand(t *testing.T) {
	for _, tt := range []struct{ shell, cmd, want string }{
		{"/bin/bash", "echo hi", `exec '/bin/bash' -c 'echo hi'`},
		{"/bin/bash", "echo 'a'", `exec '/bin/bash' -c 'echo '\''a'\'''`},
		{"/my shell", "x", `exec '/my shell' -c 'x'`},
	} {
		if got := wrapShell(tt.shell, tt.cmd); got != tt.want {
			t.Errorf("wrapShell(%q, %q) = %s, want %s", tt.shell, tt.cmd, got, tt.want)
		}
	}
}

func TestLineBytes(t *testing.T) {
	raw := []byte(`{"type":"stdout","text":"\ufffd\ufffd","data":"//4="}`)
	for _, tt := range []struct {
		ev   opensandbox.Event
		want string
	}{
		{opensandbox.Event{Kind: "stdout", Text: "hello"}, "hello\n"},
		{opensandbox.Event{Kind: "stdout", Text: "\n"}, "\n"},
		{opensandbox.Event{Kind: "stdout", Text: "\ufffd\ufffd", Raw: raw}, "\xff\xfe\n"},
		{opensandbox.Event{Kind: "stdout", Text: "\ufffd no data"}, "\ufffd no data\n"},
	} {
		if got := string(lineBytes(tt.ev)); got != tt.want {
			t.Errorf("lineBytes(%+v) = %q, want %q", tt.ev, got, tt.want)
		}
	}
}

func FuzzLineBytes(f *testing.F) {
	f.Add("\ufffd", []byte(`{"type":"stdout","text":"\ufffd","data":"/w=="}`))
	f.Add("\x00", []byte(`{"data":"!!"}`))
	f.Add("x", []byte(`"data":"`))
	f.Fuzz(func(t *testing.T, text string, raw []byte) {
		b := lineBytes(opensandbox.Event{Kind: "stdout", Text: text, Raw: raw})
		if len(b) == 0 || b[len(b)-1] != '\n' {
			t.Fatalf("lineBytes(%q, %q) = %q: no line terminator", text, raw, b)
		}
	})
}
