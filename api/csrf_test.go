package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/testenv"
)

// csrfSpec is a job spec split for a text/plain form: the browser sends
// name + "=" + value, which is this JSON document.
const (
	csrfName  = `{"name":"csrf-from-sandbox","image":"ubuntu:22.04","steps":[{"exec":{"command":"id"}}],"env":{"a":"`
	csrfValue = `"}}`
)

// TestWritesNeedBearer: the cookie authorizes reads only; POST and DELETE
// need the bearer header and a JSON body, and refuse a foreign Origin.
func TestWritesNeedBearer(t *testing.T) {
	e := newEnv(t, token)
	e.session("svc", "sbw", 1, true)
	e.waitProjected()
	spec := `{"name":"ok","image":"ubuntu:22.04","steps":[{"exec":{"command":"true"}}]}`
	cookie := &http.Cookie{Name: "alineo_token", Value: token}
	queued, err := e.queue.Submit(t.Context(), mustSpec(t, spec))
	if err != nil {
		t.Fatal(err)
	}
	job := queued.ID
	for _, tc := range []struct {
		name, method, path, body, ctype, origin string
		bearer, cookie                          bool
		want                                    int
	}{
		{"cookie reads", "GET", "/v1/sandboxes", "", "", "", false, true, http.StatusOK},
		{"cookie cannot submit", "POST", "/v1/jobs", spec, "application/json", "", false, true, http.StatusUnauthorized},
		{"cookie cannot delete", "DELETE", "/v1/sandboxes/svc/sbw", "", "", "", false, true, http.StatusUnauthorized},
		{"text/plain refused", "POST", "/v1/jobs", csrfName + "=" + csrfValue, "text/plain", "", true, false, http.StatusUnsupportedMediaType},
		{"form refused", "POST", "/v1/jobs", "a=b", "application/x-www-form-urlencoded", "", true, false, http.StatusUnsupportedMediaType},
		{"no content type refused", "POST", "/v1/jobs", spec, "", "", true, false, http.StatusUnsupportedMediaType},
		{"foreign origin refused", "POST", "/v1/jobs", spec, "application/json", "http://127.0.0.1:1", true, false, http.StatusForbidden},
		{"null origin refused", "DELETE", "/v1/sandboxes/svc/sbw", "", "", "null", true, false, http.StatusForbidden},
		{"own origin accepted", "POST", "/v1/jobs", spec, "application/json; charset=utf-8", e.srv.URL, true, false, http.StatusAccepted},
		{"bearer deletes", "DELETE", "/v1/sandboxes/svc/sbw", "", "", "", true, false, http.StatusNoContent},
		{"cookie cannot cancel", "POST", "/v1/jobs/" + job + "/cancel", "{}", "application/json", "", false, true, http.StatusUnauthorized},
		{"cookie cannot retry", "POST", "/v1/jobs/" + job + "/retry", "{}", "application/json", "", false, true, http.StatusUnauthorized},
		{"cancel as a form refused", "POST", "/v1/jobs/" + job + "/cancel", "a=b", "application/x-www-form-urlencoded", "", true, false, http.StatusUnsupportedMediaType},
		{"retry without a body type refused", "POST", "/v1/jobs/" + job + "/retry", "", "", "", true, false, http.StatusUnsupportedMediaType},
		{"cancel from a foreign origin refused", "POST", "/v1/jobs/" + job + "/cancel", "{}", "application/json", "http://127.0.0.1:1", true, false, http.StatusForbidden},
		{"bearer cancels", "POST", "/v1/jobs/" + job + "/cancel", "{}", "application/json", e.srv.URL, true, false, http.StatusOK},
	} {
		req, err := http.NewRequest(tc.method, e.srv.URL+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		if tc.bearer {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if tc.cookie {
			req.AddCookie(cookie)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s %s = %d, want %d", tc.name, tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
}

// TestOpenAPIWritesCheckOrigin: without a token (the demo's API) a write
// still needs a JSON body and refuses a foreign Origin.
func TestOpenAPIWritesCheckOrigin(t *testing.T) {
	e := newEnv(t, "")
	for _, tc := range []struct {
		ctype, origin string
		want          int
	}{
		{"text/plain", "", http.StatusUnsupportedMediaType},
		{"application/json", "http://127.0.0.1:1", http.StatusForbidden},
	} {
		req, _ := http.NewRequest("POST", e.srv.URL+"/v1/jobs", strings.NewReader(csrfName+"="+csrfValue))
		req.Header.Set("Content-Type", tc.ctype)
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s from %q: %d, want %d", tc.ctype, tc.origin, resp.StatusCode, tc.want)
		}
	}
}

// TestCrossSiteFormFromSandbox replays the report: a page served from
// another port of 127.0.0.1 (as sandboxd's proxy route serves a sandbox's
// page) auto-submits a text/plain form whose body is a job spec to the API,
// in the browser of a signed-in dashboard user (SameSite=Strict sends the
// cookie: every port of 127.0.0.1 is one site). It is refused and no job is
// queued.
func TestCrossSiteFormFromSandbox(t *testing.T) {
	e := newEnv(t, token)
	b := chromium(t)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form method="POST" action="%s/v1/jobs" enctype="text/plain">`+
			`<input type="hidden" name="%s" value="%s"></form><script>document.forms[0].submit()</script>`,
			e.srv.URL, html.EscapeString(csrfName), html.EscapeString(csrfValue))
	}))
	defer evil.Close()

	raw, err := b.call("", "Target.createTarget", map[string]any{"url": e.srv.URL + "/login?token=" + url.QueryEscape(token)})
	if err != nil {
		t.Fatal(err)
	}
	var target struct {
		TargetID string `json:"targetId"`
	}
	_ = json.Unmarshal(raw, &target)
	raw, err = b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	if err != nil {
		t.Fatal(err)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(raw, &att)
	s := att.SessionID
	testenv.Eventually(t, 15*time.Second, func() error { // signed in: the dashboard shows
		v, err := b.eval(s, `location.pathname + " " + document.readyState`)
		if err != nil || v != "/ complete" {
			return fmt.Errorf("page %q, %v", v, err)
		}
		return nil
	})
	if _, err := b.call(s, "Page.navigate", map[string]any{"url": evil.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	// The form lands on the API's answer: a JSON error, not a queued job.
	var body string
	testenv.Eventually(t, 15*time.Second, func() error {
		v, err := b.eval(s, `location.href + " " + document.body.innerText`)
		if err != nil || !strings.HasPrefix(v, e.srv.URL+"/v1/jobs ") {
			return fmt.Errorf("page %q, %v", v, err)
		}
		body = v
		return nil
	})
	if !strings.Contains(body, `"code":"forbidden"`) && !strings.Contains(body, `"code":"unauthorized"`) {
		t.Errorf("the form's answer = %q, want a 403 or 401 JSON error", body)
	}
	sts, err := e.queue.List(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 0 {
		t.Errorf("jobs queued by the cross-site form: %+v", sts)
	}
}

func mustSpec(t *testing.T, doc string) jobs.Spec {
	t.Helper()
	spec, err := jobs.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return spec
}
