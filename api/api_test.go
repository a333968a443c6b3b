package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/api"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
)

func TestAuth(t *testing.T) {
	e := newEnv(t, token)
	tests := []struct {
		name, path, tok string
		cookie          string
		want            int
	}{
		{"no token", "/v1/sandboxes", "", "", http.StatusUnauthorized},
		{"wrong token", "/v1/sandboxes", "nope", "", http.StatusUnauthorized},
		{"bearer", "/v1/sandboxes", token, "", http.StatusOK},
		{"cookie", "/v1/sandboxes", "", token, http.StatusOK},
		{"wrong cookie", "/v1/sandboxes", "", "x", http.StatusUnauthorized},
		{"jobs without token", "/v1/jobs/0123456789abcdef0123456789abcdef", "", "", http.StatusUnauthorized},
		{"stream without token", "/v1/events/stream", "", "", http.StatusUnauthorized},
		{"unknown route without token", "/v1/nope", "", "", http.StatusUnauthorized},
		{"healthz is open", "/healthz", "", "", http.StatusOK},
		{"metrics are open", "/metrics", "", "", http.StatusOK},
		{"openapi is open", "/v1/openapi.json", "", "", http.StatusOK},
		{"dashboard needs the token", "/", "", "", http.StatusUnauthorized},
		{"dashboard with cookie", "/", "", token, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.srv.URL+tt.path, nil)
			if tt.tok != "" {
				req.Header.Set("Authorization", "Bearer "+tt.tok)
			}
			if tt.cookie != "" {
				req.AddCookie(&http.Cookie{Name: api.TokenCookie, Value: tt.cookie})
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got := resp.StatusCode; got != tt.want {
				t.Fatalf("status = %d, want %d (%s)", got, tt.want, body)
			}
			if tt.want == http.StatusUnauthorized && strings.HasPrefix(tt.path, "/v1/") {
				var ae api.Error
				if err := json.Unmarshal(body, &ae); err != nil || ae.Code != api.CodeUnauthorized || ae.Message == "" {
					t.Errorf("body = %s, want a JSON error with code unauthorized", body)
				}
			}
		})
	}
}

func TestLoginSetsCookie(t *testing.T) {
	e := newEnv(t, token)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(e.srv.URL + "/login?token=wrong")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.StatusCode, http.StatusUnauthorized; got != want {
		t.Errorf("wrong token: status = %d, want %d", got, want)
	}
	resp, err = noRedirect.Get(e.srv.URL + "/login?token=" + url.QueryEscape(token))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.StatusCode, http.StatusSeeOther; got != want {
		t.Fatalf("status = %d, want %d", got, want)
	}
	var c *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == api.TokenCookie {
			c = k
		}
	}
	if c == nil || c.Value != token || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie = %+v, want an HttpOnly SameSite=Strict %s cookie with the token", c, api.TokenCookie)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, token)
	e.session("svc", "sb1", 1, false)
	e.waitProjected()
	tests := []struct {
		method, path, body string
		code, field        string
	}{
		{"GET", "/v1/sandboxes?status=paused", "", api.CodeBadRequest, "status"},
		{"GET", "/v1/sandboxes?limit=0", "", api.CodeBadRequest, "limit"},
		{"GET", "/v1/sandboxes?limit=abc", "", api.CodeBadRequest, "limit"},
		{"GET", "/v1/sandboxes?limit=5000", "", api.CodeBadRequest, "limit"},
		{"GET", "/v1/sandboxes?before=-1", "", api.CodeBadRequest, "before"},
		{"GET", "/v1/sandboxes/svc/sb1/events?after=x", "", api.CodeBadRequest, "after"},
		{"GET", "/v1/sandboxes/svc/sb1/events?limit=-2", "", api.CodeBadRequest, "limit"},
		{"GET", "/v1/jobs/not-an-id", "", api.CodeBadRequest, "id"},
		{"POST", "/v1/jobs", `{`, api.CodeInvalidSpec, ""},
		{"POST", "/v1/jobs", `{"name":"n","image":"i","steps":[{"exec":{"comand":"x"}}]}`, api.CodeInvalidSpec, "steps[0].exec.comand"},
		{"POST", "/v1/jobs", `{"name":"n","image":"i","steps":[]}`, api.CodeInvalidSpec, "steps"},
		{"GET", "/v1/events/stream?event=exec.bogus", "", api.CodeBadRequest, "event"},
		{"GET", "/v1/events/stream?sandbox=a.b", "", api.CodeBadRequest, "sandbox"},
		{"GET", "/v1/events/stream?from=0", "", api.CodeBadRequest, "from"},
		{"GET", "/v1/events/stream?lastEventId=x", "", api.CodeBadRequest, "lastEventId"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			var ae api.Error
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			resp := e.do(tt.method, tt.path, token, body, &ae)
			if got, want := resp.StatusCode, http.StatusBadRequest; got != want {
				t.Fatalf("status = %d, want %d (%+v)", got, want, ae)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			if ae.Code != tt.code || ae.Field != tt.field || ae.Message == "" {
				t.Errorf("error = %+v, want code %q field %q and a message", ae, tt.code, tt.field)
			}
		})
	}
}

