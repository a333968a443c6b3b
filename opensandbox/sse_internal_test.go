package opensandbox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/alineo-labs/alineo/testenv"
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

// flatCases are event objects decodeFlat must decode exactly as encoding/json
// does, or hand over to it (flatOther), or wait for more of (flatIncomplete).
var flatCases = []string{
	`{"type":"stdout","text":"hi","timestamp":1700000000000}`,
	` { "type" : "stderr" , "text" : "a\"b\\c\/d\b\f\n\r\t" } `,
	`{"type":"stdout","text":"\u003cb\u003e \u00e9 \u20ac \u0000 \u001b[0m"}`,
	`{"type":"stdout","text":"caf\u00E9 ünï ✓ 🎉"}`,
	`{"type":"stdout","text":"\ud83c\udf89 pair"}`,
	`{"type":"stdout","text":"\ud83c lone"}`,
	`{"type":"stdout","text":"x","data":"/w=="}`,
	`{"type":"stdout","data":"not base64!"}`,
	`{"type":"stdout","data":"a\/b="}`,
	`{"type":"execution_complete","execution_time":12,"timestamp":-3}`,
	`{"type":"execution_count","execution_count":7}`,
	`{"type":"ping","timestamp":1.5}`,
	`{"type":"ping","timestamp":1e3}`,
	`{"type":"ping","timestamp":01}`,
	`{"type":"ping","timestamp":-}`,
	`{"type":"ping","timestamp":99999999999999999999}`,
	`{"type":"ping","timestamp":null}`,
	`{"type":null}`,
	`{"Type":"stdout"}`,
	`{"ty\u0070e":"stdout"}`,
	`{"type":"error","error":{"ename":"E","evalue":"2","traceback":["t"]}}`,
	`{"type":"error","ename":"E","evalue":"2"}`,
	`{"type":"result","results":{"text":"1"}}`,
	`{"type":"stdout","text":"a","text":"b"}`,
	`{"text":"no type"}`,
	`{}`,
	`{"type":"stdout"} x`,
	`{"type":"stdout"}{"type":"stdout"}`,
	`{"type":"stdout",}`,
	`{"type" "stdout"}`,
	`{"type":"stdout" "text":"x"}`,
	"{\"type\":\"stdout\",\"text\":\"tab\there\"}",
	"{\"type\":\"stdout\",\"text\":\"bad \xff byte\"}",
	`{"type":"stdout","text":"\x"}`,
	`{"type":"stdout","text":"\u12G4"}`,
	`[1]`,
	`{"type":"stdout","text":"hi"`,
	`{"type":"stdout","text":"h`,
	`{"type":"stdout","text":"h\`,
	`{"type":"stdout","text":"\u00`,
	`{"type":"stdout","timestamp":12`,
	`{"type":`,
	`{"type"`,
	`{`,
	`   `,
}

// TestDecodeFlatMatchesEncodingJSON: whatever decodeFlat decodes, it decodes
// as json.Unmarshal does; what it reports incomplete, json.Unmarshal reports as
// an unexpected end; and it never accepts what encoding/json rejects.
func TestDecodeFlatMatchesEncodingJSON(t *testing.T) {
	for _, in := range flatCases {
		checkFlat(t, in)
	}
	decoded := 0
	for _, in := range flatCases {
		var ev Event
		var scratch []byte
		if decodeFlat([]byte(in), &ev, &scratch) == flatOK {
			decoded++
		}
	}
	if decoded < 8 { // the common shapes must take the fast path
		t.Errorf("decodeFlat decoded %d cases, want the common ones", decoded)
	}
}

func checkFlat(t *testing.T, in string) {
	t.Helper()
	var got Event
	var scratch []byte
	res := decodeFlat([]byte(in), &got, &scratch)
	var want Event
	err := json.Unmarshal([]byte(in), &want)
	switch res {
	case flatOK:
		if err != nil {
			t.Errorf("%q: decodeFlat accepted it, encoding/json: %v", in, err)
		} else if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: decodeFlat = %+v, encoding/json = %+v", in, got, want)
		}
	case flatIncomplete:
		var se *json.SyntaxError
		if err == nil || !errors.As(err, &se) || !strings.Contains(err.Error(), "unexpected end") {
			t.Errorf("%q: decodeFlat incomplete, encoding/json: %v", in, err)
		}
	}
}

