package execd

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// eachQueryPath calls fn, in order, with every `path` query parameter of r and its host path
// (resolved without following a final symlink), stopping at the first error. A request without
// a path does nothing, as in the real execd.
func (s *Server) eachQueryPath(r *http.Request, fn func(p, host string) error) error {
	for _, p := range r.URL.Query()["path"] {
		host, err := s.resolve(p, false)
		if err != nil {
			return err
		}
		if err := fn(p, host); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (s *Server) handleFilesInfo(w http.ResponseWriter, r *http.Request) error {
	names := s.loadIDNames()
	out := make(map[string]fileInfo)
	err := s.eachQueryPath(r, func(p, host string) error {
		fi, err := os.Lstat(host)
		if err != nil {
			return s.fsError(err, host)
		}
		out[p] = s.makeFileInfo(names, s.clientPath(host), fi)
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleDeleteFiles(w http.ResponseWriter, r *http.Request) error {
	// As the real execd: a missing path is no error (200), a directory a 500.
	return s.eachQueryPath(r, func(p, host string) error {
		fi, err := os.Lstat(host)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return runtimeError(err, "error removing file %s. %v", p, scrubPath(err, s.root))
		}
		if fi.IsDir() {
			return runtimeError(ErrInvalid, "error removing file %s. path is a directory: %s", p, p)
		}
		if err := os.Remove(host); err != nil {
			return runtimeError(err, "error removing file %s. %v", p, scrubPath(err, s.root))
		}
		return nil
	})
}

func (s *Server) handleChmod(w http.ResponseWriter, r *http.Request) error {
	var req map[string]permission
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	names := s.loadIDNames()
	for _, p := range sortedKeys(req) {
		host, err := s.resolve(p, true)
		if err != nil {
			return err
		}
		// The real execd answers every failure here, a missing path
		// included, with 500 RUNTIME_ERROR.
		if _, err := os.Stat(host); err != nil {
			return runtimeError(err, "error changing permissions for %s. %v", p, scrubPath(err, s.root))
		}
		if err := s.applyPermission(host, req[p], names); err != nil {
			return err
		}
	}
	return nil
}

type renameItem struct {
	Src  string `json:"src"`
	Dest string `json:"dest"`
}

func (s *Server) handleMove(w http.ResponseWriter, r *http.Request) error {
	var req []renameItem
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	for _, it := range req {
		if it.Src == "" || it.Dest == "" {
			return badRequest(CodeInvalidRequestBody, "src and dest are required")
		}
		src, err := s.resolve(it.Src, false)
		if err != nil {
			return err
		}
		dest, err := s.resolve(it.Dest, false)
		if err != nil {
			return err
		}
		if _, err := os.Lstat(src); err != nil {
			return s.fsError(err, src)
		}
		if src == s.root || dest == s.root {
			return badRequest(CodeInvalidRequestBody, "cannot move the root directory")
		}
		if fi, err := os.Stat(filepath.Dir(dest)); err != nil || !fi.IsDir() {
			return apiErr(http.StatusNotFound, CodeFileNotFound, ErrNotFound,
				"target directory of %s does not exist", s.clientPath(dest))
		}
		if err := os.Rename(src, dest); err != nil {
			return s.fsError(err, src)
		}
	}
	return nil
}

func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		return badRequest(CodeMissingQuery, "missing query parameter path")
	}
	pattern := q.Get("pattern")
	if pattern == "" {
		pattern = "**"
	}
	if err := validGlob(pattern); err != nil {
		return err
	}
	host, err := s.resolve(p, true)
	if err != nil {
		return err
	}
	fi, err := os.Stat(host)
	if err != nil {
		return s.fsError(err, host)
	}
	if !fi.IsDir() {
		return badRequest(CodeInvalidFile, "%s is not a directory", s.clientPath(host))
	}
	names := s.loadIDNames()
	out := []fileInfo{}
	err = filepath.WalkDir(host, func(fp string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable entries are skipped, as find(1) would report and continue
		}
		if d.IsDir() {
			return nil
		}
		if err := r.Context().Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(host, fp)
		ok, err := globMatch(pattern, filepath.ToSlash(rel))
		if err != nil || !ok {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		out = append(out, s.makeFileInfo(names, s.clientPath(fp), info))
		return nil
	})
	if err != nil {
		return s.fsError(err, host)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

type replaceItem struct {
	Old *string `json:"old"`
	New *string `json:"new"`
}

func (s *Server) handleReplace(w http.ResponseWriter, r *http.Request) error {
	var req map[string]replaceItem
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	keys := sortedKeys(req)
	for _, p := range keys {
		it := req[p]
		if it.Old == nil || *it.Old == "" || it.New == nil {
			return badRequest(CodeInvalidRequestBody, "%s: old (non-empty) and new are required", p)
		}
	}
	counts := make(map[string]map[string]int, len(req))
	for _, p := range keys {
		host, err := s.resolve(p, true)
		if err != nil {
			return err
		}
		n, err := s.replaceFile(host, *req[p].Old, *req[p].New)
		if err != nil {
			return err
		}
		counts[p] = map[string]int{"replacedCount": n}
	}
	if v, _ := strconv.ParseBool(r.URL.Query().Get("verbose")); v {
		writeJSON(w, http.StatusOK, counts)
	}
	return nil
}

// replaceFile streams host path p through replaceStream into a temporary file that keeps p's
// mode and owner, then renames it over p. A file without any match is left untouched.
func (s *Server) replaceFile(p, old, new string) (int, error) {
	in, err := os.Open(p)
	if err != nil {
		return 0, s.fsError(err, p)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return 0, s.fsError(err, p)
	}
	if !fi.Mode().IsRegular() {
		return 0, badRequest(CodeInvalidFile, "%s is not a regular file", s.clientPath(p))
	}
	tmp := tempName(p)
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
	if err != nil {
		return 0, s.fsError(err, p)
	}
	defer os.Remove(tmp) // no-op after the rename
	n, err := replaceStream(out, in, []byte(old), []byte(new))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, s.fsError(err, p)
	}
	if n == 0 {
		return 0, nil
	}
	if err := chownLike(tmp, fi); err != nil {
		return 0, s.fsError(err, p)
	}
	if err := os.Chmod(tmp, fi.Mode()); err != nil {
		return 0, s.fsError(err, p)
	}
	if err := os.Rename(tmp, p); err != nil {
		return 0, s.fsError(err, p)
	}
	return n, nil
}

type fileMetadata struct {
	Path string `json:"path"`
	permission
}

// handleUpload streams multipart pairs (metadata, file) straight to disk: each file is written to
// a temporary file next to its target and renamed into place, so a partial upload never
// replaces an existing file. Memory use does not depend on the file size.
func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request) error {
	mr, err := r.MultipartReader()
	if err != nil {
		return badRequest(CodeInvalidFile, "expected multipart/form-data: %v", err)
	}
	names := s.loadIDNames()
	var meta *fileMetadata
	files := 0
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return badRequest(CodeInvalidFile, "read multipart body: %v", err)
		}
		switch part.FormName() {
		case "metadata":
			if meta != nil {
				return badRequest(CodeInvalidFileContent, "metadata for %s has no file part", meta.Path)
			}
			// Lenient: the real execd requires a filename on this part; clients that send none
			// are accepted too (API-NOTES §13.4).
			b, err := io.ReadAll(io.LimitReader(part, 1<<20+1))
			if err != nil || len(b) > 1<<20 {
				return badRequest(CodeInvalidFileMetadata, "metadata part unreadable or larger than 1 MiB")
			}
			var m fileMetadata
			if err := json.Unmarshal(b, &m); err != nil {
				return badRequest(CodeInvalidFileMetadata, "metadata is not valid JSON: %v", err)
			}
			if m.Path == "" {
				return badRequest(CodeInvalidFileMetadata, "metadata path is required")
			}
			if _, err := parseMode(m.Mode); err != nil {
				return err
			}
			meta = &m
		case "file":
			if meta == nil {
				return badRequest(CodeInvalidFileMetadata, "metadata file is missing")
			}
			if err := s.writeUpload(part, *meta, names); err != nil {
				return err
			}
			meta = nil
			files++
		default:
			_, _ = io.Copy(io.Discard, part)
		}
		part.Close()
	}
	if meta != nil {
		return badRequest(CodeInvalidFileContent, "file part for %s is missing", meta.Path)
	}
	if files == 0 {
		return badRequest(CodeInvalidFileContent, "no file part in upload")
	}
	return nil
}

