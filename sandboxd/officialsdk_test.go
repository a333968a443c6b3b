package sandboxd_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// officialSDK is the npm package of the official OpenSandbox TypeScript SDK
// and the version the test pins.
const officialSDK = "@alibaba-group/opensandbox@0.1.11"

// TestOfficialTypeScriptSDK installs the official TypeScript SDK from npm into
// a temporary directory and runs testdata/officialsdk/smoke.mjs against an
// in-process sandboxd: create, commands (foreground, background, logs), files,
// pause and resume, kill. It needs node (20 or newer) and npm, and the npm
// registry: it skips without them, and fails in CI.
func TestOfficialTypeScriptSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: installs an npm package")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.SkipOrFail(t, "node is not installed (apt-get install nodejs npm)")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		testenv.SkipOrFail(t, "npm is not installed (apt-get install npm)")
	}
	dir := t.TempDir()
	script, err := os.ReadFile(filepath.Join("testdata", "officialsdk", "smoke.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"sandboxd-smoke","private":true,"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "smoke.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--loglevel=error", officialSDK)
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		testenv.SkipOrFail(t, "npm install "+officialSDK+": "+err.Error()+": "+string(out))
	}

	_, base := startServer(t, sandboxd.Config{})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	run := exec.CommandContext(ctx, node, "smoke.mjs")
	run.Dir = dir
	run.Env = append(os.Environ(), "OPEN_SANDBOX_DOMAIN="+u.Host)
	out, err := run.CombinedOutput()
	t.Logf("official TypeScript SDK (%s):\n%s", officialSDK, out)
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("smoke.mjs: %v", err)
	}
}
