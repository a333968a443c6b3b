package sandboxd_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

func TestLifecycle(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	before := time.Now()
	r := call(t, "POST", base+"/v1/sandboxes", map[string]any{
		"image":          map[string]any{"uri": "host"},
		"entrypoint":     []string{"tail", "-f", "/dev/null"},
		"resourceLimits": map[string]string{"cpu": "500m", "memory": "512Mi"},
		"timeout":        600,
		"env":            map[string]string{"FOO": "bar baz"},
		"metadata":       map[string]string{"project": "apollo", "runId": "r1"},
	})
	wantStatus(t, r, http.StatusAccepted)
	var raw map[string]any
	r.decode(t, &raw)
	if _, ok := raw["image"]; ok {
		t.Errorf("create response has image: %s", r.Body)
	}
	var created sandboxd.Sandbox
	r.decode(t, &created)
	// As the real server: the answer comes once the sandbox runs.
	if created.ID == "" || created.Status.State != sandboxd.StateRunning {
		t.Fatalf("created = %+v, want an id and state Running", created)
	}
	if got, want := r.Header.Get("Location"), "/v1/sandboxes/"+created.ID; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	if created.ExpiresAt == nil || created.ExpiresAt.Sub(before) < 599*time.Second || created.ExpiresAt.Sub(before) > 601*time.Second {
		t.Errorf("expiresAt = %v, want about now+600s", created.ExpiresAt)
	}
	if got := strings.Join(created.Entrypoint, " "); got != "tail -f /dev/null" {
		t.Errorf("entrypoint = %q", got)
	}
	id := created.ID

	sb := waitState(t, base, id, sandboxd.StateRunning)
	if sb.Image == nil || sb.Image.URI != "host" {
		t.Errorf("image = %+v, want host", sb.Image)
	}
	if sb.Metadata["project"] != "apollo" || sb.Status.LastTransitionAt == nil {
		t.Errorf("sandbox = %+v", sb)
	}
	// Root and /v1 serve the same API.
	wantStatus(t, call(t, "GET", base+"/sandboxes/"+id, nil), http.StatusOK)

	u, tok := execdEndpoint(t, base, id, false)
	// As the Docker runtime answers (API-NOTES §4): the host port of execd,
	// then /proxy/44772, so that the URL ends with the port asked for.
	if !regexp.MustCompile(`^http://127\.0\.0\.1:\d+/proxy/44772$`).MatchString(u) {
		t.Errorf("execd endpoint = %q, want http://127.0.0.1:PORT/proxy/44772", u)
	}
	if tok == "" {
		t.Fatal("no execd token header")
	}
	lines, code := run(t, u, tok, `echo "$FOO"`)
	if code != 0 || strings.Join(lines, "|") != "bar baz" {
		t.Errorf("echo $FOO = %q (exit %d), want \"bar baz\"", lines, code)
	}

	t.Run("endpoints", func(t *testing.T) {
		host := strings.TrimPrefix(base, "http://")
		var ep sandboxd.Endpoint
		r := call(t, "GET", base+"/v1/sandboxes/"+id+"/endpoints/8080", nil)
		wantStatus(t, r, http.StatusOK)
		r.decode(t, &ep)
		if want := host + "/sandboxes/" + id + "/proxy/8080"; ep.Endpoint != want || len(ep.Headers) != 0 {
			t.Errorf("endpoint 8080 = %+v, want %s without headers", ep, want)
		}
		r = call(t, "GET", fmt.Sprintf("%s/v1/sandboxes/%s/endpoints/%d?use_server_proxy=true", base, id, sandboxd.ExecdPort), nil)
		wantStatus(t, r, http.StatusOK)
		r.decode(t, &ep)
		if want := fmt.Sprintf("%s/sandboxes/%s/proxy/%d", host, id, sandboxd.ExecdPort); ep.Endpoint != want || ep.Headers[sandboxd.ExecdTokenHeader] != tok {
			t.Errorf("proxied execd endpoint = %+v, want %s with the token", ep, want)
		}
		for _, bad := range []string{"0", "65536", "http", "-1"} {
			wantStatus(t, call(t, "GET", base+"/v1/sandboxes/"+id+"/endpoints/"+bad, nil), http.StatusBadRequest)
		}
		wantStatus(t, call(t, "GET", base+"/v1/sandboxes/"+id+"/endpoints/8080?expires=123", nil), http.StatusBadRequest)
		wantStatus(t, call(t, "GET", base+"/v1/sandboxes/"+id+"/endpoints/8080?use_server_proxy=maybe", nil), http.StatusBadRequest)
	})

	t.Run("metadata", func(t *testing.T) {
		r := call(t, "PATCH", base+"/v1/sandboxes/"+id+"/metadata", `{"team":"ml","project":null,"absent":null}`)
		wantStatus(t, r, http.StatusOK)
		var got sandboxd.Sandbox
		r.decode(t, &got)
		if len(got.Metadata) != 2 || got.Metadata["team"] != "ml" || got.Metadata["runId"] != "r1" {
			t.Errorf("metadata = %v, want {runId:r1 team:ml}", got.Metadata)
		}
		r = call(t, "PATCH", base+"/v1/sandboxes/"+id+"/metadata", `{}`)
		wantStatus(t, r, http.StatusOK)
		r.decode(t, &got)
		if len(got.Metadata) != 2 {
			t.Errorf("metadata after {} = %v", got.Metadata)
		}
		for _, body := range []string{`{"opensandbox.io/x":"1"}`, `{"bad key":"1"}`, `{"k":1}`, `[1]`, `{`, `null`} {
			r = call(t, "PATCH", base+"/v1/sandboxes/"+id+"/metadata", body)
			wantStatus(t, r, http.StatusBadRequest)
			wantCode(t, r, "INVALID_METADATA_FORMAT")
		}
	})

	t.Run("renew", func(t *testing.T) {
		at := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
		r := call(t, "POST", base+"/v1/sandboxes/"+id+"/renew-expiration", map[string]string{"expiresAt": at.Format(time.RFC3339)})
		wantStatus(t, r, http.StatusOK)
		var got struct{ ExpiresAt time.Time }
		r.decode(t, &got)
		if !got.ExpiresAt.Equal(at) {
			t.Errorf("expiresAt = %v, want %v", got.ExpiresAt, at)
		}
		if sb := getSandbox(t, base, id); sb.ExpiresAt == nil || !sb.ExpiresAt.Equal(at) {
			t.Errorf("GET expiresAt = %v, want %v", sb.ExpiresAt, at)
		}
		for _, c := range []struct{ body, code string }{
			{`{"expiresAt":"` + at.Add(-time.Minute).Format(time.RFC3339) + `"}`, "EXPIRATION_NOT_EXTENDED"},
			{`{"expiresAt":"2001-01-01T00:00:00Z"}`, "INVALID_EXPIRATION"},
			{`{"expiresAt":"tomorrow"}`, "INVALID_EXPIRATION"},
			{`{}`, "INVALID_EXPIRATION"},
			{`{"expiresAt":`, "INVALID_REQUEST"},
		} {
			r := call(t, "POST", base+"/v1/sandboxes/"+id+"/renew-expiration", c.body)
			wantStatus(t, r, http.StatusBadRequest)
			wantCode(t, r, c.code)
		}
	})

	t.Run("pause-resume", func(t *testing.T) {
		wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/resume", nil), http.StatusConflict)
		wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/pause", nil), http.StatusAccepted)
		waitState(t, base, id, sandboxd.StatePaused)
		r := call(t, "POST", base+"/v1/sandboxes/"+id+"/pause", nil)
		wantStatus(t, r, http.StatusConflict)
		wantCode(t, r, "INVALID_STATE")
		wantStatus(t, call(t, "GET", base+"/v1/sandboxes/"+id+"/proxy/44772/ping", nil), http.StatusConflict)
		r = call(t, "POST", base+"/v1/sandboxes/"+id+"/resume", nil)
		wantStatus(t, r, http.StatusAccepted)
		if len(r.Body) != 0 || r.Header.Get("Preference-Applied") != "" {
			t.Errorf("resume without Prefer: body %q, Preference-Applied %q; want neither", r.Body, r.Header.Get("Preference-Applied"))
		}
		waitState(t, base, id, sandboxd.StateRunning)
		if lines, code := run(t, u, tok, "echo back"); code != 0 || strings.Join(lines, "") != "back" {
			t.Errorf("after resume: %q exit %d", lines, code)
		}
		// A client that prefers it gets the sandbox in its new state (RFC 7240).
		for _, c := range []struct {
			op, prefer string
			want       sandboxd.State
		}{{"pause", "return=representation, wait=10", sandboxd.StatePaused}, {"resume", `wait=5; x=1, RETURN="representation"`, sandboxd.StateRunning}} {
			r := call(t, "POST", base+"/v1/sandboxes/"+id+"/"+c.op, nil, "Prefer", c.prefer)
			wantStatus(t, r, http.StatusOK)
			var sb sandboxd.Sandbox
			r.decode(t, &sb)
			if sb.ID != id || sb.Status.State != c.want || r.Header.Get("Preference-Applied") != "return=representation" {
				t.Errorf("%s with Prefer %q = %+v, Preference-Applied %q; want %s, return=representation", c.op, c.prefer, sb, r.Header.Get("Preference-Applied"), c.want)
			}
		}
		if lines, code := run(t, u, tok, "echo again"); code != 0 || strings.Join(lines, "") != "again" {
			t.Errorf("after the second resume: %q exit %d", lines, code)
		}
	})

	t.Run("proxy", func(t *testing.T) {
		pu, _ := execdEndpoint(t, base, id, true)
		lines, code := run(t, pu, tok, "echo via-proxy")
		if code != 0 || strings.Join(lines, "") != "via-proxy" {
			t.Errorf("through the proxy: %q exit %d", lines, code)
		}
		// The proxy adds no credentials: without the token execd refuses.
		wantStatus(t, call(t, "GET", pu+"/ping", nil), http.StatusUnauthorized)
		wantStatus(t, call(t, "GET", pu+"/ping", nil, sandboxd.ExecdTokenHeader, tok), http.StatusOK)
		// A closed port is a 502 with a JSON body.
		r := call(t, "GET", base+"/sandboxes/"+id+"/proxy/1/x", nil)
		wantStatus(t, r, http.StatusBadGateway)
		wantCode(t, r, "BAD_GATEWAY")
	})

	// A deleted sandbox is gone at once, as on the real server: 404 on every
	// route, and out of the list.
	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+id, nil), http.StatusNoContent)
	wantStatus(t, call(t, "GET", base+"/v1/sandboxes/"+id, nil), http.StatusNotFound)
	if _, _, err := runErr(t.Context(), u, tok, "true"); err == nil {
		t.Error("execd still answers after delete")
	}
	for _, op := range []string{"pause", "resume"} {
		wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/"+op, nil), http.StatusNotFound)
	}
	wantStatus(t, call(t, "GET", base+"/v1/sandboxes/"+id+"/endpoints/44772", nil), http.StatusNotFound)
	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+id, nil), http.StatusNotFound)
	var list struct{ Items []sandboxd.Sandbox }
	call(t, "GET", base+"/v1/sandboxes", nil).decode(t, &list)
	for _, it := range list.Items {
		if it.ID == id {
			t.Errorf("deleted sandbox still listed: %+v", it.Status)
		}
	}
}

