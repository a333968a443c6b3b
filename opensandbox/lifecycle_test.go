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

const sandboxJSON = `{"id":"sbx-1","status":{"state":"Running","lastTransitionAt":"2026-11-29T09:00:00Z"},
 "image":{"uri":"host"},"entrypoint":["tail","-f","/dev/null"],"metadata":{"project":"apollo"},
 "expiresAt":"2026-11-29T10:00:00Z","createdAt":"2026-11-29T08:59:58Z"}`

const snapshotJSON = `{"id":"snap-1","sandboxId":"sbx-1","name":"base","status":{"state":"Creating"},"createdAt":"2026-11-29T09:00:00Z"}`

func TestLifecycleRequestShapes(t *testing.T) {
	ptr := func(s string) *string { return &s }
	tests := []struct {
		name      string
		status    int
		resp      string
		call      func(ctx context.Context, c *opensandbox.Client) (any, error)
		method    string
		path      string
		query     url.Values
		body      string // "" = no body expected
		check     func(t *testing.T, got any)
		wantProxy bool
	}{
		{
			name: "create from image", status: 202,
			resp: `{"id":"sbx-1","status":{"state":"Pending"},"createdAt":"2026-11-29T08:59:58Z","expiresAt":"2026-11-29T09:09:58Z","entrypoint":["tail","-f","/dev/null"]}`,
			call: func(ctx context.Context, c *opensandbox.Client) (any, error) {
				return c.CreateSandbox(ctx, opensandbox.CreateSandboxRequest{
					Image: &opensandbox.ImageSpec{URI: "host"}, Entrypoint: []string{"tail", "-f", "/dev/null"},
					Env: map[string]string{"A": "1"}, Metadata: map[string]string{"runId": "r1"},
					ResourceLimits: map[string]string{"cpu": "500m", "memory": "512Mi"}, Timeout: 10 * time.Minute,
					NetworkPolicy:   &opensandbox.NetworkPolicy{DefaultAction: "deny", Egress: []opensandbox.NetworkRule{{Action: "allow", Target: "*.github.com"}}},
					CredentialProxy: &opensandbox.CredentialProxy{Enabled: true},
				})
			},
			method: "POST", path: "/v1/sandboxes",
			body: `{"image":{"uri":"host"},"entrypoint":["tail","-f","/dev/null"],"env":{"A":"1"},
				"metadata":{"runId":"r1"},"resourceLimits":{"cpu":"500m","memory":"512Mi"},"timeout":600,
				"networkPolicy":{"defaultAction":"deny","egress":[{"action":"allow","target":"*.github.com"}]},
				"credentialProxy":{"enabled":true}}`,
			check: func(t *testing.T, got any) {
				sb := got.(*opensandbox.Sandbox)
				if sb.ID != "sbx-1" || sb.Status.State != opensandbox.StatePending {
					t.Errorf("sandbox = %+v, want sbx-1 Pending", sb)
				}
				if sb.ExpiresAt == nil || !sb.ExpiresAt.Equal(time.Date(2026, 11, 29, 9, 9, 58, 0, time.UTC)) {
					t.Errorf("ExpiresAt = %v", sb.ExpiresAt)
				}
			},
		},
		{
			name: "create from snapshot without expiry", status: 202,
			resp: `{"id":"sbx-2","status":{"state":"Pending"},"createdAt":"2026-11-29T08:59:58Z","entrypoint":["tail","-f","/dev/null"]}`,
			call: func(ctx context.Context, c *opensandbox.Client) (any, error) {
				return c.CreateSandbox(ctx, opensandbox.CreateSandboxRequest{SnapshotID: "snap-1",
					ResourceLimits: map[string]string{"cpu": "1"}})
			},
			method: "POST", path: "/v1/sandboxes",
			body: `{"snapshotId":"snap-1","resourceLimits":{"cpu":"1"}}`,
			check: func(t *testing.T, got any) {
				if sb := got.(*opensandbox.Sandbox); sb.ExpiresAt != nil || sb.ID != "sbx-2" {
					t.Errorf("sandbox = %+v, want sbx-2 without expiry", sb)
				}
			},
		},
		{
			name: "get", status: 200, resp: sandboxJSON,
			call:   func(ctx context.Context, c *opensandbox.Client) (any, error) { return c.GetSandbox(ctx, "sbx-1") },
			method: "GET", path: "/v1/sandboxes/sbx-1",
			check: func(t *testing.T, got any) {
				sb := got.(*opensandbox.Sandbox)
				if sb.Image == nil || sb.Image.URI != "host" || sb.Metadata["project"] != "apollo" ||
					sb.Status.LastTransitionAt == nil || sb.CreatedAt.IsZero() {
					t.Errorf("sandbox = %+v", sb)
				}
			},
		},
		{
			name: "list with filters", status: 200,
			resp: `{"items":[` + sandboxJSON + `],"pagination":{"page":2,"pageSize":50,"totalItems":51,"totalPages":2,"hasNextPage":false}}`,
			call: func(ctx context.Context, c *opensandbox.Client) (any, error) {
				return c.ListSandboxes(ctx, opensandbox.ListSandboxesOptions{
					States:   []opensandbox.SandboxState{opensandbox.StateRunning, opensandbox.StatePaused},
					Metadata: map[string]string{"project": "Apollo", "note": "Demo & co"}, Page: 2, PageSize: 50})
			},
			method: "GET", path: "/v1/sandboxes",
			query: url.Values{"state": {"Running", "Paused"}, "metadata": {"note=Demo+%26+co&project=Apollo"},
				"page": {"2"}, "pageSize": {"50"}},
			check: func(t *testing.T, got any) {
				p := got.(*opensandbox.SandboxPage)
				if len(p.Items) != 1 || p.Items[0].ID != "sbx-1" || p.Pagination.TotalItems != 51 {
					t.Errorf("page = %+v", p)
				}
			},
		},
		{
			name: "delete", status: 204,
			call: func(ctx context.Context, c *opensandbox.Client) (any, error) {
				return nil, c.DeleteSandbox(ctx, "sbx-1")
			},
			method: "DELETE", path: "/v1/sandboxes/sbx-1",
		},
		{
			name: "pause", status: 202,
			call: func(ctx context.Context, c *opensandbox.Client) (any, error) {
				return nil, c.PauseSandbox(ctx, "sbx-1")
			},
			method: "POST", path: "/v1/sandboxes/sbx-1/pause",
		},
		{
			name: "resume", status: 202,
			call: func(ctx context.Context, c *opensandbox.Client) (any, error) {
				return nil, c.ResumeSandbox(ctx, "sbx-1")
			},
			method: "POST", path: "/v1/sandboxes/sbx-1/resume",
		},
		{
			name: "renew", status: 200, resp: `{"expiresAt":"2026-11-29T12:00:00Z"}`,
			call: func(ctx context.Context, c *opensandbox.Client) (any, error) {
				return c.RenewExpiration(ctx, "sbx-1", time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
			},
			method: "POST", path: "/v1/sandboxes/sbx-1/renew-expiration",
			body: `{"expiresAt":"2026-11-29T12:00:00Z"}`,
			check: func(t *testing.T, got any) {
				if ts := got.(time.Time); !ts.Equal(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)) {
					t.Errorf("expiresAt = %v", ts)
				}
			},
		},
		{
			name: "patch metadata", status: 200, resp: sandboxJSON,
			call: func(ctx context.Context, c *opensandbox.Client) (any, error) {
				return c.PatchMetadata(ctx, "sbx-1", map[string]*string{"project": ptr("apollo"), "old": nil})
			},
			method: "PATCH", path: "/v1/sandboxes/sbx-1/metadata", body: `{"project":"apollo","old":null}`,
		},
		{
			name: "endpoint", status: 200,
			resp: `{"endpoint":"127.0.0.1:40001/proxy/44772","headers":{"X-EXECD-ACCESS-TOKEN":"tok"}}`,
			call: func(ctx context.Context, c *opensandbox.Client) (any, error) {
				return c.GetEndpoint(ctx, "sbx-1", opensandbox.ExecdPort)
			},
			method: "GET", path: "/v1/sandboxes/sbx-1/endpoints/44772",
			check: func(t *testing.T, got any) {
				ep := got.(opensandbox.Endpoint)
				if want := "http://127.0.0.1:40001/proxy/44772"; ep.URL != want {
					t.Errorf("URL = %q, want %q", ep.URL, want)
				}
				if ep.Headers["X-EXECD-ACCESS-TOKEN"] != "tok" {
					t.Errorf("headers = %v", ep.Headers)
				}
			},
		},
		{
			name: "endpoint through server proxy", status: 200, wantProxy: true,
			resp: `{"endpoint":"10.0.0.5:8080/sandboxes/sbx-1/proxy/44772"}`,
			call: func(ctx context.Context, c *opensandbox.Client) (any, error) {
				return c.GetEndpoint(ctx, "sbx-1", opensandbox.ExecdPort)
			},
			method: "GET", path: "/v1/sandboxes/sbx-1/endpoints/44772", query: url.Values{"use_server_proxy": {"true"}},
			check: func(t *testing.T, got any) {
				ep := got.(opensandbox.Endpoint)
				if !strings.HasSuffix(ep.URL, "/v1/sandboxes/sbx-1/proxy/44772") || !strings.HasPrefix(ep.URL, "http://127.0.0.1:") {
					t.Errorf("URL = %q, want {base}/v1/sandboxes/sbx-1/proxy/44772", ep.URL)
				}
				if got, want := ep.Headers[opensandbox.HeaderExecdToken], "key-1"; got != want {
					t.Errorf("execd token = %q, want the API key %q", got, want)
				}
			},
		},
		{
			name: "create snapshot", status: 202, resp: snapshotJSON,
			call: func(ctx context.Context, c *opensandbox.Client) (any, error) {
				return c.CreateSnapshot(ctx, "sbx-1", "base")
			},
			method: "POST", path: "/v1/sandboxes/sbx-1/snapshots", body: `{"name":"base"}`,
			check: func(t *testing.T, got any) {
				s := got.(*opensandbox.Snapshot)
				if s.ID != "snap-1" || s.SandboxID != "sbx-1" || s.Status.State != opensandbox.SnapshotCreating {
					t.Errorf("snapshot = %+v", s)
				}
			},
		},
		{
			name: "get snapshot", status: 200, resp: snapshotJSON,
			call:   func(ctx context.Context, c *opensandbox.Client) (any, error) { return c.GetSnapshot(ctx, "snap-1") },
			method: "GET", path: "/v1/snapshots/snap-1",
		},
		{
			name: "list snapshots", status: 200,
			resp: `{"items":[` + snapshotJSON + `],"pagination":{"page":1,"pageSize":20,"totalItems":1,"totalPages":1,"hasNextPage":false}}`,
			call: func(ctx context.Context, c *opensandbox.Client) (any, error) {
				return c.ListSnapshots(ctx, opensandbox.ListSnapshotsOptions{SandboxID: "sbx-1",
					States: []opensandbox.SnapshotState{opensandbox.SnapshotReady}})
			},
			method: "GET", path: "/v1/snapshots", query: url.Values{"sandboxId": {"sbx-1"}, "state": {"Ready"}},
			check: func(t *testing.T, got any) {
				if p := got.(*opensandbox.SnapshotPage); len(p.Items) != 1 || p.Items[0].Name != "base" {
					t.Errorf("page = %+v", p)
				}
			},
		},
		{
			name: "delete snapshot", status: 204,
			call: func(ctx context.Context, c *opensandbox.Client) (any, error) {
				return nil, c.DeleteSnapshot(ctx, "snap-1")
			},
			method: "DELETE", path: "/v1/snapshots/snap-1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				w.Header().Set("X-Request-ID", "req-1")
				if tt.resp == "" {
					w.WriteHeader(tt.status)
					return
				}
				writeJSON(w, tt.status, tt.resp)
			})
			c := newClient(t, rec.URL, func(cfg *opensandbox.Config) { cfg.UseServerProxy = tt.wantProxy })
			got, err := tt.call(context.Background(), c)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			reqs := rec.requests()
			if len(reqs) != 1 {
				t.Fatalf("requests = %d, want 1", len(reqs))
			}
			r := reqs[0]
			if r.Method != tt.method || r.Path != tt.path {
				t.Errorf("request = %s %s, want %s %s", r.Method, r.Path, tt.method, tt.path)
			}
			if got, want := r.Header.Get("OPEN-SANDBOX-API-KEY"), "key-1"; got != want {
				t.Errorf("api key header = %q, want %q", got, want)
			}
			wantQuery := tt.query
			if wantQuery == nil {
				wantQuery = url.Values{}
			}
			if !reflect.DeepEqual(url.Values(r.Query), wantQuery) {
				t.Errorf("query = %v, want %v", r.Query, wantQuery)
			}
			if tt.body == "" {
				if len(r.Body) != 0 {
					t.Errorf("body = %q, want none", r.Body)
				}
			} else {
				jsonEqual(t, tt.name, r.Body, tt.body)
				if ct := r.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q, want application/json", ct)
				}
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

// The metadata filter is one query value that is itself form-encoded (parse_qsl).
func TestListSandboxesMetadataFilterDecodes(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, 200, `{"items":[],"pagination":{"page":1,"pageSize":20,"totalItems":0,"totalPages":0,"hasNextPage":false}}`)
	})
	c := newClient(t, rec.URL)
	want := map[string]string{"project": "Apollo", "note": "a=b&c"}
	if _, err := c.ListSandboxes(context.Background(), opensandbox.ListSandboxesOptions{Metadata: want}); err != nil {
		t.Fatal(err)
	}
	inner, err := url.ParseQuery(rec.last(t).Query["metadata"][0])
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if got := inner.Get(k); got != v {
			t.Errorf("metadata[%s] = %q, want %q", k, got, v)
		}
	}
}