func TestNotFound(t *testing.T) {
	e := newEnv(t, token)
	e.session("svc", "sb1", 1, false)
	e.waitProjected()
	for _, tt := range []struct{ method, path string }{
		{"GET", "/v1/sandboxes/svc/unknown"},
		{"GET", "/v1/sandboxes/other/sb1"},
		{"DELETE", "/v1/sandboxes/svc/unknown"},
		{"GET", "/v1/sandboxes/svc/unknown/events"},
		{"GET", "/v1/sandboxes/svc/unknown/checkpoints"},
		{"GET", "/v1/jobs/0123456789abcdef0123456789abcdef"},
		{"GET", "/v1/no-such-route"},
	} {
		var ae api.Error
		resp := e.do(tt.method, tt.path, token, nil, &ae)
		if resp.StatusCode != http.StatusNotFound || ae.Code != api.CodeNotFound || ae.Message == "" {
			t.Errorf("%s %s = %d %+v, want 404 with code not_found", tt.method, tt.path, resp.StatusCode, ae)
		}
	}
}

func TestSandboxRoutes(t *testing.T) {
	e := newEnv(t, token)
	e.session("build", "sb1", 3, true)
	e.session("build", "sb2", 1, false)
	e.session("test", "sb3", 2, false)
	e.waitProjected()

	var list api.SandboxList
	if resp := e.do("GET", "/v1/sandboxes", token, nil, &list); resp.StatusCode != 200 {
		t.Fatalf("list: %d", resp.StatusCode)
	}
	ids := func(l api.SandboxList) []string {
		var s []string
		for _, d := range l.Sandboxes {
			s = append(s, d.SandboxID)
		}
		return s
	}
	if got, want := ids(list), []string{"sb3", "sb2", "sb1"}; !slices.Equal(got, want) {
		t.Errorf("list = %v, want %v (newest first)", got, want)
	}
	list = api.SandboxList{}
	e.do("GET", "/v1/sandboxes?status=running", token, nil, &list)
	if got, want := ids(list), []string{"sb3", "sb2"}; !slices.Equal(got, want) {
		t.Errorf("running = %v, want %v", got, want)
	}
	list = api.SandboxList{}
	e.do("GET", "/v1/sandboxes?name=build", token, nil, &list)
	if got, want := ids(list), []string{"sb2", "sb1"}; !slices.Equal(got, want) {
		t.Errorf("name=build = %v, want %v", got, want)
	}
	list = api.SandboxList{}
	e.do("GET", "/v1/sandboxes?sandboxId=sb2", token, nil, &list)
	if got, want := ids(list), []string{"sb2"}; !slices.Equal(got, want) {
		t.Errorf("sandboxId=sb2 = %v, want %v", got, want)
	}
	// Paging with limit and before.
	var page1, page2 api.SandboxList
	e.do("GET", "/v1/sandboxes?limit=2", token, nil, &page1)
	if got, want := ids(page1), []string{"sb3", "sb2"}; !slices.Equal(got, want) || page1.NextBefore == 0 {
		t.Fatalf("page 1 = %v next %d, want %v and a next page", got, page1.NextBefore, want)
	}
	e.do("GET", "/v1/sandboxes?limit=2&before="+strconv.FormatInt(page1.NextBefore, 10), token, nil, &page2)
	if got, want := ids(page2), []string{"sb1"}; !slices.Equal(got, want) || page2.NextBefore != 0 {
		t.Errorf("page 2 = %v next %d, want %v and no next page", got, page2.NextBefore, want)
	}

	var d adapters.SandboxDetails
	e.do("GET", "/v1/sandboxes/build/sb1", token, nil, &d)
	if d.SandboxID != "sb1" || d.Status != adapters.StatusCompleted || d.ExecCount != 3 {
		t.Errorf("details = %+v, want sb1 completed with 3 execs", d)
	}

	// Events, paged by sequence: 1 created + 3*3 exec events + closed = 11.
	var all []events.Entry
	after := uint64(0)
	for pages := 0; ; pages++ {
		var p api.EventPage
		if resp := e.do("GET", fmt.Sprintf("/v1/sandboxes/build/sb1/events?limit=4&after=%d", after), token, nil, &p); resp.StatusCode != 200 {
			t.Fatalf("events: %d", resp.StatusCode)
		}
		all = append(all, p.Events...)
		if p.NextAfter == 0 {
			break
		}
		if pages > 5 {
			t.Fatal("too many pages")
		}
		after = p.NextAfter
	}
	if got, want := len(all), 11; got != want {
		t.Fatalf("events = %d, want %d", got, want)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq <= all[i-1].Seq {
			t.Fatalf("events not in sequence order at %d: %d after %d", i, all[i].Seq, all[i-1].Seq)
		}
	}

	var cps struct {
		Checkpoints []adapters.CheckpointInfo `json:"checkpoints"`
	}
	if resp := e.do("GET", "/v1/sandboxes/build/sb1/checkpoints", token, nil, &cps); resp.StatusCode != 200 || cps.Checkpoints == nil {
		t.Errorf("checkpoints: %d %+v, want 200 and an empty list", resp.StatusCode, cps)
	}
	var envs struct {
		Environments []adapters.EnvironmentRecord `json:"environments"`
	}
	if resp := e.do("GET", "/v1/environments", token, nil, &envs); resp.StatusCode != 200 || envs.Environments == nil {
		t.Errorf("environments: %d %+v", resp.StatusCode, envs)
	}

	if resp := e.do("DELETE", "/v1/sandboxes/build/sb1", token, nil, nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d, want 204", resp.StatusCode)
	}
	if resp := e.do("GET", "/v1/sandboxes/build/sb1", token, nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("after delete: %d, want 404", resp.StatusCode)
	}
}

