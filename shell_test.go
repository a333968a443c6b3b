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
