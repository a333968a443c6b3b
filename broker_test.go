package alineo

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/sandboxd/egress"
)

// vaultBroker serves a sandboxd egress API on an httptest server and returns
// a broker on it, and the proxy (to look at the values it holds).
func vaultBroker(t *testing.T, credentialProxy bool) (*OpenSandboxBroker, *egress.Proxy) {
	t.Helper()
	p, err := egress.New(egress.Config{Name: "sbx", Token: "tok", CredentialProxy: credentialProxy,
		Policy: &egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{
			{Action: egress.Allow, Target: "api.test"}, {Action: egress.Allow, Target: "other.test"}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	api := httptest.NewServer(p.Handler())
	t.Cleanup(api.Close)
	b := &OpenSandboxBroker{Egress: func(context.Context, string) (*opensandbox.Egress, error) {
		return opensandbox.NewEgress(opensandbox.EndpointConfig{Endpoint: opensandbox.Endpoint{
			URL: api.URL, Headers: map[string]string{egress.AuthHeader: "tok"}}})
	}}
	return b, p
}

func TestOpenSandboxBroker(t *testing.T) {
	ctx := context.Background()
	b, p := vaultBroker(t, true)
	bearer := CredentialBinding{Hosts: []string{"api.test"}, Type: CredentialBearer}
	if err := b.Set(ctx, "sbx", "a", "v1", bearer); err != nil { // creates the vault
		t.Fatalf("Set a: %v", err)
	}
	if err := b.Set(ctx, "sbx", "a", "v2", bearer); err != nil { // replaces
		t.Fatalf("Set a again: %v", err)
	}
	hdr := CredentialBinding{Hosts: []string{"other.test"}, Type: CredentialAPIKey, Header: "X-Key"}
	if err := b.Set(ctx, "sbx", "b", "w1", hdr); err != nil { // adds
		t.Fatalf("Set b: %v", err)
	}
	if got, want := fmt.Sprint(p.Vault().Secrets()), "map[a:v2 b:w1]"; got != want {
		t.Fatalf("vault values = %s, want %s", got, want)
	}
	bs, err := b.List(ctx, "sbx")
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 || bs[0].Name != "a" || bs[0].Binding.Type != CredentialBearer || bs[1].Binding.Header != "X-Key" {
		t.Fatalf("List = %+v, want a (bearer) and b (apiKey X-Key)", bs)
	}

	v3 := "v3"
	if err := b.Patch(ctx, "sbx", "a", CredentialPatch{Value: &v3}); err != nil {
		t.Fatalf("Patch value: %v", err)
	}
	custom := CredentialBinding{Hosts: []string{"api.test"}, Type: CredentialCustomHeaders, Headers: []string{"X-A", "X-B"}}
	if err := b.Patch(ctx, "sbx", "a", CredentialPatch{Binding: &custom}); err != nil {
		t.Fatalf("Patch binding: %v", err)
	}
	if got := p.Vault().Secrets()["a"]; got != "v3" {
		t.Fatalf("a = %q after Patch, want v3", got)
	}
	if bs, _ := b.List(ctx, "sbx"); bs[0].Binding.Type != CredentialCustomHeaders {
		t.Fatalf("a's binding after Patch = %+v, want customHeaders", bs[0].Binding)
	}
	if err := b.Patch(ctx, "sbx", "nope", CredentialPatch{Value: &v3}); !errors.Is(err, ErrCredentialNotFound) {
		t.Fatalf("Patch of an unknown name = %v, want ErrCredentialNotFound", err)
	}

	if err := b.Remove(ctx, "sbx", "a"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := b.Remove(ctx, "sbx", "a"); err != nil {
		t.Fatalf("Remove again: %v", err)
	}
	if got, want := fmt.Sprint(p.Vault().Secrets()), "map[b:w1]"; got != want {
		t.Fatalf("vault values after Remove = %s, want %s", got, want)
	}
}

// TestOpenSandboxBrokerConcurrent sets credentials from several goroutines at
// once: the revision check makes some rounds conflict, and every one lands.
func TestOpenSandboxBrokerConcurrent(t *testing.T) {
	ctx := context.Background()
	b, p := vaultBroker(t, true)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		wg.Go(func() {
			errs <- b.Set(ctx, "sbx", fmt.Sprintf("c%d", i), fmt.Sprintf("v%d", i),
				CredentialBinding{Hosts: []string{"api.test"}, Paths: []string{fmt.Sprintf("/p%d/*", i)}, Type: CredentialBearer})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Set: %v", err)
		}
	}
	if got := len(p.Vault().Secrets()); got != 6 {
		t.Fatalf("vault holds %d values, want 6", got)
	}
}

func TestOpenSandboxBrokerWithoutCredentialProxy(t *testing.T) {
	b, _ := vaultBroker(t, false)
	err := b.Set(context.Background(), "sbx", "a", "v", CredentialBinding{Hosts: []string{"api.test"}, Type: CredentialBearer})
	if !errors.Is(err, opensandbox.ErrPrecondition) {
		t.Fatalf("Set without a credential proxy = %v, want ErrPrecondition", err)
	}
	if bs, err := b.List(context.Background(), "sbx"); err == nil && len(bs) != 0 {
		t.Fatalf("List = %+v, want nothing", bs)
	}
}