func TestCreateSandboxRejectsBadRequestsLocally(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { writeJSON(w, 202, `{"id":"x"}`) })
	c := newClient(t, rec.URL)
	tests := []struct {
		name string
		req  opensandbox.CreateSandboxRequest
	}{
		{"image and snapshot", opensandbox.CreateSandboxRequest{Image: &opensandbox.ImageSpec{URI: "a"}, SnapshotID: "s"}},
		{"timeout below 60s", opensandbox.CreateSandboxRequest{Image: &opensandbox.ImageSpec{URI: "a"}, Timeout: 30 * time.Second}},
		{"negative timeout", opensandbox.CreateSandboxRequest{Image: &opensandbox.ImageSpec{URI: "a"}, Timeout: -time.Second}},
		{"empty image uri", opensandbox.CreateSandboxRequest{Image: &opensandbox.ImageSpec{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.CreateSandbox(context.Background(), tt.req); !errors.Is(err, opensandbox.ErrInvalidRequest) {
				t.Fatalf("err = %v, want ErrInvalidRequest", err)
			}
		})
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("requests sent = %d, want 0", n)
	}
}

func TestNewRejectsBadBaseURL(t *testing.T) {
	for _, u := range []string{"localhost:8080", "ftp://x/v1", "http://", "::"} {
		if _, err := opensandbox.New(opensandbox.Config{BaseURL: u}); !errors.Is(err, opensandbox.ErrInvalidRequest) {
			t.Errorf("New(%q) err = %v, want ErrInvalidRequest", u, err)
		}
	}
	c, err := opensandbox.New(opensandbox.Config{})
	if err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	if got, want := c.BaseURL(), opensandbox.DefaultBaseURL; got != want {
		t.Errorf("BaseURL = %q, want %q", got, want)
	}
	c, _ = opensandbox.New(opensandbox.Config{BaseURL: "http://h:1/"})
	if got, want := c.BaseURL(), "http://h:1/v1"; got != want {
		t.Errorf("BaseURL = %q, want %q", got, want)
	}
	c, _ = opensandbox.New(opensandbox.Config{BaseURL: "http://h:1/api/v2/"})
	if got, want := c.BaseURL(), "http://h:1/api/v2"; got != want {
		t.Errorf("BaseURL = %q, want %q", got, want)
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		name                  string
		status                int
		ctype, body           string
		want                  error
		wantCode, wantMessage string
	}{
		{"lifecycle 404", 404, "application/json", `{"code":"DOCKER::SANDBOX_NOT_FOUND","message":"sandbox sbx-1 not found"}`,
			opensandbox.ErrNotFound, "DOCKER::SANDBOX_NOT_FOUND", "sandbox sbx-1 not found"},
		{"lifecycle 409", 409, "application/json", `{"code":"DOCKER::INVALID_STATE","message":"busy"}`,
			opensandbox.ErrConflict, "DOCKER::INVALID_STATE", "busy"},
		{"lifecycle 401", 401, "application/json", `{"code":"INVALID_API_KEY","message":"bad key"}`,
			opensandbox.ErrUnauthorized, "INVALID_API_KEY", "bad key"},
		{"execd 401 body", 401, "application/json", `{"error":"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}`,
			opensandbox.ErrUnauthorized, "Unauthorized", `{"error":"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}`},
		{"fastapi 422", 422, "application/json", `{"detail":[{"loc":["body","timeout"],"msg":"too small"}]}`,
			opensandbox.ErrBadRequest, "Unprocessable Entity", `{"detail":[{"loc":["body","timeout"],"msg":"too small"}]}`},
		{"egress plain text", 412, "text/plain", "credential proxy not enabled\n",
			opensandbox.ErrPrecondition, "Precondition Failed", "credential proxy not enabled"},
		{"403", 403, "application/json", `{"code":"FORBIDDEN","message":"no"}`, opensandbox.ErrForbidden, "FORBIDDEN", "no"},
		{"500", 500, "application/json", `{"code":"GENERAL::UNKNOWN_ERROR","message":"boom"}`, opensandbox.ErrServer, "GENERAL::UNKNOWN_ERROR", "boom"},
		{"501", 501, "text/plain", "", opensandbox.ErrNotImplemented, "Not Implemented", ""},
		{"413", 413, "text/plain", "too many rules", opensandbox.ErrTooLarge, "Request Entity Too Large", "too many rules"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				w.Header().Set("Content-Type", tt.ctype)
				w.Header().Set("X-Request-ID", "req-42")
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			})
			c := newClient(t, rec.URL)
			_, err := c.GetSandbox(context.Background(), "sbx-1")
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want errors.Is %v", err, tt.want)
			}
			var apiErr *opensandbox.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %T, want *APIError", err)
			}
			if apiErr.Status != tt.status || apiErr.Code != tt.wantCode || apiErr.Message != tt.wantMessage || apiErr.RequestID != "req-42" {
				t.Errorf("APIError = %+v, want status %d code %q message %q request id req-42",
					apiErr, tt.status, tt.wantCode, tt.wantMessage)
			}
			if errors.Is(err, opensandbox.ErrNotFound) != (tt.status == 404) {
				t.Errorf("errors.Is(ErrNotFound) wrong for status %d", tt.status)
			}
		})
	}
}