func TestJobsRoutes(t *testing.T) {
	e := newEnv(t, token)
	spec, err := os.ReadFile("../examples/hello.json")
	if err != nil {
		t.Fatal(err)
	}
	var st jobs.Status
	resp := e.do("POST", "/v1/jobs", token, strings.NewReader(string(spec)), &st)
	if got, want := resp.StatusCode, http.StatusAccepted; got != want {
		t.Fatalf("submit: %d, want %d", got, want)
	}
	if !jobs.ValidID(st.ID) || st.State != jobs.StateQueued || st.Name != "hello" || st.Steps != 3 {
		t.Fatalf("status = %+v", st)
	}
	if got, want := resp.Header.Get("Location"), "/v1/jobs/"+st.ID; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	var got jobs.Status
	if resp := e.do("GET", "/v1/jobs/"+st.ID, token, nil, &got); resp.StatusCode != 200 || got.ID != st.ID || got.State != jobs.StateQueued {
		t.Errorf("get: %d %+v", resp.StatusCode, got)
	}
	n, err := e.queue.Pending(t.Context())
	if err != nil || n != 1 {
		t.Errorf("pending jobs = %d, %v; want 1", n, err)
	}
}

func TestOpenAPICoversRoutes(t *testing.T) {
	e := newEnv(t, "")
	var doc struct {
		OpenAPI    string                                `json:"openapi"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if resp := e.do("GET", "/v1/openapi.json", "", nil, &doc); resp.StatusCode != 200 {
		t.Fatalf("openapi: %d", resp.StatusCode)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi = %q, want 3.x", doc.OpenAPI)
	}
	for _, r := range []struct{ path, method string }{
		{"/healthz", "get"}, {"/metrics", "get"}, {"/v1/openapi.json", "get"},
		{"/v1/sandboxes", "get"}, {"/v1/sandboxes/{name}/{id}", "get"}, {"/v1/sandboxes/{name}/{id}", "delete"},
		{"/v1/sandboxes/{name}/{id}/events", "get"}, {"/v1/sandboxes/{name}/{id}/checkpoints", "get"},
		{"/v1/sandboxes/{name}/{id}/execs/{step}/output", "get"},
		{"/v1/environments", "get"}, {"/v1/jobs", "post"}, {"/v1/jobs/{jobId}", "get"}, {"/v1/events/stream", "get"},
		{"/v1/jobs/{jobId}/cancel", "post"}, {"/v1/jobs/{jobId}/retry", "post"}, {"/v1/executors", "get"},
	} {
		if _, ok := doc.Paths[r.path][r.method]; !ok {
			t.Errorf("openapi lacks %s %s", strings.ToUpper(r.method), r.path)
		}
	}
	// Every /v1 route but the document answers 401; those a read user may
	// not use (writes, the executors) 403.
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			if !strings.HasPrefix(path, "/v1/") || path == "/v1/openapi.json" || method == "parameters" {
				continue
			}
			var op struct {
				Responses map[string]any `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("openapi: %s %s: %v", method, path, err)
			}
			if _, ok := op.Responses["401"]; !ok {
				t.Errorf("openapi: %s %s lacks 401", method, path)
			}
			_, has403 := op.Responses["403"]
			if want := method != "get" || path == "/v1/executors"; has403 != want {
				t.Errorf("openapi: %s %s documents 403: %v, want %v", method, path, has403, want)
			}
		}
	}
	for schema, props := range map[string][]string{"Entry": {"actor"}, "JobStatus": {"submitter", "canceledBy", "retriedBy"}} {
		for _, p := range props {
			if _, ok := doc.Components.Schemas[schema].Properties[p]; !ok {
				t.Errorf("openapi: schema %s lacks %s", schema, p)
			}
		}
	}
}

