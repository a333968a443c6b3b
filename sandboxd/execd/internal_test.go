package execd

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

func splitAll(max int, chunks [][]byte) []string {
	var out []string
	sp := newLineSplitter(max, func(line []byte) error {
		out = append(out, string(line))
		return nil
	})
	for _, c := range chunks {
		_, _ = sp.Write(c)
	}
	_ = sp.Flush()
	return out
}

func TestLineSplitter(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		max  int
		want []string
	}{
		{"lines", "a\nb\n", 16, []string{"a", "b"}},
		{"crlf and cr", "a\r\nb\rc\n", 16, []string{"a", "b", "c"}},
		{"empty lines", "\n\n", 16, []string{"", ""}},
		{"partial last", "a\nlast", 16, []string{"a", "last"}},
		{"exactly max", "0123456789abcdef\n", 16, []string{"0123456789abcdef"}},
		{"max plus one", "0123456789abcdefg\n", 16, []string{"0123456789abcdef", "g"}},
		{"split keeps rune", "0123456789abcde€x", 16, []string{"0123456789abcde", "€x"}},
		{"invalid bytes", "\xff\xfe\n", 16, []string{"\xff\xfe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := splitAll(tc.max, [][]byte{[]byte(tc.in)})
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzLineSplitter checks that pieces are bounded, lose no byte, keep valid UTF-8 valid and
// do not depend on how the input was chunked.
func FuzzLineSplitter(f *testing.F) {
	f.Add([]byte("a\r\nb\rc\n\nlast"), uint8(3), uint8(16))
	f.Add([]byte("0123456789abcde€x\xff"), uint8(7), uint8(16))
	f.Add([]byte(strings.Repeat("é", 40)), uint8(1), uint8(17))
	f.Fuzz(func(t *testing.T, in []byte, cut uint8, max uint8) {
		m := int(max)%64 + 16
		whole := splitAll(m, [][]byte{in})
		c := int(cut) % (len(in) + 1)
		var chunks [][]byte
		for i := 0; i < len(in); i += c + 1 {
			chunks = append(chunks, in[i:min(len(in), i+c+1)])
		}
		chunked := splitAll(m, chunks)
		if strings.Join(whole, "\x00|") != strings.Join(chunked, "\x00|") || len(whole) != len(chunked) {
			t.Fatalf("chunking changed the output: %q vs %q", whole, chunked)
		}
		stripped := strings.NewReplacer("\r\n", "", "\r", "", "\n", "").Replace(string(in))
		if got := strings.Join(whole, ""); got != stripped {
			t.Fatalf("bytes lost: %q, want %q", got, stripped)
		}
		for _, p := range whole {
			if len(p) > m {
				t.Fatalf("piece of %d bytes > max %d", len(p), m)
			}
			if utf8.Valid(in) && !utf8.ValidString(p) {
				t.Fatalf("piece %q of valid input is not valid UTF-8", p)
			}
		}
	})
}

// FuzzReplaceStream compares the streaming replacement with bytes.ReplaceAll under any chunking.
func FuzzReplaceStream(f *testing.F) {
	f.Add([]byte("localhost localhost"), []byte("localhost"), []byte("0.0.0.0"), false)
	f.Add([]byte("aaaa"), []byte("aa"), []byte("a"), true)
	f.Add([]byte(strings.Repeat("ab", 40000)), []byte("ba"), []byte(""), true)
	f.Fuzz(func(t *testing.T, in, old, new []byte, oneByte bool) {
		if len(old) == 0 {
			return
		}
		var r io.Reader = bytes.NewReader(in)
		if oneByte {
			r = iotest.OneByteReader(r)
		}
		var out bytes.Buffer
		n, err := replaceStream(&out, r, old, new)
		if err != nil {
			t.Fatal(err)
		}
		if want := bytes.ReplaceAll(in, old, new); !bytes.Equal(out.Bytes(), want) {
			t.Fatalf("got %q, want %q", out.Bytes(), want)
		}
		if want := bytes.Count(in, old); n != want {
			t.Fatalf("count = %d, want %d", n, want)
		}
	})
}

// FuzzSecureJoin resolves arbitrary paths in a tree full of escaping links: the result is
// always Root or below it, and the only errors are ErrSymlinkLoop and ErrInvalid (NUL).
func FuzzSecureJoin(f *testing.F) {
	root := filepath.Join(f.TempDir(), "root")
	if err := os.MkdirAll(filepath.Join(root, "d", "e"), 0o755); err != nil {
		f.Fatal(err)
	}
	for name, target := range map[string]string{"abs": "/", "up": "../..", "d/up": "../../..", "loop": "loop",
		"d/e/x": "/d/../abs/up", "etc": "/etc"} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			f.Fatal(err)
		}
	}
	for _, seed := range []string{"/", "../..", "/abs/up/etc/passwd", "d/up/x", "loop/a", "d/e/x/../..", "/etc/../.."} {
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, p string, follow bool) {
		got, err := secureJoin(root, p, follow)
		if err != nil {
			if !errors.Is(err, ErrSymlinkLoop) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("secureJoin(%q): %v", p, err)
			}
			return
		}
		if got != root && !strings.HasPrefix(got, root+"/") {
			t.Fatalf("secureJoin(%q) = %q escapes %q", p, got, root)
		}
	})
}