func TestRetryOnlyIdempotent(t *testing.T) {
	tests := []struct {
		name      string
		call      func(context.Context, *opensandbox.Client) error
		failures  int32 // 503s before success
		wantCalls int32
		wantErr   error
	}{
		{"get retried until success", func(ctx context.Context, c *opensandbox.Client) error {
			_, err := c.GetSandbox(ctx, "sbx-1")
			return err
		}, 2, 3, nil},
		{"get gives up after max retries", func(ctx context.Context, c *opensandbox.Client) error {
			_, err := c.GetSandbox(ctx, "sbx-1")
			return err
		}, 100, 4, opensandbox.ErrUnavailable},
		{"delete retried", func(ctx context.Context, c *opensandbox.Client) error {
			return c.DeleteSandbox(ctx, "sbx-1")
		}, 1, 2, nil},
		{"create sent once", func(ctx context.Context, c *opensandbox.Client) error {
			_, err := c.CreateSandbox(ctx, opensandbox.CreateSandboxRequest{Image: &opensandbox.ImageSpec{URI: "a"}, Entrypoint: []string{"sh"}})
			return err
		}, 1, 1, opensandbox.ErrUnavailable},
		{"create snapshot sent once", func(ctx context.Context, c *opensandbox.Client) error {
			_, err := c.CreateSnapshot(ctx, "sbx-1", "")
			return err
		}, 1, 1, opensandbox.ErrUnavailable},
		{"pause sent once", func(ctx context.Context, c *opensandbox.Client) error {
			return c.PauseSandbox(ctx, "sbx-1")
		}, 1, 1, opensandbox.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				if calls.Add(1) <= tt.failures {
					writeJSON(w, 503, `{"code":"UNAVAILABLE","message":"try later"}`)
					return
				}
				if r.Method == "DELETE" {
					w.WriteHeader(204)
					return
				}
				writeJSON(w, 200, sandboxJSON)
			})
			c := newClient(t, rec.URL)
			err := tt.call(context.Background(), c)
			if tt.wantErr == nil && err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got := calls.Load(); got != tt.wantCalls {
				t.Errorf("requests = %d, want %d", got, tt.wantCalls)
			}
		})
	}
}

