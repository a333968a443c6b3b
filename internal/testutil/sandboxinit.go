package testutil

import (
	"os"
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
		built := filepath.Join(tmp, "sandboxd-init")
		if initErr = BuildStatic(built, "github.com/alineo-labs/alineo/cmd/sandboxd-init"); initErr != nil {
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