// FuzzParseMode: accepted modes render back to the same decimal-written octal number.
func FuzzParseMode(f *testing.F) {
	for _, m := range []int{0, 644, 755, 7777, 800, -1, 10000, 4755} {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, m int) {
		mode, err := parseMode(m)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("parseMode(%d) error %v does not wrap ErrInvalid", m, err)
			}
			return
		}
		if got := modeToDecimal(mode); got != m {
			t.Fatalf("modeToDecimal(parseMode(%d)) = %d", m, got)
		}
	})
}

// FuzzGlobMatch: valid patterns never fail to match, and a literal base name always matches itself.
func FuzzGlobMatch(f *testing.F) {
	f.Add("*.go", "a/b/c.go")
	f.Add("**/x/**", "x")
	f.Add("[", "a")
	f.Fuzz(func(t *testing.T, pattern, rel string) {
		if validGlob(pattern) != nil {
			return
		}
		if _, err := globMatch(pattern, rel); err != nil {
			t.Fatalf("globMatch(%q, %q): %v after validGlob accepted it", pattern, rel, err)
		}
		if pattern != "" && !strings.ContainsAny(pattern, `*?[\/`) {
			if ok, _ := globMatch(pattern, "dir/"+pattern); !ok {
				t.Fatalf("literal %q does not match itself", pattern)
			}
		}
	})
}

// FuzzSplitForWire: the pieces rebuild the line, each encoded event fits in maxLine, and valid
// UTF-8 stays valid.
func FuzzSplitForWire(f *testing.F) {
	f.Add([]byte("plain ascii text"), uint16(0))
	f.Add([]byte("<<<>>>&&&\"\"\x01\x02\xff\xfe\u2028é€😀"), uint16(3))
	f.Add(bytes.Repeat([]byte{0xff}, 500), uint16(7))
	f.Fuzz(func(t *testing.T, line []byte, extra uint16) {
		maxLine := minMaxLine + int(extra)%512
		var pieces [][]byte
		splitForWire(line, maxLine, func(p []byte) { pieces = append(pieces, bytes.Clone(p)) })
		if got := bytes.Join(pieces, nil); !bytes.Equal(got, line) {
			t.Fatalf("pieces %q do not rebuild %q", pieces, line)
		}
		for _, p := range pieces {
			ev := outputEvent("stderr", p)
			ev.Timestamp = 1 << 62 // longer than any real millisecond timestamp
			b, _ := json.Marshal(ev)
			if len(b) > maxLine {
				t.Fatalf("encoded event of %d bytes > %d: %s", len(b), maxLine, b)
			}
			if len(p) == 0 && len(line) != 0 {
				t.Fatal("empty piece of a non-empty line")
			}
			if ev.Data != "" {
				if raw, err := base64.StdEncoding.DecodeString(ev.Data); err != nil || !bytes.Equal(raw, p) {
					t.Fatalf("data does not decode to the piece")
				}
			}
			if utf8.Valid(line) && !utf8.Valid(p) {
				t.Fatalf("piece %q of valid input is invalid", p)
			}
		}
	})
}

func TestSplitWords(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
		ok   bool
	}{
		{"/app/hello a b", []string{"/app/hello", "a", "b"}, true},
		{`hello 'a b' "c d" e\ f --x=y`, []string{"hello", "a b", "c d", "e f", "--x=y"}, true},
		{`echo "a\"b"`, []string{"echo", `a"b`}, true},
		{"  ", nil, true},
		{"a | b", nil, false},
		{"echo $HOME", nil, false},
		{`echo "$HOME"`, nil, false},
		{"ls *.txt", nil, false},
		{"A=1 cmd", nil, false},
		{"a; b", nil, false},
		{"a > f", nil, false},
		{"echo 'open", nil, false},
	} {
		got, ok := splitWords(tt.in)
		if ok != tt.ok || strings.Join(got, "\x00") != strings.Join(tt.want, "\x00") {
			t.Errorf("splitWords(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzSplitWords(f *testing.F) {
	for _, s := range []string{"/app/hello a b", `a 'b c' "d\"e" f\ g`, "a | b", `"`, `\`, "x=1 y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, ok := splitWords(s)
		if !ok {
			return
		}
		// Accepted words never carry what only a shell would interpret
		// unquoted, and requoting them splits back to the same words.
		var b strings.Builder
		for i, w := range words {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(shellQuote(w))
		}
		again, ok := splitWords(b.String())
		if !ok || strings.Join(again, "\x00") != strings.Join(words, "\x00") {
			t.Fatalf("splitWords(%q) = %q; requoted %q splits to %q, %v", s, words, b.String(), again, ok)
		}
	})
}