func TestRetryOnDroppedConnectionAndNotOn404(t *testing.T) {
	var calls atomic.Int32
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		switch calls.Add(1) {
		case 1:
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close() // connection reset before any response
		default:
			writeJSON(w, 404, `{"code":"NOT_FOUND","message":"gone"}`)
		}
	})
	c := newClient(t, rec.URL)
	_, err := c.GetSandbox(context.Background(), "sbx-1")
	if !errors.Is(err, opensandbox.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if got, want := calls.Load(), int32(2); got != want {
		t.Errorf("requests = %d, want %d", got, want)
	}
}

func TestRetryDisabled(t *testing.T) {
	var calls atomic.Int32
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		calls.Add(1)
		writeJSON(w, 503, `{"code":"X","message":"y"}`)
	})
	c := newClient(t, rec.URL, func(cfg *opensandbox.Config) { cfg.Retry.MaxRetries = -1 })
	if _, err := c.GetSandbox(context.Background(), "sbx-1"); !errors.Is(err, opensandbox.ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("requests = %d, want 1", got)
	}
}

func TestRequestTimeoutBoundsUnaryCalls(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	c := newClient(t, rec.URL, func(cfg *opensandbox.Config) {
		cfg.RequestTimeout = 100 * time.Millisecond
		cfg.Retry.MaxRetries = -1
	})
	start := time.Now()
	_, err := c.GetSandbox(context.Background(), "sbx-1")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestWaitRunning(t *testing.T) {
	status := func(state, reason string) string {
		return `{"id":"sbx-1","status":{"state":"` + state + `","reason":"` + reason + `","message":"m"},"createdAt":"2026-11-29T09:00:00Z"}`
	}
	tests := []struct {
		name      string
		states    []string
		wantErr   error
		wantState string
	}{
		{"pending then running", []string{"Pending", "Pending", "Running"}, nil, ""},
		{"failed", []string{"Pending", "Failed"}, opensandbox.ErrSandboxFailed, "Failed"},
		{"terminated", []string{"Terminated"}, opensandbox.ErrSandboxFailed, "Terminated"},
		{"unknown state tolerated", []string{"Weird", "Running"}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				i := int(n.Add(1)) - 1
				i = min(i, len(tt.states)-1)
				writeJSON(w, 200, status(tt.states[i], "runtime_error"))
			})
			c := newClient(t, rec.URL)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sb, err := c.WaitRunning(ctx, "sbx-1")
			if tt.wantErr == nil {
				if err != nil || sb.Status.State != opensandbox.StateRunning {
					t.Fatalf("WaitRunning = %+v, %v; want Running", sb, err)
				}
				if got, want := len(rec.requests()), len(tt.states); got != want {
					t.Errorf("polls = %d, want %d", got, want)
				}
				return
			}
			var se *opensandbox.StateError
			if !errors.Is(err, tt.wantErr) || !errors.As(err, &se) {
				t.Fatalf("err = %v, want *StateError wrapping %v", err, tt.wantErr)
			}
			if se.State != tt.wantState || se.Reason != "runtime_error" || se.Message != "m" || se.ID != "sbx-1" {
				t.Errorf("StateError = %+v", se)
			}
		})
	}
}

