package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/sqlite"
)

// BenchmarkAppend measures Store.Append (lease check, head compare-and-set,
// insert, head update, blob references, one IMMEDIATE transaction each)
// against a raw INSERT of the same JSON body in its own transaction, on the
// same kind of file. It reports the ratio and both per-append latencies.
func BenchmarkAppend(b *testing.B) {
	const n = 300
	ctx := context.Background()
	mk := func(i int, parent string) *checkpoints.Checkpoint {
		c := &checkpoints.Checkpoint{ID: fmt.Sprintf("c%05d", i), ThreadID: "bench", ParentID: parent, Reason: checkpoints.ReasonAutomatic}
		for f := 0; f < 20; f++ {
			c.Files = append(c.Files, checkpoints.Entry{Path: fmt.Sprintf("f%02d", f), Kind: checkpoints.KindFile, BlobKey: fmt.Sprintf("%064d", f+i%3), Size: 1 << 20, Mode: 0o644})
		}
		return c
	}
	var ratio, rawUS, storeUS float64
	for iter := 0; iter < b.N; iter++ {
		dir := b.TempDir()
		raw, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "raw.db")+"?_txlock=immediate&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)")
		if err != nil {
			b.Fatal(err)
		}
		raw.SetMaxOpenConns(1)
		if _, err := raw.Exec(`CREATE TABLE t (seq INTEGER PRIMARY KEY, id TEXT UNIQUE, body TEXT)`); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		for i := 0; i < n; i++ {
			body, _ := mk(i, "").MarshalJSON() // as the store encodes
			tx, err := raw.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(`INSERT INTO t (id, body) VALUES (?, ?)`, fmt.Sprintf("c%05d", i), string(body)); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		rawD := time.Since(t0)
		_ = raw.Close()

		s, err := sqlite.Open(ctx, filepath.Join(dir, "store.db"), checkpoints.Options{})
		if err != nil {
			b.Fatal(err)
		}
		l, err := s.AcquireWriter(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		head := ""
		t1 := time.Now()
		for i := 0; i < n; i++ {
			if head, err = s.Append(ctx, checkpoints.AppendInput{Checkpoint: mk(i, head), ExpectedHead: head, Writer: l.Writer}); err != nil {
				b.Fatal(err)
			}
		}
		storeD := time.Since(t1)
		_ = s.Close()
		ratio = float64(storeD) / float64(rawD)
		rawUS = float64(rawD.Microseconds()) / n
		storeUS = float64(storeD.Microseconds()) / n
	}
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(rawUS, "raw-us/append")
	b.ReportMetric(storeUS, "store-us/append")
}
