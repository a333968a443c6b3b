package alineo_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/internal/registrytest"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// TestSandboxImageErrors (issue 40 item 7): Client.Sandbox of an image
// that cannot be had returns a *SandboxError wrapping sandboxd's answer
// (an *APIError 404 or 424) that matches the image sentinel, and records
// nothing.
func TestSandboxImageErrors(t *testing.T) {
	reg := registrytest.New(t)
	private := registrytest.New(t)
	privImage := private.Push(t, "private/app:1", registrytest.Image(t, v1.Config{Cmd: []string{"true"}},
		registrytest.Layer(t, registrytest.File{Name: "hello.txt", Body: "hello\n"})))
	private.RequireAuth("alice", "s3cret")
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials
	url, _ := testenv.SandboxdServer(t, sandboxd.Config{InsecureRegistries: []string{reg.Host, private.Host, "127.0.0.1:1"}})
	store := memory.New()
	defer store.Close()
	client, err := alineo.New(alineo.Options{BaseURL: url, Adapter: store})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, image string
		status      int
		want        error
	}{
		{"not found", reg.Host + "/no/such-image:1", http.StatusNotFound, alineo.ErrImageNotFound},
		{"unauthorized", privImage, http.StatusFailedDependency, alineo.ErrImageUnauthorized},
		{"unreachable", "127.0.0.1:1/no/such-image:1", http.StatusFailedDependency, alineo.ErrImagePullFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := client.Sandbox(context.Background(), alineo.SandboxOptions{Image: c.image})
			if !errors.Is(err, c.want) {
				t.Fatalf("Sandbox = %v, want an error matching %v", err, c.want)
			}
			for _, other := range []error{alineo.ErrImageNotFound, alineo.ErrImageUnauthorized, alineo.ErrImagePullFailed} {
				if other != c.want && errors.Is(err, other) {
					t.Errorf("Sandbox = %v also matches %v", err, other)
				}
			}
			var se *alineo.SandboxError
			var ae *opensandbox.APIError
			if !errors.As(err, &se) || se.Op != "create" || !errors.As(err, &ae) || ae.Status != c.status || !strings.Contains(ae.Message, c.image) {
				t.Errorf("Sandbox = %v, want a create *SandboxError wrapping an *APIError %d naming %s", err, c.status, c.image)
			}
		})
	}
	sessions, err := client.Sandboxes().List(context.Background(), alineo.ListOptions{})
	if err != nil || len(sessions) != 0 {
		t.Errorf("sessions recorded = %d, %v; want none", len(sessions), err)
	}
}