func TestWaitRunningStopsOnContextAndNotFound(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, 200, `{"id":"sbx-1","status":{"state":"Pending"},"createdAt":"2026-11-29T09:00:00Z"}`)
	})
	c := newClient(t, rec.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.WaitRunning(ctx, "sbx-1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	gone := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, 404, `{"code":"DOCKER::SANDBOX_NOT_FOUND","message":"no"}`)
	})
	if _, err := newClient(t, gone.URL).WaitRunning(context.Background(), "sbx-1"); !errors.Is(err, opensandbox.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

func TestWaitSnapshotReady(t *testing.T) {
	for _, tt := range []struct {
		final   string
		wantErr error
	}{{"Ready", nil}, {"Failed", opensandbox.ErrSnapshotFailed}} {
		t.Run(tt.final, func(t *testing.T) {
			var n atomic.Int32
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				state := "Creating"
				if n.Add(1) >= 3 {
					state = tt.final
				}
				writeJSON(w, 200, `{"id":"snap-1","sandboxId":"sbx-1","status":{"state":"`+state+`","reason":"disk"},"createdAt":"2026-11-29T09:00:00Z"}`)
			})
			s, err := newClient(t, rec.URL).WaitSnapshotReady(context.Background(), "snap-1")
			if tt.wantErr == nil {
				if err != nil || s.Status.State != opensandbox.SnapshotReady {
					t.Fatalf("= %+v, %v", s, err)
				}
				return
			}
			var se *opensandbox.StateError
			if !errors.Is(err, tt.wantErr) || !errors.As(err, &se) || se.Reason != "disk" || se.Kind != "snapshot" {
				t.Fatalf("err = %v, want *StateError wrapping %v", err, tt.wantErr)
			}
		})
	}
}

