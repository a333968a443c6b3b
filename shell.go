package alineo

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
)

// shellQuote quotes s for a POSIX shell: any byte string survives.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// wrapShell returns a command line that runs cmd, unchanged, with shell. execd's
// own shell only execs the given shell with the quoted text as its -c argument.
func wrapShell(shell, cmd string) string {
	return "exec " + shellQuote(shell) + " -c " + shellQuote(cmd)
}

// lineBytes returns the exact bytes of one output line event of a shell command
// stream, with its line terminator. execd sends one event per line without the
// terminator, and "\n" for an empty line. Text that is not valid
// UTF-8 arrives as U+FFFD replacements; sandboxd adds the exact bytes in a base64
// "data" field, which is used when present.
//
// What the wire format cannot say is reconstructed as "\n": a "\r" or "\r\n"
// terminator, a missing newline at the very end, and the cut of a line longer
// than execd's line limit all read back as "\n".
func lineBytes(ev opensandbox.Event) []byte { return appendLine(nil, ev) }

// appendLine appends lineBytes(ev) to dst.
func appendLine(dst []byte, ev opensandbox.Event) []byte {
	if ev.Text == "\n" {
		return append(dst, '\n')
	}
	if hasExact(ev) {
		dst = append(dst, exactBytes(ev)...)
	} else {
		dst = append(dst, ev.Text...)
	}
	return append(dst, '\n')
}

// hasExact reports whether ev may carry its exact bytes in a "data" field.
func hasExact(ev opensandbox.Event) bool {
	return len(ev.Raw) > 0 && (strings.Contains(ev.Text, "\uFFFD") || strings.IndexByte(ev.Text, 0) >= 0)
}

// rawBytes returns the exact bytes of an output chunk: a Jupyter chunk, or one of
// a stream of exact output (opensandbox.Stream.Exact).
func rawBytes(ev opensandbox.Event) []byte { return exactBytes(ev) }

// dataKey starts the "data" member of an event object. It cannot occur inside a
// JSON string, where every quote is escaped.
var dataKey = []byte(`"data":"`)

func exactBytes(ev opensandbox.Event) []byte {
	if len(ev.Data) > 0 {
		return ev.Data
	}
	if hasExact(ev) {
		if i := bytes.Index(ev.Raw, dataKey); i >= 0 {
			rest := ev.Raw[i+len(dataKey):]
			if j := bytes.IndexByte(rest, '"'); j >= 0 {
				b := make([]byte, base64.StdEncoding.DecodedLen(j), base64.StdEncoding.DecodedLen(j)+1)
				if n, err := base64.StdEncoding.Decode(b, rest[:j]); err == nil {
					return b[:n]
				}
			}
		}
	}
	b := make([]byte, len(ev.Text), len(ev.Text)+1)
	copy(b, ev.Text)
	return b
}

// outputPayload returns the JSON of events.NewOutput(seq, s, b), byte for byte
// what encoding/json produces, without its reflection and escaping passes in the
// common case of plain text.
func outputPayload(seq int, s events.Stream, b []byte) json.RawMessage {
	if !plainJSON(b) {
		p, err := json.Marshal(events.NewOutput(seq, s, b))
		if err != nil {
			panic("alineo: encode exec.output: " + err.Error()) // cannot happen: strings and bytes only
		}
		return p
	}
	out := make([]byte, 0, len(b)+48)
	out = append(out, `{"seq":`...)
	out = strconv.AppendInt(out, int64(seq), 10)
	out = append(out, `,"type":"`...)
	out = append(out, s...)
	out = append(out, `","text":"`...)
	out = appendPlainJSON(out, b)
	return append(out, `"}`...)
}

// startedPayload returns the JSON of p, byte for byte what encoding/json
// produces, without its reflection in the common case of a plain command or
// code and no working directory or environment.
func startedPayload(p events.ExecStartedPayload) json.RawMessage {
	if p.Cwd != "" || p.Env != nil || !plainJSON(string(p.Kind)) || !plainJSON(p.Cmd) ||
		!plainJSON(p.Code) || !plainJSON(p.Fingerprint) {
		b, err := json.Marshal(p)
		if err != nil {
			panic("alineo: encode exec.started: " + err.Error()) // cannot happen: strings, a bool and a map of strings
		}
		return b
	}
	out := make([]byte, 0, len(p.Cmd)+len(p.Code)+len(p.Fingerprint)+64)
	out = append(out, `{"seq":`...)
	out = strconv.AppendInt(out, int64(p.Seq), 10)
	for _, f := range [...]struct{ key, val string }{
		{`,"kind":"`, string(p.Kind)}, {`,"cmd":"`, p.Cmd}, {`,"code":"`, p.Code}, {`,"fingerprint":"`, p.Fingerprint},
	} {
		if f.val != "" {
			out = appendPlainJSON(append(out, f.key...), f.val)
			out = append(out, '"')
		}
	}
	if p.Interactive {
		out = append(out, `,"interactive":true`...)
	}
	return append(out, '}')
}

// completedPayload returns the JSON of exec.completed's payload, as
// encoding/json writes events.ExecCompletedPayload.
func completedPayload(seq, exitCode int) json.RawMessage {
	out := make([]byte, 0, 40)
	out = append(out, `{"seq":`...)
	out = strconv.AppendInt(out, int64(seq), 10)
	out = append(out, `,"exitCode":`...)
	out = strconv.AppendInt(out, int64(exitCode), 10)
	return append(out, '}')
}

// appendPlainJSON appends s, for which plainJSON holds, as the inside
// of a JSON string: a newline escaped, everything else as it is.
func appendPlainJSON[T string | []byte](out []byte, s T) []byte {
	for i := range len(s) {
		if c := s[i]; c == '\n' {
			out = append(out, '\\', 'n')
		} else {
			out = append(out, c)
		}
	}
	return out
}

// plainJSON reports whether s is ASCII that encoding/json writes unchanged
// in a string, apart from '\n' (no other control byte, quote, backslash, or
// HTML-escaped '<', '>', '&').
func plainJSON[T string | []byte](s T) bool {
	for i := range len(s) {
		if !plainJSONByte(s[i]) {
			return false
		}
	}
	return true
}

// plainJSONByte reports whether encoding/json writes c unchanged in a
// string, or c is '\n'.
func plainJSONByte(c byte) bool {
	return c < 0x80 && (c >= 0x20 || c == '\n') && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}
