package events

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzUnquote: unquote decodes a JSON string literal as encoding/json does,
// and refuses what encoding/json refuses.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`"a"`, `"\"{\\\"a\\\":1}\""`, `"\ud83d\ude00 \u00e9 \/ \b\f\n\r\t"`, `"\ud83d"`, `"\ude00x"`,
		"\"\xff\"", `"\u12"`, `"a\"`, `"`, `""`, `"\x"`, "\"\x01\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, q []byte) {
		got, ok := unquote(q)
		var want string
		err := json.Unmarshal(q, &want)
		tq := bytes.Trim(q, " \t\r\n")
		if wantOK := err == nil && len(tq) > 0 && tq[0] == '"'; ok != wantOK {
			t.Fatalf("unquote(%q) ok = %v, encoding/json err = %v", q, ok, err)
		}
		if ok && string(got) != want {
			t.Fatalf("unquote(%q) = %q, encoding/json %q", q, got, want)
		}
	})
}
