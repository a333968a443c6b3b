package execd_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd/execd"
)

type fileInfo struct {
	Path       string `json:"path"`
	Type       string `json:"type"`
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modified_at"`
	CreatedAt  string `json:"created_at"`
	Owner      string `json:"owner"`
	Group      string `json:"group"`
	Mode       int    `json:"mode"`
}

type uploadFile struct {
	meta    string // JSON metadata; "" = no metadata part
	content io.Reader
	noName  bool // metadata part without a filename
	noFile  bool // no file part
}

// upload streams a multipart body the way the SDK builds it (metadata part with a filename,
// then the file part) through a pipe, so the client holds no file in memory either.
func (e *env) upload(files ...uploadFile) *http.Response {
	e.t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := func() error {
			for _, f := range files {
				if f.meta != "" {
					h := textproto.MIMEHeader{}
					if f.noName {
						h.Set("Content-Disposition", `form-data; name="metadata"`)
					} else {
						h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
					}
					h.Set("Content-Type", "application/json")
					w, err := mw.CreatePart(h)
					if err != nil {
						return err
					}
					if _, err := io.WriteString(w, f.meta); err != nil {
						return err
					}
				}
				if !f.noFile {
					w, err := mw.CreateFormFile("file", "file")
					if err != nil {
						return err
					}
					if _, err := io.Copy(w, f.content); err != nil {
						return err
					}
				}
			}
			return mw.Close()
		}()
		pw.CloseWithError(err)
	}()
	req, _ := http.NewRequest("POST", e.http.URL+"/files/upload", pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatalf("upload: %v", err)
	}
	return resp
}

func (e *env) info(paths ...string) map[string]fileInfo {
	e.t.Helper()
	q := ""
	for _, p := range paths {
		q += "&path=" + p
	}
	var out map[string]fileInfo
	if err := json.Unmarshal(wantStatus(e.t, e.do("GET", "/files/info?"+q[1:], nil), 200), &out); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func TestUploadInfoDownload(t *testing.T) {
	e := newEnv(t, execd.Config{})
	wantStatus(t, e.upload(
		uploadFile{meta: `{"path":"/a/b/hello.txt","mode":640}`, content: strings.NewReader("hello, world\n")},
		uploadFile{meta: `{"path":"/x.bin"}`, content: strings.NewReader("xyz"), noName: true},
	), 200)
	got, err := os.ReadFile(filepath.Join(e.root, "a", "b", "hello.txt"))
	if err != nil || string(got) != "hello, world\n" {
		t.Fatalf("uploaded file = %q, %v", got, err)
	}
	infos := e.info("/a/b/hello.txt", "/x.bin", "/a")
	if fi := infos["/a/b/hello.txt"]; fi.Path != "/a/b/hello.txt" || fi.Type != "file" || fi.Size != 13 || fi.Mode != 640 || fi.Owner == "" || fi.ModifiedAt == "" {
		t.Fatalf("info = %+v", fi)
	}
	if fi := infos["/x.bin"]; fi.Mode != 755 {
		t.Fatalf("default upload mode = %d, want 755 (0777 &^ umask 022)", fi.Mode)
	}
	if fi := infos["/a"]; fi.Type != "directory" {
		t.Fatalf("dir info = %+v", fi)
	}
	wantError(t, e.do("GET", "/files/info?path=/a/b/hello.txt&path=/missing", nil), 404, "FILE_NOT_FOUND")
	if b := wantStatus(t, e.do("GET", "/files/info", nil), 200); string(b) != "{}" {
		t.Fatalf("info without a path = %s, want {}", b)
	}

	resp := e.do("GET", "/files/download?path=/a/b/hello.txt", nil)
	if b := wantStatus(t, resp, 200); string(b) != "hello, world\n" {
		t.Fatalf("download = %q", b)
	}
	if got, want := resp.Header.Get("Content-Disposition"), `attachment; filename="hello.txt"`; got != want {
		t.Fatalf("Content-Disposition = %q, want %q", got, want)
	}
	resp = e.do("GET", "/files/download?path=/a/b/hello.txt", nil, "Range", "bytes=0-4")
	if b := wantStatus(t, resp, 206); string(b) != "hello" || resp.Header.Get("Content-Range") != "bytes 0-4/13" {
		t.Fatalf("range = %q, %q", b, resp.Header.Get("Content-Range"))
	}
	wantStatus(t, e.do("GET", "/files/download?path=/a/b/hello.txt", nil, "Range", "bytes=100-200"), 416)
	wantError(t, e.do("GET", "/files/download?path=/nope", nil), 404, "FILE_NOT_FOUND")
	wantError(t, e.do("GET", "/files/download?path=/a", nil), 400, "INVALID_FILE")
	wantError(t, e.do("GET", "/files/download", nil), 400, "MISSING_QUERY")
}

func TestUploadErrors(t *testing.T) {
	e := newEnv(t, execd.Config{})
	for _, tc := range []struct {
		name  string
		files []uploadFile
		code  string
	}{
		{"file without metadata", []uploadFile{{content: strings.NewReader("x")}}, "INVALID_FILE_METADATA"},
		{"metadata without file", []uploadFile{{meta: `{"path":"/a"}`, noFile: true}}, "INVALID_FILE_CONTENT"},
		{"no parts", nil, "INVALID_FILE_CONTENT"},
		{"bad metadata json", []uploadFile{{meta: `{"path":`, content: strings.NewReader("x")}}, "INVALID_FILE_METADATA"},
		{"metadata without path", []uploadFile{{meta: `{}`, content: strings.NewReader("x")}}, "INVALID_FILE_METADATA"},
		{"bad mode", []uploadFile{{meta: `{"path":"/a","mode":789}`, content: strings.NewReader("x")}}, "INVALID_REQUEST_BODY"},
		{"unknown owner", []uploadFile{{meta: `{"path":"/a","owner":"no-such-user-xyz"}`, content: strings.NewReader("x")}}, "INVALID_REQUEST_BODY"},
		{"target is root", []uploadFile{{meta: `{"path":"/"}`, content: strings.NewReader("x")}}, "INVALID_FILE_METADATA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.upload(tc.files...), 400, tc.code)
		})
	}
	wantError(t, e.do("POST", "/files/upload", "not multipart"), 400, "INVALID_FILE")
	if _, err := os.Stat(filepath.Join(e.root, "a")); !os.IsNotExist(err) {
		t.Fatalf("a failed upload left a file: %v", err)
	}
}