func TestPathEscapingAndHostRewrite(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if strings.Contains(r.URL.Path, "/endpoints/") {
			writeJSON(w, 200, `{"endpoint":"host.docker.internal:40001/proxy/44772"}`)
			return
		}
		writeJSON(w, 200, sandboxJSON)
	})
	c := newClient(t, rec.URL, func(cfg *opensandbox.Config) {
		cfg.EndpointHostRewrite = map[string]string{"host.docker.internal": "localhost"}
	})
	if _, err := c.GetSandbox(context.Background(), "a/b c"); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.last(t).Path, "/v1/sandboxes/a%2Fb%20c"; got != want {
		t.Errorf("path = %q, want %q", got, want)
	}
	ep, err := c.GetEndpoint(context.Background(), "sbx-1", 44772)
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://localhost:40001/proxy/44772"; ep.URL != want {
		t.Errorf("URL = %q, want %q", ep.URL, want)
	}
	if _, err := c.GetEndpoint(context.Background(), "sbx-1", 0); !errors.Is(err, opensandbox.ErrInvalidRequest) {
		t.Errorf("port 0 err = %v, want ErrInvalidRequest", err)
	}
}

func TestDiagnostics(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if r.URL.Query().Get("scope") == "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte("raw log line\n"))
			return
		}
		writeJSON(w, 200, `{"sandboxId":"sbx-1","kind":"logs","scope":"container","delivery":"inline",
			"contentType":"text/plain; charset=utf-8","content":"line\n","truncated":false}`)
	})
	c := newClient(t, rec.URL)
	d, err := c.Diagnostics(context.Background(), "sbx-1", "logs", "container")
	if err != nil {
		t.Fatal(err)
	}
	if d.Delivery != "inline" || d.Content != "line\n" || d.Scope != "container" {
		t.Errorf("descriptor = %+v", d)
	}
	if r := rec.last(t); r.Path != "/v1/sandboxes/sbx-1/diagnostics/logs" || r.Query["scope"][0] != "container" {
		t.Errorf("request = %s %v", r.Path, r.Query)
	}
	d, err = c.Diagnostics(context.Background(), "sbx-1", "events", "")
	if err != nil || d.Content != "raw log line\n" || d.Kind != "events" {
		t.Errorf("raw = %+v, %v", d, err)
	}
	if _, err := c.Diagnostics(context.Background(), "sbx-1", "bogus", ""); !errors.Is(err, opensandbox.ErrInvalidRequest) {
		t.Errorf("bad kind err = %v", err)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	var calls atomic.Int32
	var first, second atomic.Int64 // Unix nanoseconds
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if calls.Add(1) == 1 {
			first.Store(time.Now().UnixNano())
			w.Header().Set("Retry-After", "1")
			writeJSON(w, 429, `{"code":"RATE_LIMITED","message":"slow down"}`)
			return
		}
		second.Store(time.Now().UnixNano())
		writeJSON(w, 200, sandboxJSON)
	})
	if _, err := newClient(t, rec.URL).GetSandbox(context.Background(), "sbx-1"); err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(second.Load() - first.Load()); d < 900*time.Millisecond {
		t.Errorf("retried after %v, want at least the 1 s Retry-After", d)
	}
}

// A retried call whose ctx ends while it waits to retry wraps both the ctx's
// error and the last attempt's error.
func TestRetryCancelledKeepsLastError(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, 503, `{"code":"X","message":"y"}`)
	})
	c := newClient(t, rec.URL, func(cfg *opensandbox.Config) {
		cfg.Retry = opensandbox.RetryConfig{MaxRetries: 100, InitialInterval: time.Hour, MaxInterval: time.Hour}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.GetSandbox(ctx, "sbx-1")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	var apiErr *opensandbox.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 503 || !errors.Is(err, opensandbox.ErrUnavailable) {
		t.Fatalf("err = %v, want it to wrap the last attempt's *APIError (503)", err)
	}
}
