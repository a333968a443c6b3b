package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/api"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
)

// TestExecOutputRoute: one stream of one exec, byte-exact, paged; bad input
// is a 400 naming the field, an unknown exec a 404, no token a 401.
func TestExecOutputRoute(t *testing.T) {
	e := newEnv(t, token)
	out := []byte("héllo\r\n\x00\xffend")
	e.publish("o", "sbo",
		events.New(0, "", "", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sbo"}),
		events.New(0, "", "", 4, events.ExecStarted, events.ExecStartedPayload{Seq: 4, Cmd: "x"}),
		events.New(0, "", "", 4, events.ExecOutput, events.NewOutput(4, events.Stdout, out[:3])),
		events.New(0, "", "", 4, events.ExecOutput, events.NewOutput(4, events.Stderr, []byte("err"))),
		events.New(0, "", "", 4, events.ExecOutput, events.NewOutput(4, events.Stdout, out[3:])))
	e.waitProjected()
	get := func(path, tok string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	base := "/v1/sandboxes/o/sbo/execs/4/output"
	resp, b := get(base, token)
	if resp.StatusCode != 200 || string(b) != string(out) || resp.Header.Get("X-Total-Bytes") != "13" || resp.Header.Get("X-Exec-Completed") != "false" ||
		resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("stdout = %d %q %v", resp.StatusCode, b, resp.Header)
	}
	if _, b := get(base+"?offset=2&limit=5", token); string(b) != string(out[2:7]) {
		t.Errorf("page = %q, want %q", b, out[2:7])
	}
	if _, b := get(base+"?offset=100", token); len(b) != 0 {
		t.Errorf("past the end = %q", b)
	}
	if _, b := get(base+"?stream=stderr", token); string(b) != "err" {
		t.Errorf("stderr = %q", b)
	}
	for path, want := range map[string]int{
		base + "?stream=stdin":                400,
		base + "?limit=2000000":               400,
		base + "?offset=-1":                   400,
		"/v1/sandboxes/o/sbo/execs/x/output":  400,
		"/v1/sandboxes/o/sbo/execs/5/output":  404,
		"/v1/sandboxes/o/nope/execs/4/output": 404,
	} {
		if resp, b := get(path, token); resp.StatusCode != want || !strings.Contains(string(b), `"code"`) {
			t.Errorf("GET %s = %d %s, want %d and a JSON error", path, resp.StatusCode, b, want)
		}
	}
	if resp, _ := get(base, ""); resp.StatusCode != 401 {
		t.Errorf("no token: %d", resp.StatusCode)
	}
}

// TestDashboardPagesServe: every page answers, unknown things are 404
// pages, a missing queue is a 503 page, and the pages' CSP allows no inline
// script.
func TestDashboardPagesServe(t *testing.T) {
	e := newEnv(t, "")
	e.session("web", "sbweb", 1, false)
	e.waitProjected()
	get := func(path string) (int, string, http.Header) {
		resp, err := http.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	for path, want := range map[string]int{
		"/": 200, "/?status=running&name=web": 200, "/?event=exec_complete": 200,
		"/ui/sandboxes/web/sbweb": 200, "/ui/sandboxes/web/sbweb/execs/1": 200, "/ui/runs/sbweb": 200, "/ui/jobs": 200,
		"/ui/sandboxes/web/sbweb/execs/9": 404, "/ui/sandboxes/web/sbweb/execs/x": 404, "/ui/runs/nope": 404,
		"/ui/jobs/nope": 404, "/ui/jobs/" + jobs.NewID(): 404,
		"/ui/assets/app.js": 200, "/ui/assets/app.css": 200, "/ui/assets/nope.js": 404, "/ui/assets/": 404,
	} {
		code, body, h := get(path)
		if code != want {
			t.Errorf("GET %s = %d, want %d\n%.300s", path, code, want, body)
		}
		if ct := h.Get("Content-Type"); strings.HasPrefix(ct, "text/html") && strings.Contains(h.Get("Content-Security-Policy"), "unsafe-inline") {
			t.Errorf("GET %s: CSP %q allows inline code", path, h.Get("Content-Security-Policy"))
		}
		if strings.HasPrefix(h.Get("Content-Type"), "text/html") && strings.Contains(body, "<script>") {
			t.Errorf("GET %s has an inline script", path)
		}
	}
	// The session came through the bus and the projection: chained.
	if _, body, _ := get("/ui/sandboxes/web/sbweb"); !strings.Contains(body, `data-chain="chained"`) {
		t.Errorf("sandbox page lacks the chain state chained:\n%s", body)
	}
	if _, body, _ := get("/ui/sandboxes/web/sbweb/execs/1"); !strings.Contains(body, "echo 1") || !strings.Contains(body, `id="stdout"`) {
		t.Errorf("exec page lacks the command or stdout:\n%s", body)
	}
	srv, err := api.New(api.Config{Store: e.store})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/ui/jobs", "/ui/jobs/" + jobs.NewID()} {
		rec := newRecorder()
		srv.ServeHTTP(rec, mustRequest(t, path))
		if rec.Code != 503 || !strings.Contains(rec.Body.String(), "No jobs queue") {
			t.Errorf("GET %s without a queue = %d", path, rec.Code)
		}
	}
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

func mustRequest(t *testing.T, path string) *http.Request {
	t.Helper()
	return httptest.NewRequest("GET", path, nil)
}

// behindStore answers GetSandboxDetails as a read model did before its
// projector committed a session's last entries: a running sandbox of no
// completed exec.
type behindStore struct{ api.Store }

func (s behindStore) GetSandboxDetails(ctx context.Context, name, id string) (*adapters.SandboxDetails, error) {
	d, err := s.Store.GetSandboxDetails(ctx, name, id)
	if d != nil {
		d.Status, d.CompletedAt, d.ExecCount = adapters.StatusRunning, 0, 0
	}
	return d, err
}

// TestSandboxPageFiguresFromItsEntries: the sandbox page's header counts
// what its entries hold, the entries its live stream resumes after, even
// when the summary read just before them is behind: an exec or a close
// the summary missed would otherwise be counted in neither.
func TestSandboxPageFiguresFromItsEntries(t *testing.T) {
	st := memory.New()
	ctx := context.Background()
	for i, e := range []events.Entry{
		events.New(1000, "n", "S", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "S"}),
		events.New(1001, "n", "S", 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Kind: events.KindCommand, Cmd: "true"}),
		events.New(1002, "n", "S", 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1}),
		events.New(1003, "n", "S", events.SandboxLevel, events.SandboxClosed, nil),
	} {
		e.Seq = uint64(i + 1)
		if err := st.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := api.New(api.Config{Store: behindStore{st}})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	srv.ServeHTTP(rec, mustRequest(t, "/ui/sandboxes/n/S"))
	body := rec.Body.String()
	for _, want := range []string{`<dd id="sandbox-execs">1</dd>`, `data-status="completed"`, `lastEventId=4`} {
		if !strings.Contains(body, want) {
			t.Errorf("sandbox page lacks %s:\n%s", want, body)
		}
	}
}
