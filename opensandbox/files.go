package opensandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

// FileInfo describes a file in the sandbox.
type FileInfo struct {
	Path       string
	Type       string // file | directory | symlink | other
	Size       int64
	ModifiedAt time.Time
	CreatedAt  time.Time
	Owner      string
	Group      string
	// Mode holds the permission bits (e.g. 0o644). execd writes them as the octal
	// digits read as a decimal number (644); this client converts both ways.
	Mode os.FileMode
}

// IsDir reports whether fi is a directory.
func (fi FileInfo) IsDir() bool { return fi.Type == "directory" }

type fileInfoWire struct {
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modified_at"`
	CreatedAt  time.Time `json:"created_at"`
	Owner      string    `json:"owner"`
	Group      string    `json:"group"`
	Mode       int64     `json:"mode"`
}

// UnmarshalJSON decodes execd's FileInfo, converting its decimal-written octal mode.
func (fi *FileInfo) UnmarshalJSON(b []byte) error {
	var w fileInfoWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*fi = FileInfo{Path: w.Path, Type: w.Type, Size: w.Size, ModifiedAt: w.ModifiedAt, CreatedAt: w.CreatedAt,
		Owner: w.Owner, Group: w.Group, Mode: modeFromWire(w.Mode)}
	return nil
}

// MarshalJSON encodes fi in execd's wire form.
func (fi FileInfo) MarshalJSON() ([]byte, error) {
	return json.Marshal(fileInfoWire{Path: fi.Path, Type: fi.Type, Size: fi.Size, ModifiedAt: fi.ModifiedAt,
		CreatedAt: fi.CreatedAt, Owner: fi.Owner, Group: fi.Group, Mode: modeToWire(fi.Mode)})
}

// modeToWire turns 0o755 into 755 (octal digits as a decimal number).
func modeToWire(m os.FileMode) int64 {
	n, _ := strconv.ParseInt(strconv.FormatUint(uint64(m&0o7777), 8), 10, 64)
	return n
}

// modeFromWire turns 755 into 0o755. A value with digits 8 or 9 is not a mode and
// yields 0.
func modeFromWire(n int64) os.FileMode {
	if n <= 0 {
		return 0
	}
	v, err := strconv.ParseUint(strconv.FormatInt(n, 10), 8, 32)
	if err != nil {
		return 0
	}
	return os.FileMode(v) & 0o7777
}

// Permission is an owner, group and mode to apply; zero fields are left unchanged
// (Mode 0: keep as created).
type Permission struct {
	Owner string
	Group string
	Mode  os.FileMode
}

type permissionWire struct {
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	Mode  int64  `json:"mode,omitempty"`
}

func (p Permission) wire() permissionWire {
	return permissionWire{Owner: p.Owner, Group: p.Group, Mode: modeToWire(p.Mode)}
}

// Upload is one file of UploadFiles.
type Upload struct {
	Path       string
	Reader     io.Reader
	Permission Permission
}