func TestDashboardPages(t *testing.T) {
	e := newEnv(t, "")
	e.session("web", "sbweb", 2, false)
	ran := []events.Entry{
		events.New(0, "", "", 3, events.ExecStarted, events.ExecStartedPayload{Kind: events.KindCommand, Cmd: "echo 3"}),
		events.New(0, "", "", 3, events.ExecCompleted, events.ExecCompletedPayload{Seq: 3}),
	}
	ran[0].Actor, ran[1].Actor = "dana <dev>@laptop", "dana <dev>@laptop"
	e.publish("web", "sbweb", ran...)
	e.waitProjected()
	get := func(path string) (int, string) {
		resp, err := http.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/")
	if code != 200 || !strings.Contains(body, `data-id="sbweb"`) || !strings.Contains(body, `src="/ui/assets/app.js"`) {
		t.Fatalf("list page: %d\n%s", code, body)
	}
	code, body = get("/ui/sandboxes/web/sbweb")
	if code != 200 {
		t.Fatalf("sandbox page: %d\n%s", code, body)
	}
	if got, want := len(regexp.MustCompile(`<tr class="event"`).FindAllString(body, -1)), 9; got != want {
		t.Errorf("timeline rows = %d, want %d", got, want)
	}
	// Who ran the exec: on its card and on each of its raw rows, escaped.
	if !strings.Contains(body, `<span class="actor" title="who ran it">dana &lt;dev&gt;@laptop</span>`) {
		t.Errorf("the exec card does not name its actor")
	}
	if got := strings.Count(body, `<td class="actor">dana &lt;dev&gt;@laptop</td>`); got != 2 {
		t.Errorf("raw rows naming the actor = %d, want 2", got)
	}
	if !strings.Contains(body, "echo 2") {
		t.Errorf("timeline lacks the command summary")
	}
	if code, _ := get("/ui/sandboxes/web/nope"); code != http.StatusNotFound {
		t.Errorf("unknown sandbox page: %d, want 404", code)
	}
}

// TestSSEResume: an auditor that drops and reconnects with Last-Event-ID
// gets every matching event exactly once, in order.
func TestSSEResume(t *testing.T) {
	e := newEnv(t, token)
	// Another sandbox's events interleave; the filter must skip them.
	s1 := e.openStream("/v1/events/stream?sandbox=audited", "")
	var got []uint64
	actors := map[uint64]string{}
	read := func(s *sseStream, n int) string {
		var last string
		for range n {
			ev := s.next(t, 5*time.Second)
			var en events.Entry
			if err := json.Unmarshal([]byte(ev.Data), &en); err != nil {
				t.Fatalf("data %q: %v", ev.Data, err)
			}
			if en.SandboxID != "audited" {
				t.Fatalf("event of %s leaked through the filter", en.SandboxID)
			}
			if strconv.FormatUint(en.Seq, 10) != ev.ID {
				t.Fatalf("id %s != entry seq %d", ev.ID, en.Seq)
			}
			got = append(got, en.Seq)
			actors[en.Seq] = en.Actor
			last = ev.ID
		}
		return last
	}
	e.session("audited", "audited", 2, false) // 7 events
	e.session("noise", "noise", 1, false)
	last := read(s1, 5)
	s1.close()
	// While disconnected: more of both.
	e.session("noise", "noise2", 2, false)
	late := []events.Entry{
		events.New(0, "", "", 3, events.ExecStarted, events.ExecStartedPayload{Kind: events.KindCommand, Cmd: "late"}),
		events.New(0, "", "", 3, events.ExecCompleted, events.ExecCompletedPayload{}),
		events.New(0, "", "", events.SandboxLevel, events.SandboxClosed, nil),
	}
	late[0].Actor, late[1].Actor = "carol via executor-2", "carol via executor-2" // the feed carries who did it
	e.publish("audited", "audited", late...)
	s2 := e.openStream("/v1/events/stream?sandbox=audited", last)
	defer s2.close()
	read(s2, 5) // the 2 missed from the first batch, and the 3 published while away
	select {
	case ev := <-s2.ch:
		t.Fatalf("unexpected extra event %+v", ev)
	case <-time.After(300 * time.Millisecond):
	}
	// The expected sequences: every entry of "audited", in stream order.
	want, err := e.ledger.ReadAll(t.Context(), "audited", "audited")
	if err != nil {
		t.Fatal(err)
	}
	var wantSeqs []uint64
	for _, en := range want {
		wantSeqs = append(wantSeqs, en.Seq)
		if actors[en.Seq] != en.Actor {
			t.Errorf("entry %d: the feed's actor %q, want %q", en.Seq, actors[en.Seq], en.Actor)
		}
	}
	if actors[want[len(want)-2].Seq] != "carol via executor-2" {
		t.Errorf("the late exec.completed reached the feed without its actor")
	}
	if !slices.Equal(got, wantSeqs) {
		t.Fatalf("received %v, want %v (no gap, no repeat)", got, wantSeqs)
	}
}
