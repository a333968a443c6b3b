package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/alineo-labs/alineo/events"
)

// decoderSeeds are messages a projection reads, valid and not.
func decoderSeeds() [][]byte {
	seeds := codecSeeds()
	for _, e := range []events.Entry{
		events.New(1764400000000, "job", "sbx-1", 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Kind: events.KindCommand, Cmd: "ls"}),
		events.New(1764400000001, "job", "sbx-1", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte("out\n"))),
		events.New(1764400000002, "other", "sbx-2", 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1}),
		{Ts: 3, Name: "job", SandboxID: "sbx-\xff", Event: events.SandboxClosed},
		{Ts: 3, Name: "jo\xffb", SandboxID: "sbx-1", Event: events.SandboxClosed},
		{Ts: 0, Name: "job", SandboxID: "sbx-1", Event: events.SandboxClosed},
		{Ts: 3, Name: "job", SandboxID: "sbx-1", Event: events.ExecStarted, Payload: json.RawMessage(`{"seq":"x"}`)},
	} {
		b, _ := json.Marshal(e)
		seeds = append(seeds, b, appendEntry(nil, e))
		// Invalid UTF-8 written as is (json.Marshal would replace it).
		seeds = append(seeds, bytes.ReplaceAll(appendEntry(nil, e), []byte(`\ufffd`), []byte("\xff")))
	}
	return seeds
}

// checkDecoder decodes data with d as if its subject named sandboxID and
// compares with DecodeValidMsg: the same entry or the same error.
func checkDecoder(t *testing.T, d *Decoder, data []byte, sandboxID string) {
	t.Helper()
	want, werr := DecodeValidMsg(data, 11)
	got, err := d.DecodeValid(data, 11, sandboxID)
	if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
		t.Fatalf("DecodeValid(%q, %q) error = %v, DecodeValidMsg: %v", data, sandboxID, err, werr)
	}
	if err != nil && !errors.Is(err, events.ErrInvalidEntry) {
		t.Fatalf("DecodeValid(%q) error %v does not wrap ErrInvalidEntry", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeValid(%q, %q) = %+v, DecodeValidMsg: %+v", data, sandboxID, got, want)
	}
}

func TestDecoderMatchesDecodeValidMsg(t *testing.T) {
	seeds := decoderSeeds()
	var d Decoder
	// Each message after every other (the strings a Decoder keeps come from
	// the one before), with the subject's sandbox id right, wrong, invalid and unknown.
	for _, prev := range seeds {
		for _, data := range seeds {
			for _, id := range []string{"sbx-1", "sbx-2", "sbx-\xff", ""} {
				checkDecoder(t, &d, prev, id)
				checkDecoder(t, &d, data, id)
			}
		}
	}
}

// FuzzDecoder: a Decoder decodes what DecodeValidMsg does, whatever it
// decoded before.
func FuzzDecoder(f *testing.F) {
	seeds := decoderSeeds()
	for i, s := range seeds {
		f.Add(seeds[(i+1)%len(seeds)], s, "sbx-1")
	}
	f.Fuzz(func(t *testing.T, prev, data []byte, id string) {
		var d Decoder
		checkDecoder(t, &d, prev, id)
		checkDecoder(t, &d, data, id)
		checkDecoder(t, &d, data, "")
	})
}

// TestDecoderNamesBounded: the names a Decoder keeps are bounded.
func TestDecoderNamesBounded(t *testing.T) {
	var d Decoder
	for i := range 2 * maxNames {
		e := events.New(1, "n"+string(rune('a'+i%26))+string(rune(i)), "s", 1, events.SandboxClosed, nil)
		if _, err := d.DecodeValid(appendEntry(nil, e), 1, "s"); err != nil {
			t.Fatal(err)
		}
		if got := len(d.in.names); got > maxNames {
			t.Fatalf("names = %d, want at most %d", got, maxNames)
		}
	}
}

// BenchmarkDecoder: a projection's decode of an exec.output message, the
// Decoder against DecodeValidMsg.
func BenchmarkDecoder(b *testing.B) {
	data := appendEntry(nil, events.New(1764400000001, "job", "sbx-00001", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte("line 1 of step 1\n"))))
	b.Run("DecodeValidMsg", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := DecodeValidMsg(data, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Decoder", func(b *testing.B) {
		b.ReportAllocs()
		var d Decoder
		for range b.N {
			if _, err := d.DecodeValid(data, 1, "sbx-00001"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
