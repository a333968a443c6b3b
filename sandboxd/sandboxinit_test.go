package sandboxd_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// TestSandboxInitProgram: with cmd/sandboxd-init as its init, a sandbox
// runs it (the binary bound into it is that one), its commands, and a
// sandbox restored from its snapshot runs the default idle entrypoint.
func TestSandboxInitProgram(t *testing.T) {
	p := testutil.SandboxInit(t)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	_, base := startServer(t, sandboxd.Config{InitBinary: p})
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)
	u, tok := execdEndpoint(t, base, id, false)
	lines, code := run(t, u, tok, "sha256sum /dev/.sandboxd/sandboxd-init && echo hi")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], hex.EncodeToString(sum[:])+" ") || lines[1] != "hi" {
		t.Fatalf("in the sandbox: %q exit %d; want the sha256 of %s (%x), then hi", lines, code, p, sum)
	}
	snap := snapshot(t, base, id, "")
	waitSnapshot(t, base, snap.ID, sandboxd.SnapshotReady)
	r := call(t, "POST", base+"/v1/sandboxes", map[string]any{"snapshotId": snap.ID}) // the idle entrypoint
	wantStatus(t, r, http.StatusAccepted)
	var out struct{ ID string }
	r.decode(t, &out)
	restored := out.ID
	waitState(t, base, restored, sandboxd.StateRunning)
	u, tok = execdEndpoint(t, base, restored, false)
	if lines, code := run(t, u, tok, "echo restored"); code != 0 || len(lines) != 1 || lines[0] != "restored" {
		t.Fatalf("in the restored sandbox: %q exit %d", lines, code)
	}
}

// TestInitBinaryRefused: an init binary that is not a sandbox init of this
// protocol stops Start, saying so, rather than failing every create.
func TestInitBinaryRefused(t *testing.T) {
	notInit := filepath.Join(t.TempDir(), "old-sandboxd")
	if err := os.WriteFile(notInit, []byte("#!/bin/sh\necho 'sandboxd: unknown ALINEO_SANDBOXD_INIT role \"identify\"' >&2\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := sandboxd.Open(context.Background(), sandboxd.Config{InitBinary: notInit})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	_, err = s.Start(context.Background())
	if errors.Is(err, sandboxd.ErrIsolationUnavailable) && !errors.Is(err, sandboxd.ErrInitBinary) {
		testenv.SkipOrFail(t, err.Error())
	}
	if !errors.Is(err, sandboxd.ErrInitBinary) || !strings.Contains(err.Error(), notInit) || !strings.Contains(err.Error(), "unknown ALINEO_SANDBOXD_INIT role") {
		t.Fatalf("Start with %s as the init: %v; want ErrInitBinary naming it and saying why", notInit, err)
	}
	if errors.Is(err, sandboxd.ErrIsolationUnavailable) { // which tests skip on
		t.Errorf("Start with %s as the init: %v; want it apart from ErrIsolationUnavailable: the runtime works", notInit, err)
	}
}