func wantCode(t testing.TB, r resp, code string) {
	t.Helper()
	var e struct{ Code, Message string }
	if err := json.Unmarshal(r.Body, &e); err != nil || e.Code != code || e.Message == "" {
		t.Errorf("body = %s, want {code:%q, message}", r.Body, code)
	}
}

func TestErrors(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	valid := func(mod func(m map[string]any)) map[string]any {
		m := map[string]any{
			"image":          map[string]any{"uri": "host"},
			"entrypoint":     []string{"tail", "-f", "/dev/null"},
			"resourceLimits": map[string]string{"cpu": "500m", "memory": "512Mi"},
		}
		mod(m)
		return m
	}
	const unknown = "/v1/sandboxes/does-not-exist"
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"malformed json", "POST", "/v1/sandboxes", `{"image":`, 400, "INVALID_REQUEST"},
		{"empty body", "POST", "/v1/sandboxes", "", 400, "INVALID_REQUEST"},
		{"wrong type", "POST", "/v1/sandboxes", `{"image":"ubuntu"}`, 400, "INVALID_REQUEST"},
		{"no image", "POST", "/v1/sandboxes", valid(func(m map[string]any) { delete(m, "image") }), 400, "INVALID_REQUEST"},
		{"no entrypoint", "POST", "/v1/sandboxes", valid(func(m map[string]any) { delete(m, "entrypoint") }), 400, "INVALID_REQUEST"},
		{"timeout too small", "POST", "/v1/sandboxes", valid(func(m map[string]any) { m["timeout"] = 59 }), 400, "INVALID_REQUEST"},
		{"bad cpu", "POST", "/v1/sandboxes", valid(func(m map[string]any) { m["resourceLimits"] = map[string]string{"cpu": "lots"} }), 400, "INVALID_RESOURCE_LIMITS"},
		{"bad memory", "POST", "/v1/sandboxes", valid(func(m map[string]any) { m["resourceLimits"] = map[string]string{"memory": "12XB"} }), 400, "INVALID_RESOURCE_LIMITS"},
		{"negative memory", "POST", "/v1/sandboxes", valid(func(m map[string]any) { m["resourceLimits"] = map[string]string{"memory": "-1Gi"} }), 400, "INVALID_RESOURCE_LIMITS"},
		{"gpu", "POST", "/v1/sandboxes", valid(func(m map[string]any) { m["resourceLimits"] = map[string]string{"gpu": "1"} }), 400, "INVALID_RESOURCE_LIMITS"},
		{"reserved metadata", "POST", "/v1/sandboxes", valid(func(m map[string]any) { m["metadata"] = map[string]string{"opensandbox.io/x": "y"} }), 400, "INVALID_METADATA_FORMAT"},
		{"bad env name", "POST", "/v1/sandboxes", valid(func(m map[string]any) { m["env"] = map[string]string{"A=B": "c"} }), 400, "INVALID_REQUEST"},
		{"platform", "POST", "/v1/sandboxes", valid(func(m map[string]any) { m["platform"] = map[string]string{"os": "windows", "arch": "amd64"} }), 400, "INVALID_REQUEST"},
		{"volume without backend", "POST", "/v1/sandboxes", valid(func(m map[string]any) {
			m["volumes"] = []any{map[string]any{"name": "v", "mountPath": "/data"}}
		}), 400, "VOLUME::INVALID_BACKEND"},
		{"volume ossfs", "POST", "/v1/sandboxes", valid(func(m map[string]any) {
			m["volumes"] = []any{map[string]any{"name": "v", "mountPath": "/data", "ossfs": map[string]any{"bucket": "b"}}}
		}), 400, "VOLUME::UNSUPPORTED_BACKEND"},
		{"volume host not allowed", "POST", "/v1/sandboxes", valid(func(m map[string]any) {
			m["volumes"] = []any{map[string]any{"name": "v", "mountPath": "/data", "host": map[string]any{"path": "/etc"}}}
		}), 400, "VOLUME::HOST_PATH_NOT_ALLOWED"},
		{"volume mount path", "POST", "/v1/sandboxes", valid(func(m map[string]any) {
			m["volumes"] = []any{map[string]any{"name": "v", "mountPath": "/proc/x", "pvc": map[string]any{"claimName": "c"}}}
		}), 400, "VOLUME::INVALID_MOUNT_PATH"},
		{"nul in entrypoint", "POST", "/v1/sandboxes", valid(func(m map[string]any) { m["entrypoint"] = []string{"sleep", "1\x00"} }), 400, "INVALID_REQUEST"},
		{"nul in env", "POST", "/v1/sandboxes", valid(func(m map[string]any) { m["env"] = map[string]string{"A": "\x00"} }), 400, "INVALID_REQUEST"},
		{"body too large", "POST", "/v1/sandboxes", `{"metadata":{"a":"` + strings.Repeat("x", 5<<20) + `"}}`, 413, "REQUEST_TOO_LARGE"},
		{"unknown snapshot", "POST", "/v1/sandboxes", map[string]any{"snapshotId": "snap"}, 404, "SNAPSHOT_NOT_FOUND"},
		{"get unknown", "GET", unknown, nil, 404, "SANDBOX_NOT_FOUND"},
		{"delete unknown", "DELETE", unknown, nil, 404, "SANDBOX_NOT_FOUND"},
		{"patch unknown", "PATCH", unknown + "/metadata", `{}`, 404, "SANDBOX_NOT_FOUND"},
		{"pause unknown", "POST", unknown + "/pause", nil, 404, "SANDBOX_NOT_FOUND"},
		{"resume unknown", "POST", unknown + "/resume", nil, 404, "SANDBOX_NOT_FOUND"},
		{"renew unknown", "POST", unknown + "/renew-expiration", `{"expiresAt":"2099-01-01T00:00:00Z"}`, 404, "SANDBOX_NOT_FOUND"},
		{"endpoint unknown", "GET", unknown + "/endpoints/44772", nil, 404, "SANDBOX_NOT_FOUND"},
		{"proxy unknown", "GET", "/sandboxes/does-not-exist/proxy/8080/x", nil, 404, "SANDBOX_NOT_FOUND"},
		{"page 0", "GET", "/v1/sandboxes?page=0", nil, 400, "INVALID_REQUEST"},
		{"pageSize x", "GET", "/v1/sandboxes?pageSize=x", nil, 400, "INVALID_REQUEST"},
		{"metadata filter", "GET", "/v1/sandboxes?metadata=" + url.QueryEscape("novalue"), nil, 400, "INVALID_METADATA_FORMAT"},
		{"unknown route", "GET", "/v1/nothing", nil, 404, "NOT_FOUND"},
		{"wrong method", "PUT", "/v1/sandboxes", nil, 405, "METHOD_NOT_ALLOWED"},
		{"snapshot of unknown sandbox", "POST", "/v1/sandboxes/nope/snapshots", nil, 404, "SANDBOX_NOT_FOUND"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := call(t, c.method, base+c.path, c.body, "X-Request-ID", "req-"+c.name)
			wantStatus(t, r, c.status)
			wantCode(t, r, c.code)
			if got := r.Header.Get("X-Request-ID"); got != "req-"+c.name {
				t.Errorf("X-Request-ID = %q, want the request's", got)
			}
		})
	}
	r := call(t, "GET", base+"/health", nil)
	wantStatus(t, r, http.StatusOK)
	if got := r.Header.Get("X-Request-ID"); len(got) != 32 {
		t.Errorf("generated X-Request-ID = %q, want 32 hex digits", got)
	}
	if got := strings.TrimSpace(string(r.Body)); got != `{"status":"healthy"}` {
		t.Errorf("health = %s", got)
	}
}

