package opensandbox_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/opensandbox"
)

const fileInfoJSON = `{"path":"/tmp/a.txt","type":"file","size":17,"modified_at":"2026-11-29T09:21:29.123456789Z",
 "created_at":"2026-11-29T09:21:29Z","owner":"root","group":"root","mode":644}`

func TestExecdRequestShapes(t *testing.T) {
	tests := []struct {
		name   string
		status int
		resp   string
		header map[string]string
		call   func(ctx context.Context, ex *opensandbox.Execd) (any, error)
		method string
		path   string
		query  url.Values
		body   string
		check  func(t *testing.T, got any)
	}{
		{
			name: "command status", status: 200,
			resp: `{"id":"c1","content":"exit 7","running":false,"exit_code":7,"error":"exit status 7",
				"started_at":"2026-11-29T09:21:29.99Z","finished_at":"2026-11-29T09:21:31.00Z"}`,
			call:   func(ctx context.Context, ex *opensandbox.Execd) (any, error) { return ex.CommandStatus(ctx, "c1") },
			method: "GET", path: "/command/status/c1",
			check: func(t *testing.T, got any) {
				st := got.(*opensandbox.CommandStatus)
				if st.ExitCode == nil || *st.ExitCode != 7 || st.Running || st.FinishedAt == nil || st.Error != "exit status 7" {
					t.Errorf("status = %+v", st)
				}
			},
		},
		{
			name: "command logs with byte cursor", status: 200, resp: "g-start\nbg-err\n",
			header: map[string]string{"EXECD-COMMANDS-TAIL-CURSOR": "23", "Content-Type": "text/plain"},
			call:   func(ctx context.Context, ex *opensandbox.Execd) (any, error) { return ex.CommandLogs(ctx, "c1", 1) },
			method: "GET", path: "/command/c1/logs", query: url.Values{"cursor": {"1"}},
			check: func(t *testing.T, got any) {
				l := got.(*opensandbox.CommandLogs)
				if string(l.Output) != "g-start\nbg-err\n" || l.Cursor != 23 {
					t.Errorf("logs = %q cursor %d, want cursor 23", l.Output, l.Cursor)
				}
			},
		},
		{
			name: "interrupt", status: 200,
			call:   func(ctx context.Context, ex *opensandbox.Execd) (any, error) { return nil, ex.Interrupt(ctx, "c1") },
			method: "DELETE", path: "/command", query: url.Values{"id": {"c1"}},
		},
		{
			name: "delete session", status: 200,
			call:   func(ctx context.Context, ex *opensandbox.Execd) (any, error) { return nil, ex.DeleteSession(ctx, "s1") },
			method: "DELETE", path: "/session/s1",
		},
		{
			name: "create code context", status: 200, resp: `{"id":"k1","language":"python"}`,
			call: func(ctx context.Context, ex *opensandbox.Execd) (any, error) {
				return ex.CreateCodeContext(ctx, "python", "")
			},
			method: "POST", path: "/code/context", body: `{"language":"python"}`,
			check: func(t *testing.T, got any) {
				if c := got.(opensandbox.CodeContext); c.ID != "k1" {
					t.Errorf("context = %+v", c)
				}
			},
		},
		{
			name: "list code contexts", status: 200, resp: `[{"id":"k1","language":"python"}]`,
			call: func(ctx context.Context, ex *opensandbox.Execd) (any, error) {
				return ex.ListCodeContexts(ctx, "python")
			},
			method: "GET", path: "/code/contexts", query: url.Values{"language": {"python"}},
		},
		{
			name: "delete code context", status: 200,
			call: func(ctx context.Context, ex *opensandbox.Execd) (any, error) {
				return nil, ex.DeleteCodeContext(ctx, "k1")
			},
			method: "DELETE", path: "/code/contexts/k1",
		},
		{
			name: "interrupt code", status: 200,
			call:   func(ctx context.Context, ex *opensandbox.Execd) (any, error) { return nil, ex.InterruptCode(ctx, "k1") },
			method: "DELETE", path: "/code", query: url.Values{"id": {"k1"}},
		},
		{
			name: "file info", status: 200, resp: `{"/tmp/a.txt":` + fileInfoJSON + `}`,
			call: func(ctx context.Context, ex *opensandbox.Execd) (any, error) {
				return ex.FileInfo(ctx, "/tmp/a.txt", "/tmp/b")
			},
			method: "GET", path: "/files/info", query: url.Values{"path": {"/tmp/a.txt", "/tmp/b"}},
			check: func(t *testing.T, got any) {
				fi := got.(map[string]opensandbox.FileInfo)["/tmp/a.txt"]
				if fi.Mode != 0o644 || fi.Size != 17 || fi.Type != "file" || fi.ModifiedAt.Nanosecond() != 123456789 || fi.IsDir() {
					t.Errorf("info = %+v, want mode 0644", fi)
				}
			},
		},
		{
			name: "delete files", status: 200,
			call: func(ctx context.Context, ex *opensandbox.Execd) (any, error) {
				return nil, ex.DeleteFiles(ctx, "/a", "/b c")
			},
			method: "DELETE", path: "/files", query: url.Values{"path": {"/a", "/b c"}},
		},
		{
			name: "move", status: 200,
			call: func(ctx context.Context, ex *opensandbox.Execd) (any, error) {
				return nil, ex.MoveFiles(ctx, opensandbox.Move{Src: "/a", Dest: "/b"})
			},
			method: "POST", path: "/files/mv", body: `[{"src":"/a","dest":"/b"}]`,
		},
		{
			name: "permissions", status: 200,
			call: func(ctx context.Context, ex *opensandbox.Execd) (any, error) {
				return nil, ex.SetPermissions(ctx, map[string]opensandbox.Permission{"/a": {Mode: 0o755, Owner: "u"}})
			},
			method: "POST", path: "/files/permissions", body: `{"/a":{"mode":755,"owner":"u"}}`,
		},
		{
			name: "search", status: 200, resp: `[` + fileInfoJSON + `]`,
			call: func(ctx context.Context, ex *opensandbox.Execd) (any, error) {
				return ex.SearchFiles(ctx, "/tmp", "*.txt")
			},
			method: "GET", path: "/files/search", query: url.Values{"path": {"/tmp"}, "pattern": {"*.txt"}},
			check: func(t *testing.T, got any) {
				if fs := got.([]opensandbox.FileInfo); len(fs) != 1 || fs[0].Path != "/tmp/a.txt" {
					t.Errorf("search = %+v", fs)
				}
			},
		},
		{
			name: "replace verbose", status: 200, resp: `{"/a":{"replacedCount":2}}`,
			call: func(ctx context.Context, ex *opensandbox.Execd) (any, error) {
				return ex.ReplaceInFiles(ctx, map[string]opensandbox.Replacement{"/a": {Old: "x", New: "y"}})
			},
			method: "POST", path: "/files/replace", query: url.Values{"verbose": {"true"}}, body: `{"/a":{"old":"x","new":"y"}}`,
			check: func(t *testing.T, got any) {
				if m := got.(map[string]int); m["/a"] != 2 {
					t.Errorf("counts = %v", m)
				}
			},
		},
		{
			name: "replace with empty answer", status: 200,
			call: func(ctx context.Context, ex *opensandbox.Execd) (any, error) {
				return ex.ReplaceInFiles(ctx, map[string]opensandbox.Replacement{"/a": {Old: "x", New: "y"}})
			},
			method: "POST", path: "/files/replace", query: url.Values{"verbose": {"true"}}, body: `{"/a":{"old":"x","new":"y"}}`,
		},
		{
			name: "create directory", status: 200,
			call: func(ctx context.Context, ex *opensandbox.Execd) (any, error) {
				return nil, ex.CreateDirectory(ctx, "/d/e", opensandbox.Permission{})
			},
			method: "POST", path: "/directories", body: `{"/d/e":{"mode":755}}`,
		},
		{
			name: "delete directory", status: 200,
			call: func(ctx context.Context, ex *opensandbox.Execd) (any, error) {
				return nil, ex.DeleteDirectory(ctx, "/d")
			},
			method: "DELETE", path: "/directories", query: url.Values{"path": {"/d"}},
		},
		{
			name: "list directory", status: 200, resp: `[` + fileInfoJSON + `]`,
			call: func(ctx context.Context, ex *opensandbox.Execd) (any, error) {
				return ex.ListDirectory(ctx, "/tmp", 2)
			},
			method: "GET", path: "/directories/list", query: url.Values{"path": {"/tmp"}, "depth": {"2"}},
		},
		{
			name: "metrics", status: 200,
			resp:   `{"cpu_count":2,"cpu_used_pct":0.50,"mem_total_mib":24105.56,"mem_used_mib":97.14,"timestamp":1795944094474}`,
			call:   func(ctx context.Context, ex *opensandbox.Execd) (any, error) { return ex.Metrics(ctx) },
			method: "GET", path: "/metrics",
			check: func(t *testing.T, got any) {
				m := got.(*opensandbox.Metrics)
				if m.CPUCount != 2 || m.MemUsedMiB != 97.14 || m.Timestamp != 1795944094474 {
					t.Errorf("metrics = %+v", m)
				}
			},
		},
		{
			name: "ping", status: 200,
			call:   func(ctx context.Context, ex *opensandbox.Execd) (any, error) { return nil, ex.Ping(ctx) },
			method: "GET", path: "/ping",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, rec := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.resp))
			})
			got, err := tt.call(context.Background(), ex)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			r := rec.last(t)
			if r.Method != tt.method || r.Path != tt.path {
				t.Errorf("request = %s %s, want %s %s", r.Method, r.Path, tt.method, tt.path)
			}
			if r.Header.Get("X-EXECD-ACCESS-TOKEN") != "tok" {
				t.Errorf("token header missing: %v", r.Header)
			}
			wantQuery := tt.query
			if wantQuery == nil {
				wantQuery = url.Values{}
			}
			if !reflect.DeepEqual(url.Values(r.Query), wantQuery) {
				t.Errorf("query = %v, want %v", r.Query, wantQuery)
			}
			if tt.body == "" && len(r.Body) != 0 {
				t.Errorf("body = %q, want none", r.Body)
			}
			if tt.body != "" {
				jsonEqual(t, tt.name, r.Body, tt.body)
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

func TestExecdErrorsAreTyped(t *testing.T) {
	ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/files/info"):
			writeJSON(w, 404, `{"code":"FILE_NOT_FOUND","message":"no such file"}`)
		case strings.HasPrefix(r.URL.Path, "/session/"):
			writeJSON(w, 404, `{"code":"CONTEXT_NOT_FOUND","message":"session"}`)
		default:
			writeJSON(w, 500, `{"code":"RUNTIME_ERROR","message":"no such session"}`)
		}
	})
	ctx := context.Background()
	if _, err := ex.FileInfo(ctx, "/x"); !errors.Is(err, opensandbox.ErrNotFound) {
		t.Errorf("FileInfo err = %v, want ErrNotFound", err)
	}
	if err := ex.DeleteSession(ctx, "s"); !errors.Is(err, opensandbox.ErrNotFound) {
		t.Errorf("DeleteSession err = %v, want ErrNotFound", err)
	}
	var apiErr *opensandbox.APIError
	if err := ex.Interrupt(ctx, "c"); !errors.As(err, &apiErr) || apiErr.Code != "RUNTIME_ERROR" {
		t.Errorf("Interrupt err = %v, want RUNTIME_ERROR", err)
	}
	for name, err := range map[string]error{
		"info":     func() error { _, err := ex.FileInfo(ctx); return err }(),
		"logs":     func() error { _, err := ex.CommandLogs(ctx, "c", -1); return err }(),
		"mv":       ex.MoveFiles(ctx),
		"download": func() error { _, err := ex.DownloadRange(ctx, "/a", -1, 2); return err }(),
		"session": func() error {
			_, err := ex.RunInSession(ctx, "", opensandbox.SessionRunRequest{Command: "x"})
			return err
		}(),
	} {
		if !errors.Is(err, opensandbox.ErrInvalidRequest) {
			t.Errorf("%s err = %v, want ErrInvalidRequest", name, err)
		}
	}
}

