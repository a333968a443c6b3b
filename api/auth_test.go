package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/api"
	"github.com/alineo-labs/alineo/api/apitest"
	"github.com/alineo-labs/alineo/jobs"
)

func TestHashToken(t *testing.T) {
	// printf %s s3cret | sha256sum
	if got, want := api.HashToken("s3cret"), "sha256:1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0"; got != want {
		t.Fatalf("HashToken = %s, want %s", got, want)
	}
}

func TestParseTokens(t *testing.T) {
	h1, h2 := api.HashToken("t1"), api.HashToken("t2")
	tests := []struct {
		name string
		file string
		want []api.User // nil with line > 0: an error on that line
		line int
	}{
		{"empty", "", nil, 0},
		{"comments and blanks", "# name role hash\n\n   \n", nil, 0},
		{"two users", "alice write " + h1 + "\n\tbob\tread\t" + h2 + "  \n", []api.User{{Name: "alice", Role: api.RoleWrite}, {Name: "bob", Role: api.RoleRead}}, 0},
		{"admin, CRLF, upper hex", "root admin " + strings.ToUpper(h1[7:]) + "\r\n", nil, 1},
		{"admin, CRLF", "root admin sha256:" + strings.ToUpper(h1[7:]) + "\r\n", []api.User{{Name: "root", Role: api.RoleAdmin}}, 0},
		{"unicode name", "zoë read " + h1, []api.User{{Name: "zoë", Role: api.RoleRead}}, 0},
		{"two fields", "alice write", nil, 1},
		{"four fields", "alice write " + h1 + " extra", nil, 1},
		{"unknown role", "# c\nalice owner " + h1, nil, 2},
		{"plain token", "alice read t1", nil, 1},
		{"short hash", "alice read sha256:abcd", nil, 1},
		{"not hex", "alice read sha256:" + strings.Repeat("zz", 32), nil, 1},
		{"md5", "alice read md5:" + strings.Repeat("00", 16), nil, 1},
		{"duplicate name", "alice read " + h1 + "\nalice write " + h2, nil, 2},
		{"duplicate token", "alice read " + h1 + "\nbob write " + h1, nil, 2},
		{"name too long", strings.Repeat("a", 257) + " read " + h1, nil, 1},
		{"name not utf-8", "al\xffice read " + h1, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, err := api.ParseTokens(strings.NewReader(tt.file))
			if tt.line > 0 {
				var fe *api.TokenFileError
				if !errors.As(err, &fe) || !errors.Is(err, api.ErrInvalidTokens) {
					t.Fatalf("ParseTokens = %v, %v; want a *TokenFileError", ts, err)
				}
				if fe.Line != tt.line {
					t.Fatalf("error on line %d (%v), want line %d", fe.Line, err, tt.line)
				}
				for _, h := range []string{h1[7:], h2[7:], strings.ToUpper(h1[7:])} {
					if strings.Contains(err.Error(), h) {
						t.Fatalf("error %q quotes a hash", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTokens: %v", err)
			}
			var got []api.User
			for _, tk := range ts {
				got = append(got, tk.User)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("users = %v, want %v", got, tt.want)
			}
		})
	}
	ts, err := api.ParseTokens(strings.NewReader("alice write " + h1 + "\nbob read " + h2))
	if err != nil {
		t.Fatal(err)
	}
	u := api.NewUsers(ts)
	for tok, want := range map[string]string{"t1": "alice", "t2": "bob", "t3": "", "": "", h1: ""} {
		got, ok := u.Lookup(tok)
		if got.Name != want || ok != (want != "") {
			t.Errorf("Lookup(%q) = %v, %v; want %q", tok, got, ok, want)
		}
	}
}

// FuzzParseTokens: ParseTokens never panics; what it accepts are valid users
// with unique names and hashes, which the same lines parse back to; what it
// refuses is a *TokenFileError on an existing line.
func FuzzParseTokens(f *testing.F) {
	f.Add("alice write " + api.HashToken("a") + "\n# c\nbob read " + api.HashToken("b"))
	f.Add("x admin sha256:" + strings.Repeat("0", 64))
	f.Add("x admin sha256:" + strings.Repeat("0", 63) + "\n")
	f.Add("\xff read sha256:\n\r\n")
	f.Fuzz(func(t *testing.T, file string) {
		ts, err := api.ParseTokens(strings.NewReader(file))
		if err != nil {
			var fe *api.TokenFileError
			if !errors.As(err, &fe) || !errors.Is(err, api.ErrInvalidTokens) {
				t.Fatalf("error %v is not a *TokenFileError", err)
			}
			if fe.Line < 1 || fe.Line > strings.Count(file, "\n")+1 {
				t.Fatalf("error on line %d of a %d-line file", fe.Line, strings.Count(file, "\n")+1)
			}
			return
		}
		names := map[string]bool{}
		var again strings.Builder
		for _, tk := range ts {
			if tk.Name == "" || names[tk.Name] || tk.Role < api.RoleRead || tk.Role > api.RoleAdmin {
				t.Fatalf("accepted %+v", tk.User)
			}
			names[tk.Name] = true
			fmt.Fprintf(&again, "%s %s sha256:%x\n", tk.Name, tk.Role, tk.Hash)
		}
		back, err := api.ParseTokens(strings.NewReader(again.String()))
		if err != nil || len(back) != len(ts) {
			t.Fatalf("re-parse of %q = %v, %v", again.String(), back, err)
		}
		for i := range back {
			if back[i] != ts[i] {
				t.Fatalf("re-parse: %+v, want %+v", back[i], ts[i])
			}
		}
	})
}

// The tokens of the role tests: three users and the single --token, an admin.
const (
	readTok  = "read-token-Zq1"
	writeTok = "write-token-Xw2"
	adminTok = "admin-token-Vb3"
)

func usersFor(t *testing.T) *api.Users {
	t.Helper()
	ts, err := api.ParseTokens(strings.NewReader(fmt.Sprintf("reader read %s\nwriter write %s\nboss admin %s\n",
		api.HashToken(readTok), api.HashToken(writeTok), api.HashToken(adminTok))))
	if err != nil {
		t.Fatal(err)
	}
	return api.NewUsers(ts)
}

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// status sends method path with the bearer tok ("" for none) or, with
// cookie, the dashboard cookie; it returns the status once the headers
// arrive (an SSE stream is not read to its end).
func status(t *testing.T, base, method, path, tok string, cookie bool, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if rd != nil {
		req, err = http.NewRequestWithContext(ctx, method, base+path, rd)
		req.Header.Set("Content-Type", "application/json")
	}
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case tok != "" && cookie:
		req.AddCookie(&http.Cookie{Name: api.TokenCookie, Value: tok})
	case tok != "":
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp.StatusCode, ""
	}
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// TestRolesPerRoute: every route answers a missing or wrong token 401, a
// known user below the route's role 403, and serves the others; writes
// record the user; nothing logs a token.
func TestRolesPerRoute(t *testing.T) {
	var logs syncBuffer
	users0 := usersFor(t)
	e := apitest.NewWith(t, token, func(c *api.Config) {
		c.Users = users0
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	e.Session("job", "sbx-roles", 1, true)
	e.Session("job", "sbx-doomed", 1, true)
	e.WaitProjected()
	st, err := e.Queue.Submit(context.Background(), jobs.Spec{Name: "queued", Image: "host", Steps: []jobs.Step{{Exec: &jobs.ExecStep{Command: "true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	spec := `{"name":"roles","image":"host","steps":[{"exec":{"command":"true"}}]}`
	const (
		read = iota
		write
		admin
	)
	routes := []struct {
		method, path, body string
		role               int
		ok                 int // the answer of a user allowed
	}{
		{"GET", "/v1/sandboxes", "", read, 200},
		{"GET", "/v1/sandboxes/job/sbx-roles", "", read, 200},
		{"GET", "/v1/sandboxes/job/sbx-roles/events", "", read, 200},
		{"GET", "/v1/sandboxes/job/sbx-roles/checkpoints", "", read, 200},
		{"GET", "/v1/environments", "", read, 200},
		{"GET", "/v1/jobs", "", read, 200},
		{"GET", "/v1/jobs/" + st.ID, "", read, 200},
		{"GET", "/v1/events/stream", "", read, 200},
		{"GET", "/v1/nope", "", read, 404},
		{"POST", "/v1/jobs", spec, write, 202},
		{"POST", "/v1/jobs/" + jobs.NewID() + "/cancel", "{}", write, 404},
		{"POST", "/v1/jobs/" + jobs.NewID() + "/retry", "{}", write, 404},
		{"DELETE", "/v1/sandboxes/job/sbx-none", "", write, 404},
		{"GET", "/v1/executors", "", admin, 200},
	}
	users := []struct {
		name, tok string
		role      int // -1: unknown
	}{
		{"none", "", -1}, {"wrong", "wrong-token-Qq9", -1}, {"hash as token", api.HashToken(readTok), -1},
		{"reader", readTok, read}, {"writer", writeTok, write}, {"boss", adminTok, admin}, {"--token", token, admin},
	}
	for _, rt := range routes {
		for _, u := range users {
			want := rt.ok
			switch {
			case u.role < 0:
				want = http.StatusUnauthorized
			case u.role < rt.role:
				want = http.StatusForbidden
			}
			got, body := status(t, e.URL, rt.method, rt.path, u.tok, false, rt.body)
			if got != want {
				t.Errorf("%s %s as %s = %d %s, want %d", rt.method, rt.path, u.name, got, body, want)
			}
		}
	}
	// The cookie authorizes reads only, whatever the role (CSRF).
	if got, _ := status(t, e.URL, "POST", "/v1/jobs", adminTok, true, spec); got != http.StatusUnauthorized {
		t.Errorf("POST /v1/jobs with the admin's cookie = %d, want 401", got)
	}
	if got, _ := status(t, e.URL, "GET", "/v1/jobs", readTok, true, ""); got != http.StatusOK {
		t.Errorf("GET /v1/jobs with the reader's cookie = %d, want 200", got)
	}

	// A job records who submitted it, a cancel who asked.
	var mine jobs.Status
	if code := statusJSON(t, e.URL, "POST", "/v1/jobs", writeTok, spec, &mine); code != 202 || mine.Submitter != "writer" {
		t.Fatalf("submit as writer: %d %+v, want submitter writer", code, mine)
	}
	var canceled jobs.Status
	if code := statusJSON(t, e.URL, "POST", "/v1/jobs/"+mine.ID+"/cancel", adminTok, "{}", &canceled); code != 200 || canceled.CanceledBy != "boss" {
		t.Fatalf("cancel as boss: %d %+v, want canceled by boss", code, canceled)
	}
	var retried jobs.Status
	if code := statusJSON(t, e.URL, "POST", "/v1/jobs/"+mine.ID+"/retry", readTok, "{}", &retried); code != http.StatusForbidden {
		t.Fatalf("retry as reader: %d, want 403", code)
	}
	if code := statusJSON(t, e.URL, "POST", "/v1/jobs/"+mine.ID+"/retry", writeTok, "{}", &retried); code != 202 || retried.Submitter != "writer" {
		t.Fatalf("retry as writer: %d %+v, want submitter writer", code, retried)
	}
	if code, page := status(t, e.URL, "GET", "/ui/jobs/"+mine.ID, readTok, true, ""); code != 200 || !strings.Contains(page, `id="job-submitter">writer<`) {
		t.Errorf("job page = %d, want it to name the submitter writer", code)
	}
	if code, page := status(t, e.URL, "GET", "/ui/jobs", readTok, true, ""); code != 200 || !strings.Contains(page, `<td class="submitter">writer</td>`) {
		t.Errorf("jobs page = %d, want a row naming the submitter writer", code)
	}
	// A delete is logged with who did it: the session's entries are gone.
	if code, body := status(t, e.URL, "DELETE", "/v1/sandboxes/job/sbx-doomed", writeTok, false, ""); code != http.StatusNoContent {
		t.Fatalf("delete as writer = %d %s, want 204", code, body)
	}
	if got, _ := e.Queue.Status(context.Background(), mine.ID); got.RetriedBy != "writer" {
		t.Fatalf("retried job: RetriedBy = %q, want writer", got.RetriedBy)
	}

	// The dashboard: any token signs in, the page names the user, the
	// executors page is an admin's, the write controls a writer's.
	for _, u := range users[3:] {
		code, _ := status(t, e.URL, "GET", "/login?token="+url.QueryEscape(u.tok), "", false, "")
		if code != http.StatusSeeOther {
			t.Errorf("login as %s = %d, want 303", u.name, code)
		}
	}
	if code, _ := status(t, e.URL, "GET", "/login?token=wrong-token-Qq9", "", false, ""); code != http.StatusUnauthorized {
		t.Errorf("login with a wrong token = %d, want 401", code)
	}
	code, page := status(t, e.URL, "GET", "/ui/jobs/"+st.ID, readTok, true, "")
	if code != 200 || !strings.Contains(page, `id="signed-in"`) || !strings.Contains(page, "reader") {
		t.Fatalf("job page as reader = %d, want 200 naming reader:\n%s", code, page)
	}
	if !strings.Contains(page, `id="job-actions" hidden`) || strings.Contains(page, `href="/ui/executors"`) {
		t.Errorf("job page as reader shows the write controls or the executors link")
	}
	if code, page := status(t, e.URL, "GET", "/ui/jobs/"+st.ID, writeTok, true, ""); code != 200 || strings.Contains(page, `id="job-actions" hidden`) {
		t.Errorf("job page as writer = %d, want the write controls shown", code)
	}
	if code, page := status(t, e.URL, "GET", "/ui/jobs", readTok, true, ""); code != 200 || strings.Contains(page, `id="submit-form"`) {
		t.Errorf("jobs page as reader = %d, want no submit form", code)
	}
	if code, _ := status(t, e.URL, "GET", "/ui/executors", readTok, true, ""); code != http.StatusForbidden {
		t.Errorf("executors page as reader = %d, want 403", code)
	}
	if code, _ := status(t, e.URL, "GET", "/ui/executors", adminTok, true, ""); code != 200 {
		t.Errorf("executors page as boss = %d, want 200", code)
	}
	if code, _ := status(t, e.URL, "GET", "/", "wrong-token-Qq9", true, ""); code != http.StatusUnauthorized {
		t.Errorf("dashboard with a wrong cookie = %d, want 401", code)
	}

	// A reload: a new token is accepted, a removed one refused.
	ts, err := api.ParseTokens(strings.NewReader("newcomer read " + api.HashToken("new-token-Pp4")))
	if err != nil {
		t.Fatal(err)
	}
	users0.Replace(ts)
	if got, _ := status(t, e.URL, "GET", "/v1/jobs", "new-token-Pp4", false, ""); got != 200 {
		t.Errorf("new token after Replace = %d, want 200", got)
	}
	if got, _ := status(t, e.URL, "GET", "/v1/jobs", readTok, false, ""); got != http.StatusUnauthorized {
		t.Errorf("removed token after Replace = %d, want 401", got)
	}

	out := logs.String()
	for _, tok := range []string{readTok, writeTok, adminTok, token, "wrong-token-Qq9", "new-token-Pp4"} {
		if strings.Contains(out, tok) {
			t.Errorf("the log holds the token %q:\n%s", tok, out)
		}
	}
	if !strings.Contains(out, "sandbox=sbx-doomed by=writer") {
		t.Errorf("the log does not record who deleted sbx-doomed:\n%s", out)
	}
}

// statusJSON is status decoding a JSON answer into v.
func statusJSON(t *testing.T, base, method, path, tok, body string, v any) int {
	t.Helper()
	code, data := status(t, base, method, path, tok, false, body)
	if err := json.Unmarshal([]byte(data), v); err != nil {
		t.Fatalf("%s %s: decode %q: %v", method, path, data, err)
	}
	return code
}