// UploadFiles writes several files in one streamed multipart request (one metadata
// and one file part per file, in order). Like UploadFile it never buffers a file,
// is never retried and reads no Reader after it returns.
func (e *Execd) UploadFiles(ctx context.Context, files ...Upload) error {
	if len(files) == 0 {
		return fmt.Errorf("%w: upload: no files", ErrInvalidRequest)
	}
	metas := make([][]byte, len(files))
	for i, f := range files {
		if f.Path == "" {
			return fmt.Errorf("%w: upload: empty path (file %d)", ErrInvalidRequest, i)
		}
		if f.Reader == nil {
			return fmt.Errorf("%w: upload %s: nil reader", ErrInvalidRequest, f.Path)
		}
		meta := struct {
			Path string `json:"path"`
			permissionWire
		}{f.Path, f.Permission.wire()}
		b, err := json.Marshal(meta)
		if err != nil {
			return fmt.Errorf("%w: upload %s: %w", ErrInvalidRequest, f.Path, err)
		}
		metas[i] = b
	}
	if e.isClosed() {
		return ErrClosed
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	writeDone := make(chan error, 1)
	go func() {
		var err error
		for i, f := range files {
			if err = writeUploadPair(mw, metas[i], path.Base(f.Path), f.Reader); err != nil {
				break
			}
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
		writeDone <- err
	}()
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, sendErr := e.t.send(uctx, request{method: "POST", path: "/files/upload", body: pr,
		contentType: mw.FormDataContentType()})
	if sendErr == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}
	// Stop the writer if the server answered before reading everything, and wait for
	// it so no reader is touched after we return.
	pr.CloseWithError(io.ErrClosedPipe)
	werr := <-writeDone
	what := files[0].Path
	if len(files) > 1 {
		what = fmt.Sprintf("%d files", len(files))
	}
	if werr != nil && !errors.Is(werr, io.ErrClosedPipe) {
		return fmt.Errorf("upload %s: read source: %w", what, werr)
	}
	if sendErr != nil {
		return fmt.Errorf("upload %s: %w", what, sendErr)
	}
	return nil
}

// UploadFile writes r to path in the sandbox (POST /files/upload, multipart). The body
// is streamed: r is read while sending, never buffered whole. Parent directories are
// created; perm is applied afterwards. Never retried (r cannot be rewound). r is not
// read after UploadFile returns.
func (e *Execd) UploadFile(ctx context.Context, filePath string, r io.Reader, perm Permission) error {
	if r == nil {
		return fmt.Errorf("%w: upload %s: nil reader", ErrInvalidRequest, filePath)
	}
	return e.UploadFiles(ctx, Upload{Path: filePath, Reader: r, Permission: perm})
}

func writeUploadPair(mw *multipart.Writer, metaJSON []byte, name string, r io.Reader) error {
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
	h.Set("Content-Type", "application/json")
	w, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if _, err := w.Write(metaJSON); err != nil {
		return err
	}
	if name == "" || name == "/" || name == "." {
		name = "file"
	}
	h = textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, name))
	h.Set("Content-Type", "application/octet-stream")
	if w, err = mw.CreatePart(h); err != nil {
		return err
	}
	_, err = io.Copy(w, r)
	return err
}

// DownloadFile streams the file at path (GET /files/download). The caller must
// close the returned reader. No request timeout applies to the body; ctx does.
// ErrNotFound if missing.
func (e *Execd) DownloadFile(ctx context.Context, filePath string) (io.ReadCloser, error) {
	return e.download(ctx, filePath, "")
}

// DownloadRange streams length bytes of the file from offset (length < 0: to the
// end) using an HTTP Range request. ErrRangeNotSatisfiable if offset is past the end.
func (e *Execd) DownloadRange(ctx context.Context, filePath string, offset, length int64) (io.ReadCloser, error) {
	if offset < 0 || length == 0 {
		return nil, fmt.Errorf("%w: download %s: bad range offset %d length %d", ErrInvalidRequest, filePath, offset, length)
	}
	rng := fmt.Sprintf("bytes=%d-", offset)
	if length > 0 {
		rng += strconv.FormatInt(offset+length-1, 10)
	}
	return e.download(ctx, filePath, rng)
}

func (e *Execd) download(ctx context.Context, filePath, rng string) (io.ReadCloser, error) {
	if filePath == "" {
		return nil, fmt.Errorf("%w: download: empty path", ErrInvalidRequest)
	}
	if e.isClosed() {
		return nil, ErrClosed
	}
	h := http.Header{}
	if rng != "" {
		h.Set("Range", rng)
	}
	resp, err := e.t.send(ctx, request{method: "GET", path: "/files/download", query: url.Values{"path": {filePath}},
		header: h, idempotent: true, accept: "application/octet-stream"})
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", filePath, err)
	}
	if rng != "" && resp.StatusCode != http.StatusPartialContent {
		resp.Body.Close()
		return nil, fmt.Errorf("download %s: server ignored range %s (status %d)", filePath, rng, resp.StatusCode)
	}
	return resp.Body, nil
}

// FileInfo returns information about each path (GET /files/info). If any path is
// missing the whole call fails with ErrNotFound.
func (e *Execd) FileInfo(ctx context.Context, paths ...string) (map[string]FileInfo, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: file info: no paths", ErrInvalidRequest)
	}
	out := map[string]FileInfo{}
	if err := e.unary(ctx, request{method: "GET", path: "/files/info", query: url.Values{"path": paths}, idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("file info %s: %w", strings.Join(paths, ", "), err)
	}
	return out, nil
}

