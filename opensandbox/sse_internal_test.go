package opensandbox

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readFrames(r io.Reader) ([]frame, error) {
	fr := newFrameReader(r)
	var out []frame
	for {
		f, err := fr.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		f.data = append([]byte(nil), f.data...)
		out = append(out, f)
	}
}

func TestFrameReader(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string // event|data
		wantErr string
	}{
		{"execd raw", "{\"a\":1}\n\n{\"b\":2}\n\n", []string{`|{"a":1}`, `|{"b":2}`}, ""},
		{"no blank lines (metrics watch)", "{\"a\":1}\n{\"b\":2}\n", []string{`|{"a":1}`, `|{"b":2}`}, ""},
		{"no trailing newline", "{\"a\":1}", []string{`|{"a":1}`}, ""},
		{"crlf", "{\"a\":1}\r\n\r\ndata: {\"b\":2}\r\n\r\n", []string{`|{"a":1}`, `|{"b":2}`}, ""},
		{"multi-line raw json", "{\"a\":\n 1}\n\n", []string{"|{\"a\":\n 1}"}, ""},
		{"sse multi data", "event: x\ndata: {\"a\":\ndata: 1}\n\n", []string{"x|{\"a\":\n1}"}, ""},
		{"sse data no space", "data:{\"a\":1}\n\n", []string{`|{"a":1}`}, ""},
		{"sse dispatch at EOF", "data: {\"a\":1}", []string{`|{"a":1}`}, ""},
		{"comments and ids", ": hi\nid: 1\nretry: 5\ndata: {}\n\n", []string{`|{}`}, ""},
		{"event without data", "event: x\n\n{\"a\":1}\n\n", []string{`|{"a":1}`}, ""},
		{"leading blank lines", "\n\n\n{\"a\":1}\n", []string{`|{"a":1}`}, ""},
		{"garbage line", "hello world\n", nil, "unexpected line"},
		{"garbage after object", "{\"a\":1} trailing\n\n", nil, "invalid JSON"},
		{"two objects on a line", "{\"a\":1}{\"b\":2}\n\n", nil, "invalid JSON"},
		{"unterminated object", "{\"a\":\n", nil, "ended inside"},
		{"binary", "\x00\x01\x02\n", nil, "unexpected line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One byte at a time too, to exercise buffer boundaries.
			for _, r := range []io.Reader{strings.NewReader(tt.in), iotest.OneByteReader(strings.NewReader(tt.in))} {
				frames, err := readFrames(r)
				if tt.wantErr != "" {
					var fe *frameError
					if !errors.As(err, &fe) || !strings.Contains(fe.detail, tt.wantErr) {
						t.Fatalf("err = %v, want frameError containing %q", err, tt.wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				var got []string
				for _, f := range frames {
					got = append(got, f.event+"|"+string(f.data))
				}
				if strings.Join(got, "\x1e") != strings.Join(tt.want, "\x1e") {
					t.Errorf("frames = %q, want %q", got, tt.want)
				}
			}
		})
	}
}

func TestFrameReaderLineLimit(t *testing.T) {
	fr := newFrameReader(strings.NewReader("{\"a\":\"" + strings.Repeat("x", 100) + "\"}\n"))
	fr.max = 50
	var fe *frameError
	if _, err := fr.next(); !errors.As(err, &fe) || !strings.Contains(fe.detail, "longer than 50") {
		t.Fatalf("err = %v, want line-limit frameError", err)
	}
	fr = newFrameReader(strings.NewReader(strings.Repeat("data: xxxxxxxxxx\n", 10)))
	fr.max = 50
	if _, err := fr.next(); !errors.As(err, &fe) {
		t.Fatalf("err = %v, want event-limit frameError", err)
	}
}

func TestModeConversion(t *testing.T) {
	for _, tt := range []struct {
		wire int64
		mode uint32
	}{{644, 0o644}, {755, 0o755}, {0, 0}, {4755, 0o4755}, {777, 0o777}} {
		if got := modeFromWire(tt.wire); uint32(got) != tt.mode {
			t.Errorf("modeFromWire(%d) = %o, want %o", tt.wire, got, tt.mode)
		}
		if got := modeToWire(modeFromWire(tt.wire)); got != tt.wire {
			t.Errorf("round trip %d = %d", tt.wire, got)
		}
	}
	if got := modeFromWire(689); got != 0 {
		t.Errorf("modeFromWire(689) = %o, want 0 (not octal)", got)
	}
}

// FuzzStream feeds arbitrary bytes through the frame reader and event decoder: they
// must never panic, always end, and any failure must be a frameError or EOF.
func FuzzStream(f *testing.F) {
	f.Add([]byte("{\"type\":\"init\",\"text\":\"x\"}\n\n{\"type\":\"error\",\"error\":{\"evalue\":\"3\"}}\n\n"))
	f.Add([]byte("event: stdout\ndata: {\"text\":\"a\"}\n\n"))
	f.Add([]byte("data: {\"type\":\"x\",\ndata: \"text\":1}\r\n\r\n"))
	f.Add([]byte("{\"a\":\n"))
	f.Add([]byte("\x00\xff{}\n\n: c\n"))
	f.Add([]byte("{\"type\":\"execution_complete\",\"execution_time\":\"x\"}\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := newFrameReader(bytes.NewReader(in))
		fr.max = 1 << 12
		for i := 0; ; i++ {
			if i > len(in)+1 {
				t.Fatalf("more frames (%d) than input bytes (%d)", i, len(in))
			}
			f, err := fr.next()
			if err != nil {
				var fe *frameError
				if !errors.Is(err, io.EOF) && !errors.As(err, &fe) {
					t.Fatalf("err = %T %v, want EOF or frameError", err, err)
				}
				return
			}
			ev, err := decodeEvent(f)
			if err != nil {
				var fe *frameError
				if !errors.As(err, &fe) {
					t.Fatalf("decode err = %T %v, want frameError", err, err)
				}
				continue
			}
			if ev.Kind == "" {
				t.Fatal("decoded event without kind")
			}
			if ev.Kind == EventError {
				_ = exitCode(ev.Error)
			}
		}
	})
}
