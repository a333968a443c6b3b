package alineo

import (
	"encoding/base64"
	"encoding/json"
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

func exactBytes(ev opensandbox.Event) []byte {
	if strings.ContainsRune(ev.Text, utf8.RuneError) && len(ev.Raw) > 0 {
		var w struct {
			Data string `json:"data"`
		}
		if json.Unmarshal(ev.Raw, &w) == nil && w.Data != "" {
			if b, err := base64.StdEncoding.DecodeString(w.Data); err == nil {
				return b
			}
		}
	}
	b := make([]byte, len(ev.Text), len(ev.Text)+1)
	copy(b, ev.Text)
	return b
}