func FuzzDecodeFlat(f *testing.F) {
	for _, in := range flatCases {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in string) { checkFlat(t, in) })
}

// TestFrameReaderDecodesOnce: an output line is decoded by the reader as it
// finds its end, and the frame carries the event; a line split across reads
// and an object spanning lines decode the same.
func TestFrameReaderDecodesOnce(t *testing.T) {
	in := "{\"type\":\"stdout\",\"text\":\"a\\nb\",\"timestamp\":5}\n\n{\"type\":\n\"stderr\",\"text\":\"c\"}\n\n"
	for _, r := range []io.Reader{strings.NewReader(in), iotest.OneByteReader(strings.NewReader(in))} {
		fr := newFrameReader(r)
		var got []Event
		for {
			f, err := fr.next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if !f.decoded {
				t.Fatalf("frame %q not decoded by the reader", f.data)
			}
			ev, err := decodeEvent(f)
			if err != nil {
				t.Fatal(err)
			}
			ev.Raw = nil
			got = append(got, ev)
		}
		want := []Event{{Kind: EventStdout, Text: "a\nb", Timestamp: 5}, {Kind: EventStderr, Text: "c"}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("events = %+v, want %+v", got, want)
		}
	}
}

// legacyFrames reads frames as the reader did before decodeFlat: every line
// copied, each object checked with json.Valid, then decoded by json.Unmarshal
// (which checks it again).
func legacyFrames(r io.Reader, each func(Event)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line[:0], chunk...)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		l := trimEOL(line)
		if len(l) == 0 {
			continue
		}
		raw := append([]byte(nil), l...)
		if !json.Valid(raw) {
			return errors.New("invalid")
		}
		ev, err := decodeEvent(frame{data: raw})
		if err != nil {
			return err
		}
		each(ev)
	}
}

// benchStream is size bytes of output (1000-byte lines) as sandboxd sends
// them: exact chunks of 32 lines (text with "\n" escapes), or execd's lines.
func benchStream(size int, exact bool) []byte {
	line := strings.Repeat("x", 999)
	var b bytes.Buffer
	per := 1
	if exact {
		per = 32
	}
	for n := 0; n < size; n += 1000 * per {
		text := line
		if exact {
			text = strings.Repeat(line+`\n`, per)
		}
		fmt.Fprintf(&b, "{\"type\":\"stdout\",\"text\":\"%s\",\"timestamp\":1764590000000}\n\n", text)
	}
	return b.Bytes()
}

// BenchmarkFrameDecode reads 200 MB of output events (20 MB with -short)
// through the frame reader and decoder, against the previous decode
// (json.Valid, then json.Unmarshal) of the same bytes, alternating.
// ratio = new MB/s / previous MB/s (target >= 1.1).
func BenchmarkFrameDecode(b *testing.B) {
	size := 200_000_000
	if testing.Short() {
		size = 20_000_000
	}
	for _, exact := range []bool{true, false} {
		name := "lines"
		if exact {
			name = "exact"
		}
		b.Run(name, func(b *testing.B) {
			in := benchStream(size, exact)
			var cur, old time.Duration
			for b.Loop() {
				start := time.Now()
				n := 0
				fr := newFrameReader(bytes.NewReader(in))
				for {
					f, err := fr.next()
					if errors.Is(err, io.EOF) {
						break
					}
					ev, err := decodeEvent(f)
					if err != nil {
						b.Fatal(err)
					}
					n += len(ev.Text)
				}
				cur += time.Since(start)
				start = time.Now()
				m := 0
				if err := legacyFrames(bytes.NewReader(in), func(ev Event) { m += len(ev.Text) }); err != nil || m != n {
					b.Fatalf("legacy read %d bytes (%v), new %d", m, err, n)
				}
				old += time.Since(start)
			}
			mb := float64(len(in)) * float64(b.N) / 1e6
			b.ReportMetric(mb/cur.Seconds(), "MB/s")
			b.ReportMetric(mb/old.Seconds(), "previous-MB/s")
			b.ReportMetric(old.Seconds()/cur.Seconds(), "ratio")
			testenv.Target(b, "ratio", old.Seconds()/cur.Seconds(), 1.1, false)
		})
	}
}
