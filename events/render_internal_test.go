package events

import (
	"strings"
	"testing"
)

// FuzzRender: render gives what strings.ToValidUTF8, then replacing NUL,
// gives.
func FuzzRender(f *testing.F) {
	for _, s := range []string{"", "hi", "\x00", "a\xffb", "\xff\xfe\x00\xff", "\xef\xbf\xbd\x00\xc3",
		"é\x00\xe2\x82", "\xed\xa0\x80", "x\xf4\x90\x80\x80y"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := strings.ReplaceAll(strings.ToValidUTF8(string(b), "\uFFFD"), "\x00", "\uFFFD")
		if got := render(b); got != want {
			t.Fatalf("render(%q) = %q, want %q", b, got, want)
		}
	})
}
