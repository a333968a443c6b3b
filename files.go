package alineo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/alineo-labs/alineo/opensandbox"
)

// FileInfo describes a file in a sandbox: path, type (file, directory, symlink),
// size, mode, owner, group and timestamps.
type FileInfo = opensandbox.FileInfo

// Replacement replaces every occurrence of Old with New in the file at Path.
type Replacement struct {
	Path string
	Old  string
	New  string
}

// ListDirectoryOptions configure ListDirectory.
type ListDirectoryOptions struct {
	// Depth is how many levels to list; 0 or 1 lists the directory's own entries.
	Depth int
}

// ProxyInfo is how to reach a port inside the sandbox: send every header with
// every request to URL.
type ProxyInfo struct {
	URL     string
	Headers map[string]string
}

// Metrics is a resource sample of the sandbox.
type Metrics struct {
	CPU         float64 // percent of the sandbox's CPUs in use
	CPUCount    float64
	Memory      float64 // MiB in use
	MemoryTotal float64 // MiB available
	Timestamp   time.Time
}

// File operations are not recorded in the ledger (as in the TypeScript SDK). They fail with
// ErrClosed after Close and ErrPaused while paused; errors from the server wrap
// *APIError (errors.Is(err, opensandbox.ErrNotFound) for a missing file).

// WriteFile writes data to path in the sandbox, creating parent directories.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte) error {
	return s.WriteFileFrom(ctx, path, bytes.NewReader(data), 0)
}

// WriteFileFrom streams r into path in the sandbox without holding it in memory,
// with mode (0 keeps the server's default).
func (s *Sandbox) WriteFileFrom(ctx context.Context, path string, r io.Reader, mode os.FileMode) error {
	ex, err := s.fileExecd(ctx)
	if err != nil {
		return err
	}
	if err := ex.UploadFile(ctx, path, r, opensandbox.Permission{Mode: mode}); err != nil {
		return s.fileErr("write file", err)
	}
	return nil
}

// ReadFile returns the content of the file at path.
func (s *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	rc, err := s.OpenFile(ctx, path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, s.fileErr("read file", err)
	}
	return b, nil
}

// OpenFile streams the file at path; the caller closes the reader.
func (s *Sandbox) OpenFile(ctx context.Context, path string) (io.ReadCloser, error) {
	ex, err := s.fileExecd(ctx)
	if err != nil {
		return nil, err
	}
	rc, err := ex.DownloadFile(ctx, path)
	if err != nil {
		return nil, s.fileErr("read file", err)
	}
	return rc, nil
}

// MoveFile moves or renames a file.
func (s *Sandbox) MoveFile(ctx context.Context, from, to string) error {
	ex, err := s.fileExecd(ctx)
	if err != nil {
		return err
	}
	return s.fileErr("move file", ex.MoveFiles(ctx, opensandbox.Move{Src: from, Dest: to}))
}

// DeleteFile deletes a file.
func (s *Sandbox) DeleteFile(ctx context.Context, path string) error {
	ex, err := s.fileExecd(ctx)
	if err != nil {
		return err
	}
	return s.fileErr("delete file", ex.DeleteFiles(ctx, path))
}

// CreateDirectory creates a directory and its parents (mode 0755).
func (s *Sandbox) CreateDirectory(ctx context.Context, path string) error {
	ex, err := s.fileExecd(ctx)
	if err != nil {
		return err
	}
	return s.fileErr("create directory", ex.CreateDirectory(ctx, path, opensandbox.Permission{}))
}

// DeleteDirectory deletes a directory and everything in it.
func (s *Sandbox) DeleteDirectory(ctx context.Context, path string) error {
	ex, err := s.fileExecd(ctx)
	if err != nil {
		return err
	}
	return s.fileErr("delete directory", ex.DeleteDirectory(ctx, path))
}

// GetFileInfo returns the metadata of the file at path.
func (s *Sandbox) GetFileInfo(ctx context.Context, path string) (FileInfo, error) {
	ex, err := s.fileExecd(ctx)
	if err != nil {
		return FileInfo{}, err
	}
	m, err := ex.FileInfo(ctx, path)
	if err != nil {
		return FileInfo{}, s.fileErr("get file info", err)
	}
	fi, ok := m[path]
	if !ok && len(m) == 1 {
		for _, v := range m {
			fi, ok = v, true
		}
	}
	if !ok {
		return FileInfo{}, s.fileErr("get file info", fmt.Errorf("server returned no info for %s", path))
	}
	return fi, nil
}

