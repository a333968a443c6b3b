package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/testenv"
)

// TestRunMetrics (issue 40 item 8): --metrics serves the server's metrics
// in an exposition promtool accepts, and /healthz, which turns 503 naming
// the runtime while the OCI runtime's binary cannot be run.
func TestRunMetrics(t *testing.T) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		testenv.SkipOrFail(t, "no runc (make deps installs it)")
	}
	b, err := os.ReadFile(runc)
	if err != nil {
		t.Fatal(err)
	}
	rt := filepath.Join(t.TempDir(), "runc")
	if err := os.WriteFile(rt, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--data", t.TempDir(), "--metrics", "127.0.0.1:0", "--runtime", rt}, env(nil), out)
	}()
	var base, metrics string
	re := regexp.MustCompile(`(?s)listening on (http://\S+).*metrics on (http://\S+)/metrics`)
	testenv.Eventually(t, 20*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v\n%s", err, out)
		default:
		}
		m := re.FindStringSubmatch(out.String())
		if m == nil {
			return errors.New("not serving metrics yet")
		}
		base, metrics = m[1], m[2]
		return nil
	})
	get := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get(metrics + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != http.StatusOK || !strings.Contains(body, `"ok"`) {
		t.Errorf("/healthz = %d %s, want 200 ok", code, body)
	}

	res, err := http.Post(base+"/v1/sandboxes", "application/json", bytes.NewReader([]byte(
		`{"image":{"uri":"host"},"entrypoint":["tail","-f","/dev/null"],"resourceLimits":{"cpu":"500m","memory":"512Mi"}}`)))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("create: %d", res.StatusCode)
	}
	_, body := get("/metrics")
	for _, want := range []string{`alineo_sandboxd_sandboxes{state="Running"} 1`, `alineo_sandboxd_create_duration_seconds_count{result="ok"} 1`,
		`alineo_sandboxd_image_pulls_total{result="ok"} 0`, `alineo_sandboxd_snapshot_bytes_total{direction="written",store="file"} 0`} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
	testenv.PromtoolCheck(t, body)

	if err := os.Chmod(rt, 0o644); err != nil {
		t.Fatal(err)
	}
	code, hb := get("/healthz")
	if err := os.Chmod(rt, 0o755); err != nil { // the sandbox's shutdown needs it
		t.Fatal(err)
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(hb, "runtime") || !strings.Contains(hb, rt) {
		t.Errorf("/healthz with the runtime not executable = %d %s, want 503 naming it", code, hb)
	}
	if code, hb := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with the runtime back = %d %s, want 200", code, hb)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not return after cancel:\n%s", out)
	}
}