// DeleteFiles removes files (not directories; see DeleteDirectory).
func (e *Execd) DeleteFiles(ctx context.Context, paths ...string) error {
	if len(paths) == 0 {
		return fmt.Errorf("%w: delete files: no paths", ErrInvalidRequest)
	}
	if err := e.unary(ctx, request{method: "DELETE", path: "/files", query: url.Values{"path": paths}, idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete files %s: %w", strings.Join(paths, ", "), err)
	}
	return nil
}

// Move renames Src to Dest.
type Move struct {
	Src  string `json:"src"`
	Dest string `json:"dest"`
}

// MoveFiles renames files or directories (POST /files/mv). ErrNotFound if a source
// is missing. Never retried.
func (e *Execd) MoveFiles(ctx context.Context, moves ...Move) error {
	if len(moves) == 0 {
		return fmt.Errorf("%w: move files: nothing to move", ErrInvalidRequest)
	}
	if err := e.unary(ctx, request{method: "POST", path: "/files/mv", json: moves}, nil); err != nil {
		return fmt.Errorf("move files: %w", err)
	}
	return nil
}

// SetPermissions applies owner, group and mode per path (POST /files/permissions).
func (e *Execd) SetPermissions(ctx context.Context, perms map[string]Permission) error {
	if len(perms) == 0 {
		return fmt.Errorf("%w: set permissions: no paths", ErrInvalidRequest)
	}
	w := make(map[string]permissionWire, len(perms))
	for p, perm := range perms {
		w[p] = perm.wire()
	}
	if err := e.unary(ctx, request{method: "POST", path: "/files/permissions", json: w, idempotent: true}, nil); err != nil {
		return fmt.Errorf("set permissions: %w", err)
	}
	return nil
}

// SearchFiles returns the files under dir (recursively) whose base name matches the
// glob pattern ("" matches all). Directories are not returned.
func (e *Execd) SearchFiles(ctx context.Context, dir, pattern string) ([]FileInfo, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: search files: empty path", ErrInvalidRequest)
	}
	q := url.Values{"path": {dir}}
	if pattern != "" {
		q.Set("pattern", pattern)
	}
	var out []FileInfo
	if err := e.unary(ctx, request{method: "GET", path: "/files/search", query: q, idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("search files in %s: %w", dir, err)
	}
	return out, nil
}

// Replacement replaces every occurrence of Old with New.
type Replacement struct {
	Old string `json:"old"`
	New string `json:"new"`
}

// ReplaceInFiles replaces text per file (POST /files/replace?verbose=true) and
// returns the number of replacements per path when the server reports them (nil
// otherwise). Never retried.
func (e *Execd) ReplaceInFiles(ctx context.Context, repl map[string]Replacement) (map[string]int, error) {
	if len(repl) == 0 {
		return nil, fmt.Errorf("%w: replace in files: no paths", ErrInvalidRequest)
	}
	var out map[string]struct {
		ReplacedCount int `json:"replacedCount"`
	}
	if err := e.unary(ctx, request{method: "POST", path: "/files/replace", query: url.Values{"verbose": {"true"}}, json: repl}, &out); err != nil {
		return nil, fmt.Errorf("replace in files: %w", err)
	}
	if out == nil {
		return nil, nil
	}
	counts := make(map[string]int, len(out))
	for p, c := range out {
		counts[p] = c.ReplacedCount
	}
	return counts, nil
}

// CreateDirectory creates dir and its parents (mkdir -p) with perm (Mode 0: 0o755).
func (e *Execd) CreateDirectory(ctx context.Context, dir string, perm Permission) error {
	if dir == "" {
		return fmt.Errorf("%w: create directory: empty path", ErrInvalidRequest)
	}
	if perm.Mode == 0 {
		perm.Mode = 0o755
	}
	w := map[string]permissionWire{dir: perm.wire()}
	if err := e.unary(ctx, request{method: "POST", path: "/directories", json: w, idempotent: true}, nil); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	return nil
}

// DeleteDirectory removes dir recursively (rm -rf).
func (e *Execd) DeleteDirectory(ctx context.Context, dir string) error {
	if dir == "" {
		return fmt.Errorf("%w: delete directory: empty path", ErrInvalidRequest)
	}
	if err := e.unary(ctx, request{method: "DELETE", path: "/directories", query: url.Values{"path": {dir}}, idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete directory %s: %w", dir, err)
	}
	return nil
}

// ListDirectory lists dir's entries down to depth levels (GET /directories/list;
// depth < 1 means 1), in lexical order with children after their parent.
func (e *Execd) ListDirectory(ctx context.Context, dir string, depth int) ([]FileInfo, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: list directory: empty path", ErrInvalidRequest)
	}
	depth = max(depth, 1)
	q := url.Values{"path": {dir}, "depth": {strconv.Itoa(depth)}}
	var out []FileInfo
	if err := e.unary(ctx, request{method: "GET", path: "/directories/list", query: q, idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list directory %s: %w", dir, err)
	}
	return out, nil
}