func TestAPIKey(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{APIKey: "sekret"})
	wantCode(t, call(t, "GET", base+"/v1/sandboxes", nil), "MISSING_API_KEY")
	r := call(t, "GET", base+"/v1/sandboxes", nil, sandboxd.APIKeyHeader, "wrong")
	wantStatus(t, r, http.StatusUnauthorized)
	wantCode(t, r, "INVALID_API_KEY")
	wantStatus(t, call(t, "GET", base+"/v1/sandboxes", nil, sandboxd.APIKeyHeader, "sekret"), http.StatusOK)
	wantStatus(t, call(t, "GET", base+"/health", nil), http.StatusOK)
	wantStatus(t, call(t, "GET", base+"/v1/health", nil), http.StatusOK)
	// The proxy route skips the API key (the sandbox's own token protects execd).
	wantStatus(t, call(t, "GET", base+"/v1/sandboxes/nope/proxy/44772/ping", nil), http.StatusNotFound)
	wantStatus(t, call(t, "GET", base+"/v1/sandboxes/nope/proxy/44772/../../sandboxes", nil), http.StatusUnauthorized)
}

func TestListFiltersAndPagination(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	var ids []string
	for i, meta := range []map[string]string{
		{"group": "a"}, {"group": "a", "note": "Demo Test"}, {"group": "a"}, {"group": "b"}, {"group": "b"},
	} {
		req := map[string]any{"metadata": meta}
		if i == 0 {
			// A deleted sandbox leaves the list at once (TestLifecycle); one
			// whose entrypoint exits stays, Failed.
			req["entrypoint"] = []string{"true"}
		}
		ids = append(ids, create(t, base, req))
	}
	waitState(t, base, ids[0], sandboxd.StateFailed)
	for _, id := range ids[1:] {
		waitState(t, base, id, sandboxd.StateRunning)
	}

	type page struct {
		Items      []sandboxd.Sandbox
		Pagination sandboxd.Pagination
	}
	list := func(q string) page {
		t.Helper()
		r := call(t, "GET", base+"/v1/sandboxes?"+q, nil)
		wantStatus(t, r, http.StatusOK)
		var p page
		r.decode(t, &p)
		return p
	}
	meta := func(f string) string { return "metadata=" + url.QueryEscape(f) }
	for _, c := range []struct {
		q    string
		want []string
	}{
		{"", ids},
		{meta("group=a"), ids[:3]},
		{"state=Running&" + meta("group=a"), ids[1:3]},
		{"state=Failed", ids[:1]},
		{"state=Running&state=Failed", ids},
		{"state=Terminated", nil},
		{"state=Paused", nil},
		{meta("group=a&note=Demo%20Test"), ids[1:2]},
		{meta("group=c"), nil},
	} {
		p := list(c.q)
		var got []string
		for _, it := range p.Items {
			got = append(got, it.ID)
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") || p.Pagination.TotalItems != len(c.want) {
			t.Errorf("list ?%s = %v (total %d), want %v", c.q, got, p.Pagination.TotalItems, c.want)
		}
	}
	for _, c := range []struct {
		q         string
		items     int
		want      sandboxd.Pagination
		firstItem string
	}{
		{"pageSize=2", 2, sandboxd.Pagination{Page: 1, PageSize: 2, TotalItems: 5, TotalPages: 3, HasNextPage: true}, ids[0]},
		{"pageSize=2&page=2", 2, sandboxd.Pagination{Page: 2, PageSize: 2, TotalItems: 5, TotalPages: 3, HasNextPage: true}, ids[2]},
		{"pageSize=2&page=3", 1, sandboxd.Pagination{Page: 3, PageSize: 2, TotalItems: 5, TotalPages: 3}, ids[4]},
		{"pageSize=2&page=4", 0, sandboxd.Pagination{Page: 4, PageSize: 2, TotalItems: 5, TotalPages: 3}, ""},
		{"pageSize=1000", 5, sandboxd.Pagination{Page: 1, PageSize: 200, TotalItems: 5, TotalPages: 1}, ids[0]},
	} {
		p := list(c.q)
		if len(p.Items) != c.items || p.Pagination != c.want {
			t.Errorf("list ?%s: %d items, %+v; want %d, %+v", c.q, len(p.Items), p.Pagination, c.items, c.want)
		}
		if c.items > 0 && p.Items[0].ID != c.firstItem {
			t.Errorf("list ?%s: first item %s, want %s", c.q, p.Items[0].ID, c.firstItem)
		}
	}
	r := call(t, "GET", base+"/v1/sandboxes?state=Paused", nil)
	if !strings.Contains(string(r.Body), `"items":[]`) {
		t.Errorf("empty list = %s, want items: []", r.Body)
	}
}

