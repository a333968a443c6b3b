package egress

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func newTestVault(t *testing.T) *Vault {
	t.Helper()
	pol, err := NewEnforcer(&Policy{Egress: []Rule{{Allow, "*.example.com"}, {Allow, "example.com"}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return newVault(true, pol)
}

func TestInjectAuthTypes(t *testing.T) {
	creds := []Credential{{Name: "a", Source: CredentialSource{Value: "va"}}, {Name: "b", Source: CredentialSource{Value: "vb"}}}
	tests := []struct {
		auth Auth
		want map[string]string
	}{
		{Auth{Type: "bearer", Credential: "a"}, map[string]string{"Authorization": "Bearer va"}},
		{Auth{Type: "basic", Credential: "b"}, map[string]string{"Authorization": "Basic vb"}},
		{Auth{Type: "apiKey", Name: "x-api-key", Credential: "a"}, map[string]string{"X-Api-Key": "va"}},
		{Auth{Type: "customHeaders", Headers: []CustomHeader{{"X-One", "a"}, {"X-Two", "b"}}}, map[string]string{"X-One": "va", "X-Two": "vb"}},
	}
	for _, tt := range tests {
		v := newTestVault(t)
		if _, err := v.Create(creds, []Binding{{Name: "bind", Match: Match{Hosts: []string{"api.example.com"}}, Auth: tt.auth}}); err != nil {
			t.Fatalf("%s: %v", tt.auth.Type, err)
		}
		r := httptest.NewRequest("POST", "https://api.example.com/v1/x", nil)
		name, n := v.inject(r, "https", "api.example.com", 443)
		if name != "bind" || n != 1 {
			t.Fatalf("%s: inject = %q, %d; want bind, 1", tt.auth.Type, name, n)
		}
		for h, want := range tt.want {
			if got := r.Header.Get(h); got != want {
				t.Errorf("%s: header %s = %q, want %q", tt.auth.Type, h, got, want)
			}
		}
	}
}

func TestInjectMatching(t *testing.T) {
	v := newTestVault(t)
	_, err := v.Create([]Credential{{Name: "a", Source: CredentialSource{Value: "va"}}}, []Binding{
		{Name: "reads", Match: Match{Hosts: []string{"*.example.com"}, Methods: []string{"get"}, Paths: []string{"/repos/*"}}, Auth: Auth{Type: "bearer", Credential: "a"}},
		{Name: "exact", Match: Match{Hosts: []string{"EXAMPLE.com"}, Schemes: []string{"http", "https"}, Ports: []int{80, 443}, Paths: []string{"/token"}}, Auth: Auth{Type: "bearer", Credential: "a"}},
		{Name: "overlap", Match: Match{Hosts: []string{"api.example.com"}, Paths: []string{"/repos/private/*"}}, Auth: Auth{Type: "bearer", Credential: "a"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, scheme, host string
		port                 int
		path, want           string
		n                    int
	}{
		{"GET", "https", "api.example.com", 443, "/repos/x", "reads", 1},
		{"GET", "https", "API.EXAMPLE.COM", 443, "/repos/x", "reads", 1},
		{"POST", "https", "api.example.com", 443, "/repos/x", "", 0},        // method
		{"GET", "http", "api.example.com", 443, "/repos/x", "", 0},          // scheme
		{"GET", "https", "api.example.com", 8443, "/repos/x", "", 0},        // port
		{"GET", "https", "example.com", 443, "/repos/x", "", 0},             // wildcard excludes the apex
		{"GET", "https", "api.example.com", 443, "/other", "", 0},           // path
		{"GET", "http", "example.com", 80, "/token", "exact", 1},            // exact path
		{"GET", "http", "example.com", 80, "/token/x", "", 0},               // exact path only
		{"GET", "https", "api.example.com", 443, "/repos/private/a", "", 2}, // two bindings: none
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.scheme+"://"+tt.host+tt.path, nil)
		name, n := v.inject(r, tt.scheme, normHost(tt.host), tt.port)
		if name != tt.want || n != tt.n {
			t.Errorf("%s %s://%s:%d%s = %q, %d; want %q, %d", tt.method, tt.scheme, tt.host, tt.port, tt.path, name, n, tt.want, tt.n)
		}
		if tt.n != 1 && r.Header.Get("Authorization") != "" {
			t.Errorf("%s %s: injected without a single match", tt.method, tt.path)
		}
	}
	if !v.wantsTLS("api.example.com", 443) || v.wantsTLS("api.example.com", 8443) || v.wantsTLS("other.org", 443) {
		t.Error("wantsTLS disagrees with the bindings")
	}
}

func TestCredentialValidation(t *testing.T) {
	v := newTestVault(t)
	bad := []Credential{
		{Name: "", Source: CredentialSource{Value: "x"}},
		{Name: "a/b", Source: CredentialSource{Value: "x"}},
		{Name: "n", Source: CredentialSource{Value: ""}},
		{Name: "n", Source: CredentialSource{Type: "env", Value: "x"}},
		{Name: "n", Source: CredentialSource{Value: "line\r\nX-Evil: 1"}},
	}
	for _, c := range bad {
		if _, err := v.Create([]Credential{c}, nil); !errors.Is(err, ErrInvalidVault) {
			t.Errorf("Create(%q) err = %v, want ErrInvalidVault", c.Name, err)
		}
	}
	badBindings := []Binding{
		{Name: "b", Match: Match{}, Auth: Auth{Type: "bearer", Credential: "c"}},
		{Name: "b", Match: Match{Hosts: []string{"api.example.com"}, Schemes: []string{"ftp"}}, Auth: Auth{Type: "bearer", Credential: "c"}},
		{Name: "b", Match: Match{Hosts: []string{"api.example.com"}, Ports: []int{0}}, Auth: Auth{Type: "bearer", Credential: "c"}},
		{Name: "b", Match: Match{Hosts: []string{"api.example.com"}, Paths: []string{"nope"}}, Auth: Auth{Type: "bearer", Credential: "c"}},
		{Name: "b", Match: Match{Hosts: []string{"api.example.com"}}, Auth: Auth{Type: "digest", Credential: "c"}},
		{Name: "b", Match: Match{Hosts: []string{"api.example.com"}}, Auth: Auth{Type: "apiKey", Name: "bad header", Credential: "c"}},
		{Name: "b", Match: Match{Hosts: []string{"api.example.com"}}, Auth: Auth{Type: "customHeaders"}},
	}
	for i, b := range badBindings {
		if _, err := v.Create([]Credential{{Name: "c", Source: CredentialSource{Value: "x"}}}, []Binding{b}); !errors.Is(err, ErrInvalidVault) {
			t.Errorf("binding %d: err = %v, want ErrInvalidVault", i, err)
		}
	}
	if _, err := v.State(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("State after failed creates: %v, want ErrNotFound", err)
	}
}

func TestDisabledVault(t *testing.T) {
	pol, _ := NewEnforcer(nil, 0)
	v := newVault(false, pol)
	if _, err := v.Create(nil, nil); !errors.Is(err, ErrPrecondition) {
		t.Fatalf("Create err = %v, want ErrPrecondition", err)
	}
}

func TestCredentialSourceHidesValue(t *testing.T) {
	c := Credential{Name: "n", Source: CredentialSource{Type: "inline", Value: "topsecret"}}
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c)} {
		if strings.Contains(s, "topsecret") {
			t.Errorf("formatted credential shows the value: %s", s)
		}
	}
	var sb strings.Builder
	w := httptest.NewRecorder()
	writeJSON(w, http.StatusOK, c)
	sb.WriteString(w.Body.String())
	if strings.Contains(sb.String(), "topsecret") {
		t.Errorf("JSON of a credential shows the value: %s", sb.String())
	}
}
