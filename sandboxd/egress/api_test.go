package egress_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd/egress"
)

func vaultBody(t testing.TB, value string) string {
	return mustJSON(t, map[string]any{
		"credentials": []any{cred("gh", value)},
		"bindings": []any{map[string]any{
			"name":  "github",
			"match": map[string]any{"hosts": []string{"api.example.com"}},
			"auth":  map[string]any{"type": "bearer", "credential": "gh"},
		}},
	})
}

func TestAPIStatusCodes(t *testing.T) {
	const secret = "ghp_SECRETVALUE_never_returned"
	e := startProxy(t, egress.Config{Token: testToken, CredentialProxy: true, MaxRules: 3, MaxBodyBytes: 4 << 10,
		Policy: &egress.Policy{Egress: []egress.Rule{{Action: egress.Allow, Target: "*.example.com"}}}})
	steps := []struct {
		name, method, path, body string
		want                     int
		contains                 string
	}{
		{"health", "GET", "/healthz", "", 200, "ok"},
		{"get policy", "GET", "/policy", "", 200, `"policy":{"defaultAction":"deny","egress":[{"action":"allow","target":"*.example.com"}]}`},
		{"patch empty", "PATCH", "/policy", `[]`, 400, "no rules"},
		{"patch bad json", "PATCH", "/policy", `[{`, 400, "malformed JSON"},
		{"patch unknown field", "PATCH", "/policy", `[{"action":"allow","target":"a.example","port":1}]`, 400, "unknown field"},
		{"patch bad target", "PATCH", "/policy", `[{"action":"allow","target":"a b"}]`, 400, "invalid egress rule 0"},
		{"patch bad action", "PATCH", "/policy", `[{"action":"maybe","target":"a.example"}]`, 400, "allow or deny"},
		{"patch too many", "PATCH", "/policy", `[{"action":"allow","target":"a.example"},{"action":"allow","target":"b.example"},{"action":"allow","target":"c.example"}]`, 413, "too many"},
		{"body too large", "PATCH", "/policy", `[{"action":"allow","target":"` + strings.Repeat("a", 5000) + `"}]`, 413, ""},
		{"patch ok", "PATCH", "/policy", `[{"action":"deny","target":"10.0.0.0/8"}]`, 200, `"mode":"enforcing"`},
		{"delete empty", "DELETE", "/policy", `[]`, 400, "no targets"},
		{"delete unknown ignored", "DELETE", "/policy", `["nope.example","10.0.0.0/8"]`, 200, `"mode":"enforcing"`},
		{"get vault none", "GET", "/credential-vault", "", 404, "not found"},
		{"patch vault none", "PATCH", "/credential-vault", `{"credentials":{"delete":["x"]}}`, 404, "not found"},
		{"create vault bad", "POST", "/credential-vault", `{"credentials":[],"bindings":[{"name":"b","match":{"hosts":["api.example.com"]},"auth":{"type":"bearer","credential":"missing"}}]}`, 400, "unknown credential"},
		{"create vault host not allowed", "POST", "/credential-vault", mustJSON(t, map[string]any{"credentials": []any{cred("c", secret)}, "bindings": []any{map[string]any{"name": "b", "match": map[string]any{"hosts": []string{"other.org"}}, "auth": map[string]any{"type": "bearer", "credential": "c"}}}}), 400, "explicit egress allow rule"},
		{"create vault", "POST", "/credential-vault", vaultBody(t, secret), 201, `"revision":1`},
		{"create vault again", "POST", "/credential-vault", vaultBody(t, secret), 409, "exists"},
		{"get vault", "GET", "/credential-vault", "", 200, `"sourceType":"inline"`},
		{"list credentials", "GET", "/credential-vault/credentials", "", 200, `{"revision":1,"credentials":[{"name":"gh","sourceType":"inline","revision":1}]}`},
		{"get credential", "GET", "/credential-vault/credentials/gh", "", 200, `"name":"gh"`},
		{"get credential missing", "GET", "/credential-vault/credentials/nope", "", 404, "not found"},
		{"list bindings", "GET", "/credential-vault/bindings", "", 200, `"schemes":["https"],"ports":[443],"methods":["GET","POST","PUT","PATCH","DELETE"],"paths":["/*"]`},
		{"get binding", "GET", "/credential-vault/bindings/github", "", 200, `"auth":{"type":"bearer"}`},
		{"get binding missing", "GET", "/credential-vault/bindings/nope", "", 404, "not found"},
		{"patch stale revision", "PATCH", "/credential-vault", `{"expectedRevision":7,"credentials":{"replace":[{"name":"gh","source":{"type":"inline","value":"x"}}]}}`, 409, "revision is 1, expected 7"},
		{"patch add existing", "PATCH", "/credential-vault", `{"credentials":{"add":[{"name":"gh","source":{"type":"inline","value":"x"}}]}}`, 409, "exists"},
		{"patch replace missing", "PATCH", "/credential-vault", `{"bindings":{"replace":[{"name":"nope","match":{"hosts":["api.example.com"]},"auth":{"type":"bearer","credential":"gh"}}]}}`, 404, "not found"},
		{"patch delete referenced", "PATCH", "/credential-vault", `{"credentials":{"delete":["gh"]}}`, 400, "unknown credential"},
		{"patch empty", "PATCH", "/credential-vault", `{}`, 400, "no credentials or bindings"},
		{"patch value type", "PATCH", "/credential-vault", `{"credentials":{"add":[{"name":"n","source":{"type":"inline","value":12345}}]}}`, 400, "must be string"},
		{"patch ok", "PATCH", "/credential-vault", `{"expectedRevision":1,"credentials":{"replace":[{"name":"gh","source":{"type":"inline","value":"` + secret + `-2"}}]},"bindings":{"add":[{"name":"keyed","match":{"hosts":["*.example.com"],"ports":[8443]},"auth":{"type":"apiKey","name":"X-Key","credential":"gh"}}]}}`, 200, `"revision":2`},
		{"apiKey metadata", "GET", "/credential-vault/bindings/keyed", "", 200, `"auth":{"type":"apiKey","name":"X-Key"}`},
		{"delete vault", "DELETE", "/credential-vault", "", 204, ""},
		{"delete vault again", "DELETE", "/credential-vault", "", 404, "not found"},
		{"put empty resets", "PUT", "/policy", "", 200, `"mode":"deny_all"`},
		{"post allow all", "POST", "/policy", `{"defaultAction":"allow"}`, 200, `"mode":"allow_all"`},
		{"put null resets", "PUT", "/policy", "null", 200, `"mode":"deny_all"`},
		{"put bad default", "PUT", "/policy", `{"defaultAction":"sometimes"}`, 400, "defaultAction"},
		{"unknown route", "GET", "/nope", "", 404, ""},
	}
	var bodies []string
	for _, s := range steps {
		code, body := e.call(t, s.method, s.path, s.body)
		bodies = append(bodies, body)
		if code != s.want || !strings.Contains(body, s.contains) {
			t.Errorf("%s: %s %s = %d %q, want %d containing %q", s.name, s.method, s.path, code, body, s.want, s.contains)
		}
	}
	for i, b := range bodies {
		if strings.Contains(b, secret) || strings.Contains(b, "12345") {
			t.Errorf("response %d (%s) contains the secret: %s", i, steps[i].name, b)
		}
	}
	if strings.Contains(e.logs.String(), secret) {
		t.Errorf("logs contain the secret:\n%s", e.logs)
	}
}