// ReplaceInFiles replaces text in place, in every file listed.
func (s *Sandbox) ReplaceInFiles(ctx context.Context, replacements ...Replacement) error {
	if len(replacements) == 0 {
		return &OptionError{Field: "replacements", Reason: "is empty"}
	}
	ex, err := s.fileExecd(ctx)
	if err != nil {
		return err
	}
	m := make(map[string]opensandbox.Replacement, len(replacements))
	for _, r := range replacements {
		if _, dup := m[r.Path]; dup {
			return &OptionError{Field: "replacements", Reason: "path " + r.Path + " is listed twice"}
		}
		m[r.Path] = opensandbox.Replacement{Old: r.Old, New: r.New}
	}
	_, err = ex.ReplaceInFiles(ctx, m)
	return s.fileErr("replace in files", err)
}

// Transfer copies the file at path into target at the same path, streaming it.
func (s *Sandbox) Transfer(ctx context.Context, path string, target *Sandbox) error {
	if target == nil {
		return &OptionError{Field: "target", Reason: "is nil"}
	}
	rc, err := s.OpenFile(ctx, path)
	if err != nil {
		return err
	}
	defer rc.Close()
	return target.WriteFileFrom(ctx, path, rc, 0)
}

// SearchFiles returns the paths of the files under dir (recursively; "/" when
// empty) whose base name matches the glob pattern.
func (s *Sandbox) SearchFiles(ctx context.Context, pattern, dir string) ([]string, error) {
	if dir == "" {
		dir = "/"
	}
	ex, err := s.fileExecd(ctx)
	if err != nil {
		return nil, err
	}
	fis, err := ex.SearchFiles(ctx, dir, pattern)
	if err != nil {
		return nil, s.fileErr("search files", err)
	}
	out := make([]string, len(fis))
	for i, fi := range fis {
		out[i] = fi.Path
	}
	return out, nil
}

// ListDirectory lists a directory's entries with their metadata.
func (s *Sandbox) ListDirectory(ctx context.Context, path string, opts ...ListDirectoryOptions) ([]FileInfo, error) {
	depth := 1
	if len(opts) > 0 && opts[0].Depth > 1 {
		depth = opts[0].Depth
	}
	ex, err := s.fileExecd(ctx)
	if err != nil {
		return nil, err
	}
	fis, err := ex.ListDirectory(ctx, path, depth)
	if err != nil {
		return nil, s.fileErr("list directory", err)
	}
	return fis, nil
}

// Proxy returns the URL and headers that reach port inside the sandbox (through
// the server with Options.UseServerProxy).
func (s *Sandbox) Proxy(ctx context.Context, port int) (ProxyInfo, error) {
	if _, err := s.fileExecd(ctx); err != nil && !errors.Is(err, ErrPaused) {
		return ProxyInfo{}, err
	}
	ep, err := s.c.os.GetEndpoint(ctx, s.id, port)
	if err != nil {
		return ProxyInfo{}, s.fileErr("proxy", err)
	}
	return ProxyInfo{URL: ep.URL, Headers: ep.Headers}, nil
}

// Metrics returns the sandbox's current CPU and memory use.
func (s *Sandbox) Metrics(ctx context.Context) (Metrics, error) {
	ex, err := s.fileExecd(ctx)
	if err != nil {
		return Metrics{}, err
	}
	m, err := ex.Metrics(ctx)
	if err != nil {
		return Metrics{}, s.fileErr("metrics", err)
	}
	return Metrics{CPU: m.CPUUsedPct, CPUCount: m.CPUCount, Memory: m.MemUsedMiB, MemoryTotal: m.MemTotalMiB,
		Timestamp: time.UnixMilli(m.Timestamp)}, nil
}

func (s *Sandbox) fileErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return &SandboxError{SandboxID: s.id, Op: op, Err: err}
}
