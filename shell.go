package alineo

import (
	"bytes"
	"encoding/base64"
	"strings"
	"unicode/utf8"

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
// terminator, and "\n" for an empty line (API-NOTES §6.1). Text that is not valid
// UTF-8 arrives as U+FFFD replacements; sandboxd adds the exact bytes in a base64
// "data" field, which is used when present.
//
// What the wire format cannot say is reconstructed as "\n": a "\r" or "\r\n"
// terminator, a missing newline at the very end, and the cut of a line longer
// than execd's line limit all read back as "\n".
func lineBytes(ev opensandbox.Event) []byte {
	if ev.Text == "\n" {
		return []byte{'\n'}
	}
	b := exactBytes(ev)
	return append(b, '\n')
}

// rawBytes returns the exact bytes of a raw (Jupyter) output chunk.
func rawBytes(ev opensandbox.Event) []byte { return exactBytes(ev) }

// dataKey starts the "data" member of an event object. It cannot occur inside a
// JSON string, where every quote is escaped.
var dataKey = []byte(`"data":"`)

func exactBytes(ev opensandbox.Event) []byte {
	if len(ev.Raw) > 0 && (strings.ContainsRune(ev.Text, utf8.RuneError) || strings.IndexByte(ev.Text, 0) >= 0) {
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
