package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	initOnce sync.Once
	initPath string
	initErr  error
)

// SandboxInit returns cmd/sandboxd-init, the sandbox init's own program,
// built statically (CGO_ENABLED=0, as the Makefile builds every binary) once
// per test process, to serve as sandboxd's Config.InitBinary: what sandboxd
// binds into sandboxes when it is installed next to it. It fails t if the
// build fails.
func SandboxInit(t testing.TB) string {
	t.Helper()
	initOnce.Do(func() {
		dir := filepath.Join(os.TempDir(), "alineo-testutil-init")
		if initErr = os.MkdirAll(dir, 0o755); initErr != nil {
			return
		}
		// Test binaries of several packages may build it at once: each
		// builds its own and renames it into place.
		tmp, err := os.MkdirTemp(dir, "build-")
		if err != nil {
			initErr = err
			return
		}
		defer os.RemoveAll(tmp)
		const pkg = "github.com/alineo-labs/alineo/cmd/sandboxd-init"
		built := filepath.Join(tmp, "sandboxd-init")
		cmd := exec.Command("go", "build", "-o", built, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			initErr = fmt.Errorf("go build %s: %w: %s", pkg, err, out)
			return
		}
		initPath = filepath.Join(dir, "sandboxd-init")
		initErr = os.Rename(built, initPath)
	})
	if initErr != nil {
		t.Fatalf("the sandbox init: %v", initErr)
	}
	return initPath
}
