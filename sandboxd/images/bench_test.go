package images_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/internal/registrytest"
	"github.com/alineo-labs/alineo/sandboxd/images"
	"github.com/alineo-labs/alineo/testenv"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// BenchmarkPull measures a cold pull (download, digest check, unpack) of a
// 50 MB image of 5 layers into an empty store, against a plain download of
// the same blobs, one after the other, with a gzip and tar extraction of
// each (stdlib, no checks), in one run. ratio = plain / pull (target ≥ 0.8).
func BenchmarkPull(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	reg := registrytest.New(b)
	rng := rand.New(rand.NewPCG(1, 2))
	var layers []v1.Layer
	for i := range 5 {
		var files []registrytest.File
		for j := range 10 {
			data := make([]byte, 1<<20)
			for k := range data {
				data[k] = byte(rng.Uint32())
			}
			files = append(files, registrytest.File{Name: filepath.Join("layer", string(rune('a'+i)), string(rune('a'+j))), Data: func() []byte { return data }})
		}
		layers = append(layers, registrytest.Layer(b, files...))
	}
	ref := reg.Push(b, "bench/big:1", registrytest.Image(b, v1.Config{}, layers...))
	var size int64
	for _, l := range layers {
		n, _ := l.Size()
		size += n
	}
	b.SetBytes(size)
	b.ResetTimer()
	var pull, plain time.Duration
	for range b.N {
		st, err := images.Open(images.Config{Dir: b.TempDir(), Insecure: []string{reg.Host}})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := st.Pull(context.Background(), ref, nil); err != nil {
			b.Fatal(err)
		}
		pull += time.Since(t0)
		st.Close()

		dir := b.TempDir()
		t0 = time.Now()
		for _, l := range layers {
			if err := plainFetch(reg.BlobURL("bench/big", registrytest.Digest(b, l)), dir); err != nil {
				b.Fatal(err)
			}
		}
		plain += time.Since(t0)
	}
	b.ReportMetric(float64(size)/1e6, "image-MB")
	b.ReportMetric(float64(pull.Milliseconds())/float64(b.N), "pull-ms")
	b.ReportMetric(float64(plain.Milliseconds())/float64(b.N), "plain-ms")
	b.ReportMetric(float64(plain)/float64(pull), "ratio")
	testenv.Target(b, "ratio", float64(plain)/float64(pull), 0.8, false)
}

// plainFetch downloads a gzip tar blob and extracts its files into dir.
func plainFetch(url, dir string) error {
	res, err := http.Get(url)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	zr, err := gzip.NewReader(res.Body)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, h.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}
