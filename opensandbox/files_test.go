package opensandbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/opensandbox"
)

// patternReader generates n deterministic bytes without holding them.
type patternReader struct {
	n, off int64
	reads  atomic.Int64
}

func (p *patternReader) Read(b []byte) (int, error) {
	p.reads.Add(1)
	if p.off >= p.n {
		return 0, io.EOF
	}
	if int64(len(b)) > p.n-p.off {
		b = b[:p.n-p.off]
	}
	for i := range b {
		b[i] = byte((p.off + int64(i)) * 7 % 251)
	}
	p.off += int64(len(b))
	return len(b), nil
}

type uploadSeen struct {
	parts     []string // "form/filename/content-type"
	meta      map[string]any
	size      int64
	sizes     []int64
	metas     []string
	sum       [32]byte
	transfer  []string
	ctLength  int64
	headerTok string
}

// uploadServer parses the multipart upload as execd does (pairs of metadata + file
// parts), streaming: it never buffers the file.
func uploadServer(t *testing.T, seen *uploadSeen) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/files/upload" {
			writeJSON(w, 404, `{"code":"NOT_FOUND","message":"route"}`)
			return
		}
		seen.transfer, seen.ctLength, seen.headerTok = r.TransferEncoding, r.ContentLength, r.Header.Get("X-EXECD-ACCESS-TOKEN")
		mr, err := r.MultipartReader()
		if err != nil {
			writeJSON(w, 400, `{"code":"INVALID_FILE","message":"not multipart"}`)
			return
		}
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				writeJSON(w, 400, `{"code":"INVALID_FILE","message":"bad part"}`)
				return
			}
			seen.parts = append(seen.parts, p.FormName()+"/"+p.FileName()+"/"+p.Header.Get("Content-Type"))
			switch p.FormName() {
			case "metadata":
				if p.FileName() == "" {
					writeJSON(w, 400, `{"code":"INVALID_FILE_METADATA","message":"metadata file is missing"}`)
					return
				}
				_ = json.NewDecoder(p).Decode(&seen.meta)
				seen.metas = append(seen.metas, seen.meta["path"].(string))
			case "file":
				h := sha256.New()
				n, _ := io.Copy(h, p)
				seen.size = n
				seen.sizes = append(seen.sizes, n)
				copy(seen.sum[:], h.Sum(nil))
			}
		}
		w.WriteHeader(200)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func execdAt(t *testing.T, u string) *opensandbox.Execd {
	t.Helper()
	ex, err := opensandbox.NewExecd(opensandbox.EndpointConfig{Endpoint: opensandbox.Endpoint{URL: u,
		Headers: map[string]string{"X-EXECD-ACCESS-TOKEN": "tok"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	return ex
}

func TestUploadMultipartShape(t *testing.T) {
	var seen uploadSeen
	ex := execdAt(t, uploadServer(t, &seen).URL)
	err := ex.UploadFile(context.Background(), "/home/u/a.txt", strings.NewReader("hello"),
		opensandbox.Permission{Mode: 0o640, Owner: "u"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"metadata/metadata/application/json", "file/a.txt/application/octet-stream"}
	if strings.Join(seen.parts, ",") != strings.Join(want, ",") {
		t.Errorf("parts = %v, want %v", seen.parts, want)
	}
	if seen.meta["path"] != "/home/u/a.txt" || seen.meta["mode"] != float64(640) || seen.meta["owner"] != "u" {
		t.Errorf("metadata = %v, want path, mode 640, owner", seen.meta)
	}
	if seen.size != 5 || seen.sum != sha256.Sum256([]byte("hello")) || seen.headerTok != "tok" {
		t.Errorf("file size %d token %q", seen.size, seen.headerTok)
	}
}

// A 50 MB upload is streamed: the bytes allocated while sending stay far below the
// file size, and the server receives every byte.
func TestUploadStreamsLargeBody(t *testing.T) {
	const size = 50 << 20
	var seen uploadSeen
	ex := execdAt(t, uploadServer(t, &seen).URL)
	want := sha256.New()
	if _, err := io.Copy(want, &patternReader{n: size}); err != nil {
		t.Fatal(err)
	}

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	err := ex.UploadFile(context.Background(), "/big.bin", &patternReader{n: size}, opensandbox.Permission{})
	close(stop)
	<-sampled
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if seen.size != size || !bytes.Equal(seen.sum[:], want.Sum(nil)) {
		t.Fatalf("server got %d bytes (hash match %v), want %d", seen.size, bytes.Equal(seen.sum[:], want.Sum(nil)), size)
	}
	if seen.ctLength != -1 || len(seen.transfer) == 0 || seen.transfer[0] != "chunked" {
		t.Errorf("upload was not streamed: Content-Length %d, Transfer-Encoding %v", seen.ctLength, seen.transfer)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	growth := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("upload of %d MiB: allocated %d KiB, peak heap growth %d KiB", size>>20, allocated>>10, growth>>10)
	if allocated > size/4 {
		t.Errorf("allocated %d bytes for a %d-byte upload; the body is being buffered", allocated, size)
	}
	if growth > size/4 {
		t.Errorf("peak heap grew by %d bytes for a %d-byte upload", growth, size)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestUploadErrors(t *testing.T) {
	var seen uploadSeen
	ex := execdAt(t, uploadServer(t, &seen).URL)
	err := ex.UploadFile(context.Background(), "/a", failingReader{}, opensandbox.Permission{})
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("err = %v, want the source error", err)
	}

	// The server rejects before reading the body: the API error comes back and the
	// source is not read after UploadFile returns.
	reject := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 400, `{"code":"INVALID_FILE_CONTENT","message":"no file"}`)
	}))
	defer reject.Close()
	src := &patternReader{n: 20 << 20}
	err = execdAt(t, reject.URL).UploadFile(context.Background(), "/a", src, opensandbox.Permission{})
	var apiErr *opensandbox.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != "INVALID_FILE_CONTENT" {
		t.Fatalf("err = %v, want INVALID_FILE_CONTENT", err)
	}
	reads := src.reads.Load()
	time.Sleep(50 * time.Millisecond)
	if got := src.reads.Load(); got != reads {
		t.Errorf("source read %d more times after UploadFile returned", got-reads)
	}
	if err := ex.UploadFile(context.Background(), "", strings.NewReader(""), opensandbox.Permission{}); !errors.Is(err, opensandbox.ErrInvalidRequest) {
		t.Errorf("empty path err = %v", err)
	}
}

func TestDownload(t *testing.T) {
	content := "hello world 12345"
	var lastRange atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lastRange.Store(r.Header.Get("Range"))
		if r.URL.Path != "/files/download" || r.URL.Query().Get("path") != "/tmp/a.txt" {
			writeJSON(w, 404, `{"code":"FILE_NOT_FOUND","message":"missing"}`)
			return
		}
		w.Header().Set("Content-Disposition", `attachment; filename="a.txt"`)
		http.ServeContent(w, r, "a.txt", time.Time{}, strings.NewReader(content))
	}))
	defer srv.Close()
	ex := execdAt(t, srv.URL)
	ctx := context.Background()
	read := func(rc io.ReadCloser, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read(ex.DownloadFile(ctx, "/tmp/a.txt")); got != content {
		t.Errorf("full = %q", got)
	}
	if got := read(ex.DownloadRange(ctx, "/tmp/a.txt", 0, 5)); got != "hello" || lastRange.Load() != "bytes=0-4" {
		t.Errorf("range = %q (Range %v), want hello with bytes=0-4", got, lastRange.Load())
	}
	if got := read(ex.DownloadRange(ctx, "/tmp/a.txt", 6, -1)); got != "world 12345" || lastRange.Load() != "bytes=6-" {
		t.Errorf("open range = %q (Range %v)", got, lastRange.Load())
	}
	if _, err := ex.DownloadRange(ctx, "/tmp/a.txt", 100, 5); !errors.Is(err, opensandbox.ErrRangeNotSatisfiable) {
		t.Errorf("past end err = %v, want ErrRangeNotSatisfiable", err)
	}
	if _, err := ex.DownloadFile(ctx, "/nope"); !errors.Is(err, opensandbox.ErrNotFound) {
		t.Errorf("missing err = %v, want ErrNotFound", err)
	}
}

func TestUploadFilesPairsInOrder(t *testing.T) {
	var seen uploadSeen
	ex := execdAt(t, uploadServer(t, &seen).URL)
	err := ex.UploadFiles(context.Background(),
		opensandbox.Upload{Path: "/a/one.txt", Reader: strings.NewReader("1")},
		opensandbox.Upload{Path: "/b/two.txt", Reader: &patternReader{n: 3 << 20}, Permission: opensandbox.Permission{Mode: 0o600}},
		opensandbox.Upload{Path: "/c/empty", Reader: strings.NewReader("")},
	)
	if err != nil {
		t.Fatal(err)
	}
	wantParts := []string{"metadata/metadata/application/json", "file/one.txt/application/octet-stream",
		"metadata/metadata/application/json", "file/two.txt/application/octet-stream",
		"metadata/metadata/application/json", "file/empty/application/octet-stream"}
	if strings.Join(seen.parts, ",") != strings.Join(wantParts, ",") {
		t.Errorf("parts = %v, want %v", seen.parts, wantParts)
	}
	if got, want := strings.Join(seen.metas, ","), "/a/one.txt,/b/two.txt,/c/empty"; got != want {
		t.Errorf("metadata paths = %s, want %s", got, want)
	}
	if len(seen.sizes) != 3 || seen.sizes[0] != 1 || seen.sizes[1] != 3<<20 || seen.sizes[2] != 0 {
		t.Errorf("sizes = %v", seen.sizes)
	}
	if err := ex.UploadFiles(context.Background()); !errors.Is(err, opensandbox.ErrInvalidRequest) {
		t.Errorf("no files err = %v", err)
	}
	if err := ex.UploadFiles(context.Background(), opensandbox.Upload{Path: "/x"}); !errors.Is(err, opensandbox.ErrInvalidRequest) {
		t.Errorf("nil reader err = %v", err)
	}
}
