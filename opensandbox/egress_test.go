package opensandbox_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/alineo-labs/alineo/opensandbox"
)

func newEgress(t *testing.T, handler func(w http.ResponseWriter, r *http.Request, body []byte)) (*opensandbox.Egress, *recorder) {
	t.Helper()
	rec := newRecorder(t, handler)
	eg, err := opensandbox.NewEgress(opensandbox.EndpointConfig{
		Endpoint: opensandbox.Endpoint{URL: rec.URL + "/proxy/18080", Headers: map[string]string{"OPENSANDBOX-EGRESS-AUTH": "eg-tok"}},
		Retry:    fastRetry,
	})
	if err != nil {
		t.Fatal(err)
	}
	return eg, rec
}

func TestEgressPolicy(t *testing.T) {
	eg, rec := newEgress(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		switch r.Method {
		case "GET":
			writeJSON(w, 200, `{"status":"ok","mode":"enforcing","enforcementMode":"dns",
				"policy":{"defaultAction":"deny","egress":[{"action":"allow","target":"*.github.com"}]}}`)
		default:
			writeJSON(w, 200, `{"status":"ok","mode":"enforcing","enforcementMode":"dns"}`)
		}
	})
	ctx := context.Background()
	st, err := eg.GetPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode != "enforcing" || st.Policy == nil || st.Policy.DefaultAction != "deny" || st.Policy.Egress[0].Target != "*.github.com" {
		t.Errorf("policy = %+v", st)
	}
	r := rec.last(t)
	if r.Method != "GET" || r.Path != "/proxy/18080/policy" || r.Header.Get("OPENSANDBOX-EGRESS-AUTH") != "eg-tok" {
		t.Errorf("request = %s %s %v", r.Method, r.Path, r.Header)
	}

	if _, err := eg.PatchPolicy(ctx, opensandbox.NetworkRule{Action: "allow", Target: "pypi.org"}); err != nil {
		t.Fatal(err)
	}
	r = rec.last(t)
	if r.Method != "PATCH" || r.Path != "/proxy/18080/policy" {
		t.Errorf("request = %s %s", r.Method, r.Path)
	}
	jsonEqual(t, "patch", r.Body, `[{"action":"allow","target":"pypi.org"}]`)

	if _, err := eg.DeletePolicy(ctx, "pypi.org", "x.com"); err != nil {
		t.Fatal(err)
	}
	r = rec.last(t)
	if r.Method != "DELETE" {
		t.Errorf("method = %s", r.Method)
	}
	jsonEqual(t, "delete", r.Body, `["pypi.org","x.com"]`)

	if _, err := eg.SetPolicy(ctx, opensandbox.NetworkPolicy{DefaultAction: "allow"}); err != nil {
		t.Fatal(err)
	}
	r = rec.last(t)
	if r.Method != "PUT" {
		t.Errorf("method = %s", r.Method)
	}
	jsonEqual(t, "put", r.Body, `{"defaultAction":"allow"}`)

	if _, err := eg.PatchPolicy(ctx); !errors.Is(err, opensandbox.ErrInvalidRequest) {
		t.Errorf("empty patch err = %v", err)
	}
}

func TestEgressVault(t *testing.T) {
	const state = `{"revision":3,"credentials":[{"name":"gh","sourceType":"inline","revision":1}],
		"bindings":[{"name":"b","revision":2,"match":{"hosts":["api.github.com"]},"auth":{"type":"bearer"}}]}`
	eg, rec := newEgress(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		switch {
		case r.Method == "POST":
			writeJSON(w, 201, state)
		case r.Method == "DELETE":
			w.WriteHeader(204)
		case r.URL.Path == "/proxy/18080/credential-vault/credentials":
			writeJSON(w, 200, `{"revision":3,"credentials":[{"name":"gh","sourceType":"inline","revision":1}]}`)
		case r.Method == "PATCH":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(409)
			_, _ = w.Write([]byte("revision mismatch\n"))
		default:
			writeJSON(w, 200, state)
		}
	})
	ctx := context.Background()
	vs, err := eg.CreateVault(ctx,
		[]opensandbox.Credential{{Name: "gh", Source: opensandbox.CredentialSource{Value: "s3cret"}}},
		[]opensandbox.CredentialBinding{{Name: "b", Match: opensandbox.CredentialMatch{Hosts: []string{"api.github.com"}},
			Auth: opensandbox.CredentialAuth{Type: "bearer", Credential: "gh"}}})
	if err != nil {
		t.Fatal(err)
	}
	if vs.Revision != 3 || len(vs.Bindings) != 1 || vs.Bindings[0].Auth.Type != "bearer" {
		t.Errorf("state = %+v", vs)
	}
	r := rec.last(t)
	if r.Method != "POST" || r.Path != "/proxy/18080/credential-vault" {
		t.Errorf("request = %s %s", r.Method, r.Path)
	}
	jsonEqual(t, "create vault", r.Body, `{"credentials":[{"name":"gh","source":{"type":"inline","value":"s3cret"}}],
		"bindings":[{"name":"b","match":{"hosts":["api.github.com"]},"auth":{"type":"bearer","credential":"gh"}}]}`)

	rev := int64(3)
	_, err = eg.PatchVault(ctx, opensandbox.VaultPatch{ExpectedRevision: &rev,
		Credentials: &opensandbox.CredentialChanges{Delete: []string{"gh"}}})
	var apiErr *opensandbox.APIError
	if !errors.Is(err, opensandbox.ErrConflict) || !errors.As(err, &apiErr) || apiErr.Message != "revision mismatch" {
		t.Fatalf("patch err = %v, want ErrConflict with the plain-text message", err)
	}
	jsonEqual(t, "patch vault", rec.last(t).Body, `{"expectedRevision":3,"credentials":{"delete":["gh"]}}`)

	creds, rv, err := eg.ListCredentials(ctx)
	if err != nil || rv != 3 || len(creds) != 1 || creds[0].Name != "gh" {
		t.Errorf("ListCredentials = %+v, %d, %v", creds, rv, err)
	}
	bindings, rv, err := eg.ListBindings(ctx)
	if err != nil || rv != 3 || len(bindings) != 1 || bindings[0].Match == nil || bindings[0].Match.Hosts[0] != "api.github.com" {
		t.Errorf("ListBindings = %+v, %d, %v", bindings, rv, err)
	}
	if _, err := eg.GetVault(ctx); err != nil {
		t.Fatal(err)
	}
	if err := eg.DeleteVault(ctx); err != nil {
		t.Fatal(err)
	}
	if r := rec.last(t); r.Method != "DELETE" || r.Path != "/proxy/18080/credential-vault" {
		t.Errorf("request = %s %s", r.Method, r.Path)
	}
}