func TestAPIAuth(t *testing.T) {
	e := startProxy(t, egress.Config{Token: testToken})
	for _, tok := range []string{"", "wrong"} {
		req, _ := http.NewRequest("GET", e.api.URL+"/policy", nil)
		if tok != "" {
			req.Header.Set(egress.AuthHeader, tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.StatusCode, http.StatusUnauthorized; got != want {
			t.Errorf("token %q: status = %d, want %d", tok, got, want)
		}
		if got := resp.Header.Get("Content-Type"); !strings.HasPrefix(got, "text/plain") {
			t.Errorf("token %q: Content-Type = %q, want text/plain", tok, got)
		}
	}
	if code, _ := e.call(t, "GET", "/policy", ""); code != http.StatusOK {
		t.Fatalf("with token: %d, want 200", code)
	}
	// Without the credential proxy the vault is a failed precondition.
	if code, body := e.call(t, "POST", "/credential-vault", vaultBody(t, "v")); code != http.StatusPreconditionFailed {
		t.Fatalf("vault without credential proxy: %d %s, want 412", code, body)
	}
}

func TestVaultWritesNeedLoopbackOrTLS(t *testing.T) {
	p, err := egress.New(egress.Config{Token: testToken, CredentialProxy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	req := httptest.NewRequest("POST", "/credential-vault", strings.NewReader(vaultBody(t, "v")))
	req.RemoteAddr = "192.0.2.10:40000"
	req.Header.Set(egress.AuthHeader, testToken)
	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, req)
	if got, want := rec.Code, http.StatusUpgradeRequired; got != want {
		t.Fatalf("status = %d, want %d (%s)", got, want, rec.Body)
	}
}

func TestPolicyGetShape(t *testing.T) {
	e := startProxy(t, egress.Config{Token: testToken})
	_, body := e.call(t, "GET", "/policy", "")
	var st egress.PolicyStatus
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.Status != "ok" || st.Mode != egress.ModeDenyAll || st.EnforcementMode != egress.DefaultEnforcementMode || st.Policy == nil || st.Policy.DefaultAction != egress.Deny {
		t.Fatalf("GET /policy = %+v", st)
	}
	if !strings.Contains(body, `"egress":[]`) {
		t.Fatalf("GET /policy body %s: egress must be a list", body)
	}
}
