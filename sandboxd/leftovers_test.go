package sandboxd_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// flakyRuntime writes an OCI runtime wrapper around the real runc: of every
// three runs, one is refused with a message, one is SIGKILLed 50 ms into the
// create, one runs. It returns the wrapper's path and that of the file it
// appends each refused container's id to.
func flakyRuntime(t *testing.T) (path, refusedLog string) {
	t.Helper()
	runc, err := exec.LookPath("runc")
	if err != nil {
		testenv.SkipOrFail(t, "runc not installed (apt-get install runc)")
	}
	dir := t.TempDir()
	script := fmt.Sprintf(`#!/bin/sh
case " $* " in
*" run "*)
  n=$(cat %[1]s/n 2>/dev/null || echo 0); echo $((n+1)) > %[1]s/n
  case $((n %% 3)) in
  1) for a; do id=$a; done; echo "$id" >> %[1]s/refused
     echo "flaky-runc: spec refused" >&2; exit 1;;
  2) %[2]s "$@" & pid=$!; sleep 0.05; kill -9 $pid; exit 137;;
  esac;;
esac
exec %[2]s "$@"
`, dir, runc)
	p := filepath.Join(dir, "flaky-runc")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p, filepath.Join(dir, "refused")
}

// TestRuntimeFailuresLeaveNothing: after 50 create/delete cycles, a third of
// them refused by the runtime and a third crashing mid-create, no mount,
// cgroup, network namespace, bundle, runtime state, loop device or process of
// any sandbox remains; every refused create reads Failed with the runtime's
// message (not the broken pipe its init's configuration met: found by make
// test-race-stress), and none waits out the start timeout for a pid file a
// killed runtime never writes.
func TestRuntimeFailuresLeaveNothing(t *testing.T) {
	rt, refusedLog := flakyRuntime(t)
	s, base := startServer(t, sandboxd.Config{Runtime: rt, StartupGrace: -1})
	var ids []string
	messages := map[string]string{}
	for i := range 50 {
		req := map[string]any{}
		if i%2 == 0 {
			req["networkPolicy"] = map[string]any{"defaultAction": "deny"}
		}
		id := create(t, base, req)
		ids = append(ids, id)
		var sb sandboxd.Sandbox
		testenv.Eventually(t, 20*time.Second, func() error {
			sb = getSandbox(t, base, id)
			if st := sb.Status.State; st != sandboxd.StateRunning && st != sandboxd.StateFailed {
				return fmt.Errorf("state %s", st)
			}
			return nil
		})
		if sb.Status.State == sandboxd.StateFailed {
			messages[id] = sb.Status.Message
			if sb.Status.Reason == sandboxd.ReasonProvisionTimout {
				t.Errorf("sandbox %d waited out the start timeout: %s", i, sb.Status.Message)
			}
		}
		wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+id, nil), http.StatusNoContent)
		testenv.Eventually(t, 20*time.Second, func() error {
			r := call(t, "GET", base+"/v1/sandboxes/"+id, nil)
			if r.Status == http.StatusNotFound {
				return nil
			}
			var sb sandboxd.Sandbox
			r.decode(t, &sb)
			if !sb.Status.State.Final() {
				return fmt.Errorf("state %s", sb.Status.State)
			}
			return nil
		})
	}
	b, err := os.ReadFile(refusedLog)
	if err != nil {
		t.Fatalf("no run was refused: %v", err)
	}
	refused := strings.Fields(string(b))
	for _, id := range refused {
		if msg, ok := messages[id]; !ok || !strings.Contains(msg, "flaky-runc: spec refused") {
			t.Errorf("refused sandbox %s: message %q, want the runtime's", id, msg)
		}
	}
	if len(refused) < 5 {
		t.Errorf("%d of 50 runs refused, want about 16", len(refused))
	}
	assertNoProcesses(t, ids...)
	assertNoLeftovers(t, s.DataDir(), ids)
}

// assertNoLeftovers fails t if anything of the sandboxes ids remains on the
// host.
func assertNoLeftovers(t *testing.T, dataDir string, ids []string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		for _, l := range strings.Split(string(mi), "\n") {
			for _, id := range ids {
				if strings.Contains(l, id) {
					return fmt.Errorf("mount left: %s", l)
				}
			}
		}
		for _, id := range ids {
			for _, p := range []string{
				filepath.Join(dataDir, "sandboxes", id, "bundle"),
				filepath.Join(dataDir, "sandboxes", id, "disk.img"),
				filepath.Join(dataDir, "run", "runtime", id),
			} {
				if _, err := os.Stat(p); err == nil {
					return fmt.Errorf("%s left", p)
				}
			}
			cg, _ := filepath.Glob("/sys/fs/cgroup/*/alineo-sandboxd/" + id)
			cg2, _ := filepath.Glob("/sys/fs/cgroup/alineo-sandboxd/" + id)
			if len(cg)+len(cg2) > 0 {
				return fmt.Errorf("cgroups left: %q", append(cg, cg2...))
			}
		}
		loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, l := range loops {
			if b, _ := os.ReadFile(l); strings.Contains(string(b), dataDir) {
				return fmt.Errorf("loop device left: %s → %s", l, b)
			}
		}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.HasPrefix(string(b), "runc\x00init") {
				return fmt.Errorf("a runc init process is left: pid %s", e.Name())
			}
		}
		return nil
	})
}

// TestRuntimeMissingAfterStart: a runtime binary gone by the time of a
// create fails that sandbox with the error, and leaves nothing.
func TestRuntimeMissingAfterStart(t *testing.T) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		testenv.SkipOrFail(t, "runc not installed (apt-get install runc)")
	}
	p := filepath.Join(t.TempDir(), "runc")
	if err := os.Symlink(runc, p); err != nil {
		t.Fatal(err)
	}
	s, base := startServer(t, sandboxd.Config{Runtime: p})
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	id := create(t, base, nil)
	sb := waitState(t, base, id, sandboxd.StateFailed)
	if !strings.Contains(sb.Status.Message, "no such file") {
		t.Errorf("status = %+v, want the runtime's error", sb.Status)
	}
	assertNoLeftovers(t, s.DataDir(), []string{id})
}