func TestEntrypointExitFails(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	for _, c := range []struct {
		name       string
		entrypoint []string
		reason     string
		msg        []string
	}{
		{"exits at once", []string{"sh", "-c", "echo boom >&2; exit 3"}, "entrypoint_exited", []string{"code 3", "boom"}},
		{"exits zero at once", []string{"true"}, "entrypoint_exited", []string{"code 0"}},
		{"not found", []string{"/no/such/program"}, "runtime_error", []string{"/no/such/program"}},
		{"exits later", []string{"sh", "-c", "sleep 0.3; exit 7"}, "entrypoint_exited", []string{"code 7"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := create(t, base, map[string]any{"entrypoint": c.entrypoint})
			sb := waitState(t, base, id, sandboxd.StateFailed)
			if sb.Status.Reason != c.reason {
				t.Errorf("reason = %q, want %q (message %q)", sb.Status.Reason, c.reason, sb.Status.Message)
			}
			for _, m := range c.msg {
				if !strings.Contains(sb.Status.Message, m) {
					t.Errorf("message = %q, want it to mention %q", sb.Status.Message, m)
				}
			}
		})
	}
}

func TestTTLExpiry(t *testing.T) {
	s, base := startServer(t, sandboxd.Config{})
	short := create(t, base, map[string]any{"timeout": 60})
	renewed := create(t, base, map[string]any{"timeout": 60})
	forever := create(t, base, nil)
	for _, id := range []string{short, renewed, forever} {
		waitState(t, base, id, sandboxd.StateRunning)
	}
	if sb := getSandbox(t, base, forever); sb.ExpiresAt != nil {
		t.Errorf("no timeout: expiresAt = %v, want none", sb.ExpiresAt)
	}
	at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+renewed+"/renew-expiration", map[string]string{"expiresAt": at}), http.StatusOK)
	s.SweepAt(time.Now().Add(2 * time.Minute))
	sb := waitState(t, base, short, sandboxd.StateTerminated)
	if sb.Status.Reason != "ttl_expiry" {
		t.Errorf("reason = %q, want ttl_expiry", sb.Status.Reason)
	}
	for _, id := range []string{renewed, forever} {
		if st := getSandbox(t, base, id).Status.State; st != sandboxd.StateRunning {
			t.Errorf("%s: state = %s, want Running", id, st)
		}
	}
	// Past the retention, final records are forgotten.
	s.SweepAt(time.Now().Add(2 * time.Hour))
	testenv.Eventually(t, 5*time.Second, func() error {
		if r := call(t, "GET", base+"/v1/sandboxes/"+short, nil); r.Status != http.StatusNotFound {
			return fmt.Errorf("status %d, want 404", r.Status)
		}
		return nil
	})
}

