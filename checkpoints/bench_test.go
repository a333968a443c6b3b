package checkpoints_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
)

// plainEntry and plainCheckpoint have the struct tags Checkpoint had before
// it spoke the contract's JSON: encoding/json's own reflection, no methods.
// They are the baseline of BenchmarkCodec.
type plainEntry struct {
	Path    string `json:"path"`
	Kind    string `json:"kind"`
	BlobKey string `json:"blobKey,omitempty"`
	Size    int64  `json:"size,omitempty"`
	Mode    uint32 `json:"mode,omitempty"`
	ModTime int64  `json:"mtime,omitempty"`
}

type plainCheckpoint struct {
	ID        string       `json:"id"`
	ThreadID  string       `json:"threadId"`
	ParentID  string       `json:"parentCheckpointId,omitempty"`
	CreatedAt time.Time    `json:"createdAt"`
	Reason    string       `json:"reason"`
	Files     []plainEntry `json:"files"`
}

// BenchmarkCodec encodes and decodes a checkpoint of 20,000 file entries (a
// large sandbox's manifest, which every SQL append and read goes through)
// as the stores do (MarshalJSON and UnmarshalJSON called directly), against
// encoding/json on a plain struct of the same fields, the format before the
// contract's JSON. It reports the time of each, the ratios (1 = as fast as
// the plain struct), and the ratios through json.Marshal and json.Unmarshal.
func BenchmarkCodec(b *testing.B) {
	const n = 20000
	c := checkpoints.Checkpoint{ID: "c1", ThreadID: "t1", ParentID: "c0", CreatedAt: time.UnixMilli(1764511387123).UTC(), Reason: checkpoints.ReasonAutomatic}
	p := plainCheckpoint{ID: c.ID, ThreadID: c.ThreadID, ParentID: c.ParentID, CreatedAt: c.CreatedAt, Reason: string(c.Reason)}
	for i := range n {
		e := checkpoints.Entry{Path: fmt.Sprintf("work/dir%03d/file%05d.go", i%500, i), Kind: checkpoints.KindFile,
			BlobKey: fmt.Sprintf("%064x", i), Size: int64(i * 37), Mode: 0o644, ModTime: 1764511387123456789 + int64(i)}
		c.Files = append(c.Files, e)
		p.Files = append(p.Files, plainEntry{Path: e.Path, Kind: string(e.Kind), BlobKey: e.BlobKey, Size: e.Size, Mode: e.Mode, ModTime: e.ModTime})
	}
	body, err := c.MarshalJSON()
	if err != nil {
		b.Fatal(err)
	}
	plainBody, err := json.Marshal(p)
	if err != nil {
		b.Fatal(err)
	}
	// Each figure is the best of rounds interleaved with the baseline's, so
	// that load from elsewhere on the machine weighs on both alike.
	var enc, plainEnc, dec, plainDec, viaMarshal, viaUnmarshal time.Duration
	best := func(d *time.Duration, f func() error) {
		t0 := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		if took := time.Since(t0); *d == 0 || took < *d {
			*d = took
		}
	}
	for b.Loop() {
		for range 3 {
			best(&enc, func() error { _, err := c.MarshalJSON(); return err })
			best(&plainEnc, func() error { _, err := json.Marshal(p); return err })
			best(&dec, func() error { var d checkpoints.Checkpoint; return d.UnmarshalJSON(body) })
			best(&plainDec, func() error { var d plainCheckpoint; return json.Unmarshal(plainBody, &d) })
			best(&viaMarshal, func() error { _, err := json.Marshal(c); return err })
			best(&viaUnmarshal, func() error { var d checkpoints.Checkpoint; return json.Unmarshal(body, &d) })
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(enc), "encode-ms")
	b.ReportMetric(ms(plainEnc), "plain-encode-ms")
	b.ReportMetric(float64(enc)/float64(plainEnc), "encode-ratio")
	b.ReportMetric(ms(dec), "decode-ms")
	b.ReportMetric(ms(plainDec), "plain-decode-ms")
	b.ReportMetric(float64(dec)/float64(plainDec), "decode-ratio")
	b.ReportMetric(float64(viaMarshal)/float64(plainEnc), "json.Marshal-ratio")
	b.ReportMetric(float64(viaUnmarshal)/float64(plainDec), "json.Unmarshal-ratio")
}
