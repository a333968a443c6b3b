package redact_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/redact"
)

func TestString(t *testing.T) {
	r := redact.New(map[string]string{"tok": "s3cr3t", "long": "s3cr3t-and-more", "empty": "", "k": "abc"})
	tests := []struct{ in, want string }{
		{"", ""},
		{"nothing here", "nothing here"},
		{"s3cr3t", "[REDACTED:tok]"},
		{"x s3cr3t y s3cr3t", "x [REDACTED:tok] y [REDACTED:tok]"},
		{"s3cr3t-and-more!", "[REDACTED:long]!"},
		{"s3cr3", "s3cr3"},
		{"abcabc", "[REDACTED:k][REDACTED:k]"},
		{"aabcc", "a[REDACTED:k]c"},
	}
	for _, tt := range tests {
		if got := r.String(tt.in); got != tt.want {
			t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestNilAndEmpty(t *testing.T) {
	var r *redact.Redactor
	if got, want := r.String("abc"), "abc"; got != want {
		t.Fatalf("nil String = %q, want %q", got, want)
	}
	e := redact.New(map[string]string{"x": ""})
	if !e.Empty() {
		t.Fatal("Empty() = false for only empty values")
	}
	st := e.NewStream()
	if got, want := string(st.Write([]byte("abc")))+string(st.Flush()), "abc"; got != want {
		t.Fatalf("stream = %q, want %q", got, want)
	}
}

func TestSameValueTwoNames(t *testing.T) {
	r := redact.New(map[string]string{"b": "v4lue", "a": "v4lue"})
	if got, want := r.String("=v4lue="), "=[REDACTED:a]="; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
}

func TestStreamAcrossChunks(t *testing.T) {
	r := redact.New(map[string]string{"api": "sk-live-123456"})
	in := "export KEY=sk-live-123456; echo sk-live-123456 done"
	for size := 1; size <= len(in); size++ {
		st := r.NewStream()
		var out bytes.Buffer
		for i := 0; i < len(in); i += size {
			out.Write(st.Write([]byte(in[i:min(i+size, len(in))])))
			if got, limit := st.Pending(), len("sk-live-123456")-1; got > limit {
				t.Fatalf("size %d: Pending = %d, want <= %d", size, got, limit)
			}
		}
		out.Write(st.Flush())
		if got, want := out.String(), "export KEY=[REDACTED:api]; echo [REDACTED:api] done"; got != want {
			t.Fatalf("size %d: got %q, want %q", size, got, want)
		}
	}
}

// A tail that no secret can start with is not held back: a terminal's
// prompt reaches its reader at once.
func TestStreamHoldsBackOnlyPossibleSecrets(t *testing.T) {
	r := redact.New(map[string]string{"api": "sk-live-123456"})
	st := r.NewStream()
	if got := string(st.Write([]byte("root# "))); got != "root# " || st.Pending() != 0 {
		t.Fatalf("Write = %q, Pending = %d; want all of it at once", got, st.Pending())
	}
	if got := string(st.Write([]byte("echo s"))); got != "echo " || st.Pending() != 1 {
		t.Fatalf("Write = %q, Pending = %d; want the s held back", got, st.Pending())
	}
	if got := string(st.Write([]byte("kip s"))); got != "skip " || st.Pending() != 1 {
		t.Fatalf("Write = %q, Pending = %d; want skip out, the next s held", got, st.Pending())
	}
	if got := string(st.Write([]byte("k-live-123456\r\n"))); got != "[REDACTED:api]\r\n" || st.Pending() != 0 {
		t.Fatalf("Write = %q, Pending = %d", got, st.Pending())
	}
}

func TestContains(t *testing.T) {
	r := redact.New(map[string]string{"a": "hunter2"})
	if !r.Contains([]byte("pw=hunter2")) {
		t.Error("Contains = false, want true")
	}
	if r.Contains([]byte("hunter")) {
		t.Error("Contains(prefix) = true, want false")
	}
}

// secretAlphabet keeps fuzzed secrets apart from the markers' own bytes
// ("[REDACTED:sN]" has no lowercase a-f), so a surviving secret is a real leak
// and not a secret spelled by a marker.
func toSecret(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		sb.WriteByte('a' + c%6)
	}
	return sb.String()
}

func FuzzStream(f *testing.F) {
	f.Add([]byte("abcabcab"), []byte("abc"), []byte("ca"), []byte{3, 1, 2})
	f.Add([]byte("xxfacefeedxx"), []byte("face"), []byte("feed"), []byte{1})
	f.Add([]byte("aaaaaaa"), []byte("aa"), []byte("aaa"), []byte{2, 5})
	f.Fuzz(func(t *testing.T, input, s0, s1, cuts []byte) {
		secrets := map[string]string{"s0": toSecret(s0), "s1": toSecret(s1)}
		r := redact.New(secrets)
		whole := r.Bytes(input)

		st := r.NewStream()
		var out []byte
		rest := input
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(cuts) > 0 {
				n = min(int(cuts[i%len(cuts)])%8+1, len(rest))
			}
			out = append(out, st.Write(rest[:n])...)
			rest = rest[n:]
		}
		out = append(out, st.Flush()...)
		if !bytes.Equal(out, whole) {
			t.Fatalf("stream = %q, whole = %q", out, whole)
		}
		for name, v := range secrets {
			if v != "" && bytes.Contains(out, []byte(v)) {
				t.Fatalf("secret %s=%q survives in %q", name, v, out)
			}
		}
		if !r.Contains(input) && !bytes.Equal(out, input) {
			t.Fatalf("input without secrets changed: %q -> %q", input, out)
		}
	})
}

func BenchmarkStream(b *testing.B) {
	r := redact.New(map[string]string{"a": "sk-live-0123456789abcdef", "b": "ghp_abcdefghijklmnop"})
	chunk := bytes.Repeat([]byte("ordinary build output line with no secret in it\n"), 1000)
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		st := r.NewStream()
		st.Write(chunk)
		st.Flush()
	}
}