func TestDiagnostics(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	id := create(t, base, map[string]any{"entrypoint": []string{"sh", "-c", "echo started-ok; exec sleep 1000"}})
	waitState(t, base, id, sandboxd.StateRunning)
	type diag struct {
		SandboxID, Kind, Scope, Delivery, ContentType, Content string
		Truncated                                              bool
	}
	var d diag
	testenv.Eventually(t, 5*time.Second, func() error {
		r := call(t, "GET", base+"/v1/sandboxes/"+id+"/diagnostics/logs?scope=container", nil)
		wantStatus(t, r, http.StatusOK)
		r.decode(t, &d)
		if !strings.Contains(d.Content, "started-ok") {
			return fmt.Errorf("logs = %+v, want the entrypoint's output", d)
		}
		return nil
	})
	if d.SandboxID != id || d.Kind != "logs" || d.Delivery != "inline" || d.Scope != "container" {
		t.Errorf("logs descriptor = %+v", d)
	}
	r := call(t, "GET", base+"/v1/sandboxes/"+id+"/diagnostics/events?scope=lifecycle", nil)
	wantStatus(t, r, http.StatusOK)
	r.decode(t, &d)
	if !strings.Contains(d.Content, "Pending") || !strings.Contains(d.Content, "Running") {
		t.Errorf("events = %q, want the Pending and Running transitions", d.Content)
	}
	wantStatus(t, call(t, "GET", base+"/v1/sandboxes/"+id+"/diagnostics/logs?scope=kernel", nil), http.StatusBadRequest)
	wantStatus(t, call(t, "GET", base+"/v1/sandboxes/"+id+"/diagnostics/other", nil), http.StatusNotFound)
	wantStatus(t, call(t, "GET", base+"/v1/sandboxes/nope/diagnostics/logs", nil), http.StatusNotFound)
}
