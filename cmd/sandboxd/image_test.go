package main

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestImageCommands(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unpacking layers needs root")
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref := host + "/cli/img:1"
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	ctx := context.Background()
	runOut := func(args ...string) (string, error) {
		out := &syncBuffer{}
		err := run(ctx, args, env(nil), out)
		return out.String(), err
	}
	// Plain HTTP only when named.
	if _, err := runOut("image", "pull", "--data", data, ref); err == nil || !strings.Contains(err.Error(), "insecure-registry") {
		t.Errorf("pull from a plain HTTP registry not named insecure: %v", err)
	}
	out, err := runOut("image", "pull", "--data", data, "--insecure-registry", host, ref)
	if err != nil || !strings.Contains(out, "2 layers") {
		t.Fatalf("image pull = %q, %v", out, err)
	}
	if out, err := runOut("image", "ls", "--data", data); err != nil || !strings.Contains(out, ref) {
		t.Errorf("image ls = %q, %v", out, err)
	}
	if out, err := runOut("image", "rm", "--data", data, ref); err != nil || !strings.Contains(out, "removed") {
		t.Errorf("image rm = %q, %v", out, err)
	}
	if out, err := runOut("image", "gc", "--data", data); err != nil || !strings.Contains(out, "removed 2 layers") {
		t.Errorf("image gc = %q, %v", out, err)
	}
	if out, err := runOut("image", "ls", "--data", data); err != nil || strings.Contains(out, ref) {
		t.Errorf("image ls after rm = %q, %v", out, err)
	}
}

// TestStaticBuild checks what the Makefile enforces: sandboxd built with
// CGO_ENABLED=0 (the Makefile exports it) is statically linked, so its
// bind-mounted init runs in any image.
func TestStaticBuild(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "export CGO_ENABLED = 0") {
		t.Error("the Makefile does not export CGO_ENABLED = 0")
	}
	bin := filepath.Join(t.TempDir(), "sandboxd")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	if ok, err := sandboxd.StaticBinary(bin); err != nil || !ok {
		t.Errorf("sandboxd built with CGO_ENABLED=0 is not static: %v", err)
	}
}
