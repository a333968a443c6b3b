package alineo_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters/memory"
)

// newGuardedSandbox returns a sandbox that may reach api.example.com only, with
// the credential proxy on; the caller closes it.
func newGuardedSandbox(ctx context.Context, client *alineo.Client) *alineo.Sandbox {
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{
		Image:           "host",
		CredentialProxy: true,
		NetworkPolicy: &alineo.NetworkPolicy{
			DefaultAction: alineo.EgressDeny,
			Egress:        []alineo.EgressRule{{Action: alineo.EgressAllow, Target: "api.example.com"}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	return sb
}

// An API key is injected into the sandbox's requests to api.example.com
// without ever entering the sandbox, and it is redacted from what is recorded.
func ExampleSandbox_Credentials() {
	ctx := context.Background()
	client := newClient()
	sb := newGuardedSandbox(ctx, client)
	defer sb.Close(ctx)

	key := "sk-example-4f1c2a" // e.g. os.Getenv("OPENAI_API_KEY")
	err := sb.Credentials().Set(ctx, "openai", key, alineo.CredentialBinding{
		Hosts: []string{"api.example.com"},
		Type:  alineo.CredentialBearer, // Authorization: Bearer <key>
	}, "env:OPENAI_API_KEY")
	if err != nil {
		log.Fatal(err)
	}
	// `curl https://api.example.com/v1/models` in the sandbox now carries the
	// header; the sandbox's environment, files and processes do not hold it.
	res, err := sb.Exec(ctx, "echo key="+key+"; env | grep -c sk-example || true").Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
	// Output:
	// key=[REDACTED:openai]
	// 0
}

func ExampleCredentials_Set() {
	ctx := context.Background()
	client := newClient()
	sb := newGuardedSandbox(ctx, client)
	defer sb.Close(ctx)

	err := sb.Credentials().Set(ctx, "github", "ghp-example-token", alineo.CredentialBinding{
		Hosts:  []string{"api.example.com"},
		Type:   alineo.CredentialAPIKey,
		Header: "X-Api-Key",
	}, "vault:ci/github")
	fmt.Println(err)
	// Output: <nil>
}

func ExampleCredentials_Patch() {
	ctx := context.Background()
	client := newClient()
	sb := newGuardedSandbox(ctx, client)
	defer sb.Close(ctx)
	creds := sb.Credentials()
	binding := alineo.CredentialBinding{Hosts: []string{"api.example.com"}, Type: alineo.CredentialBearer}
	if err := creds.Set(ctx, "api", "old-key-1234", binding, ""); err != nil {
		log.Fatal(err)
	}

	rotated := "new-key-5678"
	if err := creds.Patch(ctx, "api", alineo.CredentialPatch{Value: &rotated}); err != nil {
		log.Fatal(err)
	}
	res, _ := sb.Exec(ctx, "echo old-key-1234 new-key-5678").Wait()
	fmt.Print(res.Stdout)
	// Output: [REDACTED:api#1] [REDACTED:api]
}

func ExampleCredentials_Remove() {
	ctx := context.Background()
	client := newClient()
	sb := newGuardedSandbox(ctx, client)
	defer sb.Close(ctx)
	creds := sb.Credentials()
	binding := alineo.CredentialBinding{Hosts: []string{"api.example.com"}, Type: alineo.CredentialBearer}
	if err := creds.Set(ctx, "api", "temporary-key", binding, ""); err != nil {
		log.Fatal(err)
	}

	if err := creds.Remove(ctx, "api"); err != nil {
		log.Fatal(err)
	}
	bs, _ := creds.ListBindings(ctx)
	fmt.Println(len(bs))
	// Output: 0
}

func ExampleCredentials_ListBindings() {
	ctx := context.Background()
	client := newClient()
	sb := newGuardedSandbox(ctx, client)
	defer sb.Close(ctx)
	err := sb.Credentials().Set(ctx, "api", "some-key-value", alineo.CredentialBinding{
		Hosts: []string{"api.example.com"}, Type: alineo.CredentialCustomHeaders, Headers: []string{"X-Key", "X-Key-2"},
	}, "")
	if err != nil {
		log.Fatal(err)
	}

	bs, err := sb.Credentials().ListBindings(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, b := range bs {
		fmt.Println(b.Name, b.Binding.Type, b.Binding.Hosts, b.Binding.Headers)
	}
	// Output: api customHeaders [api.example.com] [X-Key X-Key-2]
}

func ExampleSandbox_Egress() {
	ctx := context.Background()
	client := newClient()
	sb := newGuardedSandbox(ctx, client)
	defer sb.Close(ctx)

	p, err := sb.Egress().List(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.DefaultAction, p.Egress)
	// Output: deny [{allow api.example.com}]
}

func ExampleEgress_Add() {
	ctx := context.Background()
	client := newClient()
	sb := newGuardedSandbox(ctx, client)
	defer sb.Close(ctx)

	err := sb.Egress().Add(ctx,
		alineo.EgressRule{Action: alineo.EgressAllow, Target: "*.pypi.org"},
		alineo.EgressRule{Action: alineo.EgressDeny, Target: "10.0.0.0/8"})
	if err != nil {
		log.Fatal(err)
	}
	p, _ := sb.Egress().List(ctx)
	fmt.Println(p.Egress)
	// Output: [{allow *.pypi.org} {deny 10.0.0.0/8} {allow api.example.com}]
}

func ExampleEgress_Remove() {
	ctx := context.Background()
	client := newClient()
	sb := newGuardedSandbox(ctx, client)
	defer sb.Close(ctx)

	if err := sb.Egress().Remove(ctx, "api.example.com"); err != nil {
		log.Fatal(err)
	}
	p, _ := sb.Egress().List(ctx)
	fmt.Println(p.DefaultAction, len(p.Egress))
	// Output: deny 0
}

func ExampleEgress_List() {
	ctx := context.Background()
	client := newClient()
	sb := newGuardedSandbox(ctx, client)
	defer sb.Close(ctx)

	p, err := sb.Egress().List(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range p.Egress {
		fmt.Println(r.Action, r.Target)
	}
	// Output: allow api.example.com
}

// A resumed sandbox re-registers the credentials its session had bound; the
// resolver supplies their values, which the ledger never held.
func ExampleResumeOptions_resolveCredential() {
	ctx := context.Background()
	client := newClient()
	sb := newGuardedSandbox(ctx, client)
	binding := alineo.CredentialBinding{Hosts: []string{"api.example.com"}, Type: alineo.CredentialBearer}
	if err := sb.Credentials().Set(ctx, "openai", "sk-example-resume", binding, "env:OPENAI_API_KEY"); err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Checkpoint(ctx, ""); err != nil {
		log.Fatal(err)
	}
	sb.Close(ctx)

	resumed, err := client.Resume(ctx, sb.ID(), alineo.ResumeOptions{
		ResolveCredential: func(ctx context.Context, name string, b alineo.CredentialBinding) (string, error) {
			if v := os.Getenv("OPENAI_API_KEY"); v != "" {
				return v, nil
			}
			return "sk-example-resume", nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer resumed.Close(ctx)
	bs, _ := resumed.Credentials().ListBindings(ctx)
	fmt.Println(bs[0].Name, bs[0].Binding.Type)
	// Output: openai bearer
}

func ExampleNewOpenSandboxBroker() {
	// The default broker; pass another CredentialBroker to keep values elsewhere.
	client, err := alineo.New(alineo.Options{BaseURL: exampleServerURL(), Adapter: memory.New()})
	if err != nil {
		log.Fatal(err)
	}
	broker := alineo.NewOpenSandboxBroker(client.OpenSandbox())
	client, err = alineo.New(alineo.Options{BaseURL: exampleServerURL(), Adapter: memory.New(), CredentialBroker: broker})
	fmt.Println(client != nil, err)
	// Output: true <nil>
}