func (s *Server) writeUpload(part *multipart.Part, meta fileMetadata, names *idNames) error {
	host, err := s.resolve(meta.Path, true)
	if err != nil {
		return err
	}
	if host == s.root {
		return badRequest(CodeInvalidFileMetadata, "upload path %s is the root directory", meta.Path)
	}
	if fi, err := os.Stat(host); err == nil && fi.IsDir() {
		return badRequest(CodeInvalidFileMetadata, "upload path %s is a directory", meta.Path)
	}
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		return s.fsError(err, host)
	}
	tmp := tempName(host)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o777) // umask applies: 0755
	if err != nil {
		return s.fsError(err, host)
	}
	defer os.Remove(tmp) // no-op after the rename
	_, err = io.Copy(f, part)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) {
			return err
		}
		return badRequest(CodeInvalidFileContent, "write %s: %v", meta.Path, scrubPath(err, s.root))
	}
	if err := s.applyPermission(tmp, meta.permission, names); err != nil {
		return err
	}
	if err := os.Rename(tmp, host); err != nil {
		return s.fsError(err, host)
	}
	return nil
}

func (s *Server) handleDownload(w http.ResponseWriter, r *http.Request) error {
	p := r.URL.Query().Get("path")
	if p == "" {
		return badRequest(CodeMissingQuery, "missing query parameter path")
	}
	host, err := s.resolve(p, true)
	if err != nil {
		return err
	}
	f, err := os.Open(host)
	if err != nil {
		return s.fsError(err, host)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return s.fsError(err, host)
	}
	if fi.IsDir() {
		return badRequest(CodeInvalidFile, "%s is a directory", s.clientPath(host))
	}
	if rng := r.Header.Get("Range"); rng != "" {
		fixed, ok := dropEmptySuffixRanges(rng)
		if !ok {
			w.Header().Set("Content-Range", "bytes */"+strconv.FormatInt(fi.Size(), 10))
			http.Error(w, "invalid range: failed to overlap", http.StatusRequestedRangeNotSatisfiable)
			return nil
		}
		r.Header.Set("Range", fixed)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", contentDisposition(filepath.Base(host)))
	http.ServeContent(w, r, "", fi.ModTime(), f)
	return nil
}

func (s *Server) handleListDir(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		return badRequest(CodeMissingQuery, "missing query parameter path")
	}
	depth := 1
	if d := q.Get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return badRequest(CodeInvalidRequestBody, "depth must be an integer >= 0, got %q", d)
		}
		depth = n
	}
	host, err := s.resolve(p, false)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(host)
	if err != nil {
		return s.fsError(err, host)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return badRequest(CodeInvalidFile, "%s is a symbolic link; list its target instead", s.clientPath(host))
	}
	if !fi.IsDir() {
		return badRequest(CodeInvalidFile, "%s is not a directory", s.clientPath(host))
	}
	out := []fileInfo{}
	names := s.loadIDNames()
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		entries, err := os.ReadDir(dir) // sorted by name
		if err != nil {
			return err
		}
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				continue // vanished meanwhile
			}
			child := filepath.Join(dir, e.Name())
			out = append(out, s.makeFileInfo(names, s.clientPath(child), info))
			if e.IsDir() && level < depth {
				if err := walk(child, level+1); err != nil && !errors.Is(err, fs.ErrPermission) {
					return err
				}
			}
		}
		return nil
	}
	if depth > 0 {
		if err := walk(host, 1); err != nil {
			return s.fsError(err, host)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleMakeDirs(w http.ResponseWriter, r *http.Request) error {
	var req map[string]permission
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	names := s.loadIDNames()
	for _, p := range sortedKeys(req) {
		perm := req[p]
		if _, err := parseMode(perm.Mode); err != nil {
			return err
		}
		host, err := s.resolve(p, true)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(host, 0o755); err != nil {
			return s.fsError(err, host)
		}
		if err := s.applyPermission(host, perm, names); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) handleRemoveDirs(w http.ResponseWriter, r *http.Request) error {
	return s.eachQueryPath(r, func(_, host string) error {
		if host == s.root || strings.TrimRight(host, "/") == "" {
			return badRequest(CodeInvalidRequestBody, "refusing to delete the root directory")
		}
		if err := os.RemoveAll(host); err != nil {
			return s.fsError(err, host)
		}
		return nil
	})
}

// dropEmptySuffixRanges removes zero-length suffix ranges ("bytes=-0") from a Range header:
// they can never be satisfied (RFC 9110 §14.1.1), but http.ServeContent answers them with a
// 206 and a "bytes N-(N-1)/N" Content-Range. ok is false when nothing satisfiable is left.
// Anything else is left to ServeContent.
func dropEmptySuffixRanges(h string) (string, bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found {
		return h, true
	}
	var keep []string
	dropped := false
	for _, r := range strings.Split(spec, ",") {
		t := strings.TrimSpace(r)
		if suffix, ok := strings.CutPrefix(t, "-"); ok && isZero(strings.TrimSpace(suffix)) {
			dropped = true
			continue
		}
		keep = append(keep, r)
	}
	if !dropped {
		return h, true
	}
	if len(keep) == 0 {
		return "", false
	}
	return "bytes=" + strings.Join(keep, ","), true
}

func isZero(s string) bool {
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n == 0
}

// contentDisposition is the real execd's header: the name always quoted, and
// for a non-ASCII name the percent-encoded form both quoted and as RFC 5987
// filename*.
func contentDisposition(name string) string {
	ascii := true
	for _, r := range name {
		if r > 127 {
			ascii = false
			break
		}
	}
	if ascii {
		return `attachment; filename="` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(name) + `"`
	}
	enc := url.PathEscape(name)
	return `attachment; filename="` + enc + `"; filename*=UTF-8''` + enc
}