func TestWatchMetrics(t *testing.T) {
	ex, rec := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		startStream(w)
		// execd: one JSON object per line, no blank lines, errors as {"error":...}.
		for _, l := range []string{
			`{"cpu_count":2,"cpu_used_pct":1.5,"mem_total_mib":100,"mem_used_mib":10,"timestamp":1}`,
			`{"error":"sample failed"}`,
			`{"cpu_count":2,"cpu_used_pct":2.5,"mem_total_mib":100,"mem_used_mib":11,"timestamp":2}`,
		} {
			_, _ = w.Write([]byte(l + "\n"))
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	})
	var got []float64
	var errs int
	for m, err := range ex.WatchMetrics(context.Background()) {
		if err != nil {
			errs++
			continue
		}
		got = append(got, m.CPUUsedPct)
		if len(got) == 2 {
			break
		}
	}
	if !reflect.DeepEqual(got, []float64{1.5, 2.5}) || errs != 1 {
		t.Errorf("samples = %v, errors %d; want [1.5 2.5] and 1 error", got, errs)
	}
	if r := rec.last(t); r.Path != "/metrics/watch" || r.Method != "GET" {
		t.Errorf("request = %s %s", r.Method, r.Path)
	}
}

func TestWatchMetricsEndsOnContextAndClose(t *testing.T) {
	ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		startStream(w)
		_, _ = w.Write([]byte(`{"cpu_count":1,"timestamp":1}` + "\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	for _, err := range ex.WatchMetrics(ctx) {
		if err != nil {
			t.Fatalf("err = %v; a cancelled watch ends quietly", err)
		}
		n++
		cancel()
	}
	if n != 1 {
		t.Errorf("samples = %d, want 1", n)
	}
	// Close of the execd client ends a watch with an error.
	done := make(chan error, 1)
	go func() {
		var last error
		for _, err := range ex.WatchMetrics(context.Background()) {
			if err != nil {
				last = err
			}
		}
		done <- last
	}()
	time.Sleep(100 * time.Millisecond)
	ex.Close()
	select {
	case err := <-done:
		if !errors.Is(err, opensandbox.ErrClosed) {
			t.Errorf("err = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end on Close")
	}
}

func TestWaitReady(t *testing.T) {
	var n atomic.Int32
	ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if n.Add(1) < 3 {
			w.WriteHeader(502)
			_, _ = w.Write([]byte("Bad Gateway"))
			return
		}
		w.WriteHeader(200)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ex.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if got := n.Load(); got != 3 {
		t.Errorf("probes = %d, want 3", got)
	}

	ex401, rec := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, 401, `{"error":"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}`)
	})
	err := ex401.WaitReady(ctx)
	if !errors.Is(err, opensandbox.ErrNotReady) || !errors.Is(err, opensandbox.ErrUnauthorized) {
		t.Fatalf("err = %v, want ErrNotReady and ErrUnauthorized", err)
	}
	if got := len(rec.requests()); got != 1 {
		t.Errorf("probes = %d, want 1 (401 is final)", got)
	}

	exDown, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { w.WriteHeader(503) })
	sctx, scancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer scancel()
	if err := exDown.WaitReady(sctx); !errors.Is(err, opensandbox.ErrNotReady) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotReady and DeadlineExceeded", err)
	}
}

// WaitReady that runs out of time wraps ErrNotReady, the ctx's error and the
// last probe's error.
func TestWaitReadyKeepsLastProbeError(t *testing.T) {
	ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { w.WriteHeader(503) })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := ex.WaitReady(ctx)
	if !errors.Is(err, opensandbox.ErrNotReady) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotReady and DeadlineExceeded", err)
	}
	var apiErr *opensandbox.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 503 {
		t.Fatalf("err = %v, want it to wrap the last probe's *APIError (503)", err)
	}
}