func TestFileOperations(t *testing.T) {
	e := newEnv(t, execd.Config{})
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(e.root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("src/a.go", "package a // localhost localhost")
	write("src/b.txt", "no match")
	write("src/deep/c.go", "localhost:8080")

	// replace
	b := wantStatus(t, e.do("POST", "/files/replace?verbose=true", map[string]any{
		"/src/a.go":      map[string]string{"old": "localhost", "new": "0.0.0.0"},
		"/src/b.txt":     map[string]string{"old": "localhost", "new": "0.0.0.0"},
		"/src/deep/c.go": map[string]string{"old": "localhost:8080", "new": ""},
	}), 200)
	var counts map[string]struct{ ReplacedCount int }
	if err := json.Unmarshal(b, &counts); err != nil {
		t.Fatal(err)
	}
	if counts["/src/a.go"].ReplacedCount != 2 || counts["/src/b.txt"].ReplacedCount != 0 || counts["/src/deep/c.go"].ReplacedCount != 1 {
		t.Fatalf("counts = %s", b)
	}
	if got, _ := os.ReadFile(filepath.Join(e.root, "src/a.go")); string(got) != "package a // 0.0.0.0 0.0.0.0" {
		t.Fatalf("replaced = %q", got)
	}
	if fi := e.info("/src/a.go")["/src/a.go"]; fi.Mode != 644 {
		t.Fatalf("mode after replace = %d, want 644", fi.Mode)
	}
	if b := wantStatus(t, e.do("POST", "/files/replace", map[string]any{"/src/a.go": map[string]string{"old": "a", "new": "b"}}), 200); len(b) != 0 {
		t.Fatalf("non-verbose replace body = %q, want empty", b)
	}
	wantError(t, e.do("POST", "/files/replace", map[string]any{"/src/a.go": map[string]string{"old": "", "new": "x"}}), 400, "INVALID_REQUEST_BODY")
	wantError(t, e.do("POST", "/files/replace", map[string]any{"/nope": map[string]string{"old": "a", "new": "x"}}), 404, "FILE_NOT_FOUND")

	// search
	search := func(q string) []string {
		t.Helper()
		var fis []fileInfo
		if err := json.Unmarshal(wantStatus(t, e.do("GET", "/files/search?"+q, nil), 200), &fis); err != nil {
			t.Fatal(err)
		}
		var ps []string
		for _, fi := range fis {
			ps = append(ps, fi.Path)
		}
		sort.Strings(ps)
		return ps
	}
	if got, want := strings.Join(search("path=/src&pattern=*.go"), ","), "/src/a.go,/src/deep/c.go"; got != want {
		t.Fatalf("search *.go = %q, want %q", got, want)
	}
	if got, want := strings.Join(search("path=/src"), ","), "/src/a.go,/src/b.txt,/src/deep/c.go"; got != want {
		t.Fatalf("search ** = %q, want %q", got, want)
	}
	if got, want := strings.Join(search("path=/src&pattern=deep/**"), ","), "/src/deep/c.go"; got != want {
		t.Fatalf("search deep/** = %q, want %q", got, want)
	}
	wantError(t, e.do("GET", "/files/search?path=/src&pattern=[", nil), 400, "INVALID_REQUEST_BODY")
	wantError(t, e.do("GET", "/files/search?path=/nope", nil), 404, "FILE_NOT_FOUND")
	wantError(t, e.do("GET", "/files/search?path=/src/a.go", nil), 400, "INVALID_FILE")
	wantError(t, e.do("GET", "/files/search", nil), 400, "MISSING_QUERY")

	// permissions
	wantStatus(t, e.do("POST", "/files/permissions", map[string]any{"/src/a.go": map[string]any{"mode": 600, "owner": "0", "group": "0"}}), 200)
	if fi := e.info("/src/a.go")["/src/a.go"]; fi.Mode != 600 {
		t.Fatalf("mode = %d, want 600", fi.Mode)
	}
	wantError(t, e.do("POST", "/files/permissions", map[string]any{"/src/a.go": map[string]any{"mode": 800}}), 400, "INVALID_REQUEST_BODY")
	wantError(t, e.do("POST", "/files/permissions", map[string]any{"/nope": map[string]any{"mode": 600}}), 500, "RUNTIME_ERROR")
	wantError(t, e.do("POST", "/files/permissions", `[`), 400, "INVALID_REQUEST_BODY")

	// mv
	wantStatus(t, e.do("POST", "/files/mv", []map[string]string{{"src": "/src/b.txt", "dest": "/src/deep/b2.txt"}}), 200)
	if _, err := os.Stat(filepath.Join(e.root, "src/deep/b2.txt")); err != nil {
		t.Fatalf("moved file missing: %v", err)
	}
	wantError(t, e.do("POST", "/files/mv", []map[string]string{{"src": "/src/b.txt", "dest": "/x"}}), 404, "FILE_NOT_FOUND")
	wantError(t, e.do("POST", "/files/mv", []map[string]string{{"src": "/src/a.go", "dest": "/no/dir/x"}}), 404, "FILE_NOT_FOUND")
	wantError(t, e.do("POST", "/files/mv", []map[string]string{{"src": "/src/a.go"}}), 400, "INVALID_REQUEST_BODY")

	// delete files
	wantStatus(t, e.do("DELETE", "/files?path=/src/a.go&path=/src/deep/b2.txt", nil), 200)
	if _, err := os.Stat(filepath.Join(e.root, "src/a.go")); !os.IsNotExist(err) {
		t.Fatalf("deleted file still there: %v", err)
	}
	// As the real execd: a missing file is no error, a directory is a 500.
	wantStatus(t, e.do("DELETE", "/files?path=/src/a.go", nil), 200)
	wantError(t, e.do("DELETE", "/files?path=/src", nil), 500, "RUNTIME_ERROR")
	wantStatus(t, e.do("DELETE", "/files", nil), 200)
}

func TestDirectories(t *testing.T) {
	e := newEnv(t, execd.Config{})
	wantStatus(t, e.do("POST", "/directories", map[string]any{
		"/p/q/r": map[string]any{"mode": 700},
		"/p/z":   map[string]any{"mode": 0},
	}), 200)
	if err := os.WriteFile(filepath.Join(e.root, "p", "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("q", filepath.Join(e.root, "p", "link")); err != nil {
		t.Fatal(err)
	}
	if fi := e.info("/p/q/r")["/p/q/r"]; fi.Mode != 700 || fi.Type != "directory" {
		t.Fatalf("created dir = %+v", fi)
	}
	list := func(q string) string {
		t.Helper()
		var fis []fileInfo
		if err := json.Unmarshal(wantStatus(t, e.do("GET", "/directories/list?"+q, nil), 200), &fis); err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, fi := range fis {
			s = append(s, fi.Path+":"+fi.Type)
		}
		return strings.Join(s, ",")
	}
	if got, want := list("path=/p"), "/p/a.txt:file,/p/link:symlink,/p/q:directory,/p/z:directory"; got != want {
		t.Fatalf("depth 1 = %q, want %q", got, want)
	}
	if got, want := list("path=/p&depth=3"), "/p/a.txt:file,/p/link:symlink,/p/q:directory,/p/q/r:directory,/p/z:directory"; got != want {
		t.Fatalf("depth 3 = %q, want %q", got, want)
	}
	if got := list("path=/p&depth=0"); got != "" {
		t.Fatalf("depth 0 = %q, want empty", got)
	}
	wantError(t, e.do("GET", "/directories/list?path=/p/link", nil), 400, "INVALID_FILE")
	wantError(t, e.do("GET", "/directories/list?path=/p/a.txt", nil), 400, "INVALID_FILE")
	wantError(t, e.do("GET", "/directories/list?path=/nope", nil), 404, "FILE_NOT_FOUND")
	wantError(t, e.do("GET", "/directories/list?path=/p&depth=-1", nil), 400, "INVALID_REQUEST_BODY")
	wantError(t, e.do("POST", "/directories", map[string]any{"/x": map[string]any{"mode": 9}}), 400, "INVALID_REQUEST_BODY")

	wantStatus(t, e.do("DELETE", "/directories?path=/p/q&path=/p/never-existed", nil), 200)
	if _, err := os.Stat(filepath.Join(e.root, "p", "q")); !os.IsNotExist(err) {
		t.Fatalf("directory still there: %v", err)
	}
	wantError(t, e.do("DELETE", "/directories?path=/", nil), 400, "INVALID_REQUEST_BODY")
	wantError(t, e.do("DELETE", "/directories?path=/../..", nil), 400, "INVALID_REQUEST_BODY")
	wantStatus(t, e.do("DELETE", "/directories", nil), 200)
}

// TestPathsStayUnderRoot tries to reach a file next to Root through `..`, absolute and relative
// symlinks, and a symlink loop. Everything must resolve inside Root, like a chroot.
func TestPathsStayUnderRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "secret"), []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, execd.Config{Root: root})
	for name, target := range map[string]string{
		"abs":    "/",
		"up":     "../..",
		"parent": "..",
		"secret": filepath.Join(base, "secret"), // absolute host path: means <root><base>/secret
		"loop":   "loop",
		"a":      "b",
		"b":      "a",
		"deep":   "abs/up/parent/..",
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/../secret", "../../secret", "/abs/../secret", "/up/secret", "/parent/secret",
		"/up/up/up/secret", "/deep/secret", "/secret", "/abs" + base + "/secret", "/%2e%2e/secret"} {
		resp := e.do("GET", "/files/download?path="+p, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || bytes.Contains(b, []byte("host secret")) {
			t.Errorf("download %s: status %d body %q, want 404", p, resp.StatusCode, b)
		}
	}
	for _, p := range []string{"/loop", "/a", "/loop/x"} {
		wantError(t, e.do("GET", "/files/download?path="+p, nil), 400, "INVALID_FILE")
	}
	// Writes through escaping links land inside Root.
	wantStatus(t, e.upload(uploadFile{meta: `{"path":"/up/evil"}`, content: strings.NewReader("x")}), 200)
	wantStatus(t, e.upload(uploadFile{meta: `{"path":"/secret"}`, content: strings.NewReader("inside")}), 200)
	if b, _ := os.ReadFile(filepath.Join(base, "secret")); string(b) != "host secret" {
		t.Fatalf("host file was overwritten: %q", b)
	}
	if _, err := os.Stat(filepath.Join(root, "evil")); err != nil {
		t.Fatalf("upload through ../.. link did not land in Root: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, base, "secret")); err != nil || string(b) != "inside" {
		t.Fatalf("upload through an absolute link = %q, %v; want it under Root", b, err)
	}
	if _, err := os.Stat(filepath.Join(base, "evil")); !os.IsNotExist(err) {
		t.Fatalf("file escaped Root: %v", err)
	}
	// Deleting a symlink removes the link, not its target; mkdir and rm -rf stay inside too.
	wantStatus(t, e.do("DELETE", "/files?path=/secret", nil), 200)
	if _, err := os.Stat(filepath.Join(root, base, "secret")); err != nil {
		t.Fatalf("link target removed: %v", err)
	}
	wantStatus(t, e.do("POST", "/directories", map[string]any{"/up/made": map[string]any{"mode": 755}}), 200)
	if _, err := os.Stat(filepath.Join(root, "made")); err != nil {
		t.Fatalf("mkdir through link: %v", err)
	}
	wantStatus(t, e.do("DELETE", "/directories?path=/abs/made", nil), 200)
	if _, err := os.Stat(filepath.Join(base, "secret")); err != nil {
		t.Fatalf("host file removed: %v", err)
	}
	// A command cwd through a link is inside Root as well.
	res := e.stream("/command", map[string]any{"command": "pwd -P", "cwd": "/up"})
	if got := strings.Join(res.stdout, ""); got != root {
		t.Fatalf("cwd /up = %q, want Root %q", got, root)
	}
}

// TestLargeUploadIsStreamed uploads and downloads 50 MB and checks that the heap did not hold
// the file: the bytes allocated during the round trip stay far below its size.
func TestLargeUploadIsStreamed(t *testing.T) {
	e := newEnv(t, execd.Config{})
	const size = 50 << 20
	src := io.LimitReader(&pattern{}, size)
	hw := sha256.New()
	tee := io.TeeReader(src, hw)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	wantStatus(t, e.upload(uploadFile{meta: `{"path":"/big.bin"}`, content: tee}), 200)
	resp := e.do("GET", "/files/download?path=/big.bin", nil)
	hr := sha256.New()
	n, err := io.Copy(hr, resp.Body)
	resp.Body.Close()
	runtime.ReadMemStats(&after)

	if err != nil || n != size {
		t.Fatalf("download = %d bytes, %v; want %d", n, err, size)
	}
	if !bytes.Equal(hw.Sum(nil), hr.Sum(nil)) {
		t.Fatal("downloaded content differs from the upload")
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("50 MB upload+download: %.1f MiB allocated in total, heap in use %.1f -> %.1f MiB",
		float64(alloc)/(1<<20), float64(before.HeapInuse)/(1<<20), float64(after.HeapInuse)/(1<<20))
	if alloc > 10<<20 {
		t.Fatalf("round trip allocated %d bytes, want well under the %d-byte file", alloc, size)
	}
}

// pattern is an endless reader of non-repeating-looking bytes without allocation.
type pattern struct{ n uint64 }

func (p *pattern) Read(b []byte) (int, error) {
	for i := range b {
		p.n++
		b[i] = byte(p.n*2654435761>>13) ^ byte(p.n)
	}
	return len(b), nil
}

// FuzzDownloadRange sends arbitrary Range headers to the download route: the answer is 200,
// 206 or 416, never a server error, and a single-range 206 body is exactly that slice.
func FuzzDownloadRange(f *testing.F) {
	root := f.TempDir()
	content := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	if err := os.WriteFile(filepath.Join(root, "f"), content, 0o644); err != nil {
		f.Fatal(err)
	}
	s, err := execd.New(execd.Config{Root: root})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	for _, seed := range []string{"bytes=0-4", "bytes=-5", "bytes=30-", "bytes=0-0,5-9", "bytes=100-", "bytes=5-1", "items=0-1", "bytes=--1", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rng string) {
		req := httptest.NewRequest("GET", "/files/download?path=/f", nil)
		req.Header.Set("Range", rng)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		switch rec.Code {
		case 200:
			if !bytes.Equal(rec.Body.Bytes(), content) {
				t.Fatalf("200 body = %q", rec.Body.Bytes())
			}
		case 206:
			var start, end, total int
			if _, err := fmt.Sscanf(rec.Header().Get("Content-Range"), "bytes %d-%d/%d", &start, &end, &total); err == nil {
				if total != len(content) || start > end || end >= total || !bytes.Equal(rec.Body.Bytes(), content[start:end+1]) {
					t.Fatalf("206 %q body %q", rec.Header().Get("Content-Range"), rec.Body.Bytes())
				}
			} else if !strings.HasPrefix(rec.Header().Get("Content-Type"), "multipart/byteranges") {
				t.Fatalf("206 without Content-Range or multipart body: %v", rec.Header())
			}
		case 416:
		default:
			t.Fatalf("Range %q: status %d", rng, rec.Code)
		}
	})
}

// TestOwnersFromRootPasswd: owner and group names come from Root's /etc/passwd and /etc/group.
func TestOwnersFromRootPasswd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown; run the tests as root")
	}
	e := newEnv(t, execd.Config{})
	if err := os.MkdirAll(filepath.Join(e.root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, "etc", "passwd"), []byte("root:x:0:0::/root:/bin/sh\nalice:x:4321:4322::/home/alice:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, "etc", "group"), []byte("root:x:0:\nstaff:x:4322:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e.upload(uploadFile{meta: `{"path":"/home/alice/a.txt","owner":"alice","group":"staff","mode":600}`, content: strings.NewReader("a")}), 200)
	fi := e.info("/home/alice/a.txt")["/home/alice/a.txt"]
	if fi.Owner != "alice" || fi.Group != "staff" || fi.Mode != 600 {
		t.Fatalf("info = %+v, want alice/staff/600", fi)
	}
	wantStatus(t, e.do("POST", "/files/permissions", map[string]any{"/home/alice/a.txt": map[string]any{"owner": "root", "mode": 644}}), 200)
	if fi := e.info("/home/alice/a.txt")["/home/alice/a.txt"]; fi.Owner != "root" || fi.Group != "staff" || fi.Mode != 644 {
		t.Fatalf("after chown = %+v, want root/staff/644", fi)
	}
	wantStatus(t, e.do("POST", "/directories", map[string]any{"/srv/data": map[string]any{"owner": "4321", "group": "staff", "mode": 750}}), 200)
	if fi := e.info("/srv/data")["/srv/data"]; fi.Owner != "alice" || fi.Group != "staff" || fi.Mode != 750 {
		t.Fatalf("dir = %+v", fi)
	}
	// uid without gid runs with the user's primary group from Root's /etc/passwd.
	for _, d := range []string{e.root, filepath.Dir(e.root)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if res := e.stream("/command", map[string]any{"command": "id -u; id -g", "uid": 4321}); strings.Join(res.stdout, " ") != "4321 4322" {
		t.Fatalf("ids = %q, want 4321 4322", res.stdout)
	}
}

func TestPathExpansionAndNames(t *testing.T) {
	e := newEnv(t, execd.Config{Env: []string{"HOME=/home/me", "DATA=/data"}})
	wantStatus(t, e.upload(
		uploadFile{meta: `{"path":"~/notes.txt"}`, content: strings.NewReader("n")},
		uploadFile{meta: `{"path":"$DATA/été.txt"}`, content: strings.NewReader("e")},
	), 200)
	for _, rel := range []string{"home/me/notes.txt", "data/été.txt"} {
		if _, err := os.Stat(filepath.Join(e.root, rel)); err != nil {
			t.Fatalf("expanded upload %s: %v", rel, err)
		}
	}
	resp := e.do("GET", "/files/download?path=${DATA}/%C3%A9t%C3%A9.txt", nil)
	wantStatus(t, resp, 200)
	if got, want := resp.Header.Get("Content-Disposition"), `attachment; filename="%C3%A9t%C3%A9.txt"; filename*=UTF-8''%C3%A9t%C3%A9.txt`; got != want {
		t.Fatalf("Content-Disposition = %q, want %q", got, want)
	}
}

// FuzzUpload feeds arbitrary multipart bodies to the upload route: the answer is 200 or a 4xx
// JSON error, never a server error, and nothing is ever written outside Root.
func FuzzUpload(f *testing.F) {
	base := f.TempDir()
	root := filepath.Join(base, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		f.Fatal(err)
	}
	s, err := execd.New(execd.Config{Root: root})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	const boundary = "XyZ"
	part := func(name, filename, body string) string {
		fn := ""
		if filename != "" {
			fn = `; filename="` + filename + `"`
		}
		return "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + name + `"` + fn + "\r\n\r\n" + body + "\r\n"
	}
	f.Add(part("metadata", "metadata", `{"path":"/a/b.txt","mode":644}`) + part("file", "b.txt", "hello") + "--" + boundary + "--\r\n")
	f.Add(part("metadata", "", `{"path":"../../x"}`) + part("file", "x", "x") + "--" + boundary + "--\r\n")
	f.Add(part("file", "x", "x") + "--" + boundary + "--\r\n")
	f.Add(part("metadata", "m", `{"path":"/d","mode":99999}`) + "--" + boundary + "--\r\n")
	f.Add("--" + boundary + "\r\ngarbage")
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest("POST", "/files/upload", strings.NewReader(body))
		req.Header.Set("Content-Type", "multipart/form-data; boundary="+boundary)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != 200 && (rec.Code < 400 || rec.Code >= 500) {
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
		entries, err := os.ReadDir(base)
		if err != nil || len(entries) != 1 || entries[0].Name() != "root" {
			t.Fatalf("something was written next to Root: %v %v", entries, err)
		}
	})
}
