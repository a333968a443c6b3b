package sandboxd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

func TestIsolation(t *testing.T) {
	s, base := startServer(t, sandboxd.Config{})
	secret := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := create(t, base, map[string]any{"entrypoint": []string{"sleep", "4242"}})
	b := create(t, base, nil)
	waitState(t, base, a, sandboxd.StateRunning)
	waitState(t, base, b, sandboxd.StateRunning)
	au, atok := execdEndpoint(t, base, a, false)
	bu, btok := execdEndpoint(t, base, b, false)

	t.Run("host file", func(t *testing.T) {
		for _, p := range []string{secret, filepath.Join(s.DataDir(), "sandboxes", a, "sandbox.json")} {
			lines, code := run(t, au, atok, "cat "+p+" 2>/dev/null; test -e "+p)
			if code == 0 || len(lines) != 0 {
				t.Errorf("sandbox read %s: %q (exit %d)", p, lines, code)
			}
		}
	})
	t.Run("host secrets in the fallback", func(t *testing.T) {
		// Sandbox root is host root here: the host's /etc is laid out with
		// what other host users may not read hidden, the rest as it is.
		if os.Geteuid() != 0 {
			t.Skip("sandboxd not running as root: sandbox root is an unprivileged host user")
		}
		var hidden []string
		for _, p := range []string{"/etc/shadow", "/etc/gshadow", "/etc/ssl/private"} {
			if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o004 == 0 {
				hidden = append(hidden, p)
			}
		}
		if len(hidden) == 0 {
			t.Skip("no unreadable file in this host's /etc to check")
		}
		for _, p := range hidden {
			if lines, code := run(t, au, atok, "ls -d "+p+" 2>/dev/null; cat "+p+" 2>/dev/null; test -e "+p); code == 0 || len(lines) != 0 {
				t.Errorf("sandbox sees %s: %q (exit %d)", p, lines, code)
			}
		}
		st, err := os.Stat(filepath.Dir(hidden[0]))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%o", st.Mode().Perm())
		lines, code := run(t, au, atok, "head -c 5 /etc/passwd; echo; stat -c %a "+filepath.Dir(hidden[0]))
		if code != 0 || len(lines) != 2 || lines[0] != "root:" || lines[1] != want {
			t.Errorf("readable /etc: %q (exit %d), want [root: %s]", lines, code, want)
		}
	})
	t.Run("other sandbox tmp", func(t *testing.T) {
		if _, code := run(t, au, atok, "echo mine > /tmp/a-only"); code != 0 {
			t.Fatalf("write /tmp: exit %d", code)
		}
		lines, code := run(t, bu, btok, "ls -a /tmp; cat /tmp/a-only 2>/dev/null")
		if code == 0 || strings.Contains(strings.Join(lines, " "), "a-only") {
			t.Errorf("sandbox b sees a's /tmp: %q (exit %d)", lines, code)
		}
	})
	t.Run("tmp in the host fallback", func(t *testing.T) {
		// /tmp is a sticky, world-writable directory of the sandbox's own
		// upper layer (the host fallback's skeleton is the read-only lower
		// layer): an unprivileged user writes there, the file is not in the
		// host's /tmp, and another user cannot remove it.
		if _, err := exec.LookPath("setpriv"); err != nil {
			t.Skip("no setpriv in the host fallback image")
		}
		name := "alineo-sandboxd-tmp-" + b
		const nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups "
		lines, code := run(t, bu, btok, "stat -c %a /tmp && "+nobody+"sh -c 'echo n > /tmp/"+name+"' && stat -c %u /tmp/"+name+
			" && { setpriv --reuid=65533 --regid=65533 --clear-groups rm -f /tmp/"+name+" 2>/dev/null || echo sticky; }")
		if got, want := strings.Join(lines, " "), "1777 65534 sticky"; code != 0 || got != want {
			t.Fatalf("unprivileged write to /tmp: %q exit %d, want %q", got, code, want)
		}
		if _, err := os.Stat(filepath.Join(os.TempDir(), name)); err == nil {
			t.Error("a write to the sandbox's /tmp reached the host's /tmp")
		}
		if _, err := os.Stat(filepath.Join(s.DataDir(), "sandboxes", b, "fs", "layers", "upper", "tmp", name)); err != nil {
			t.Errorf("the sandbox's /tmp file is not in its upper layer: %v", err)
		}
		if lines, _ := run(t, au, atok, "ls /tmp/"+name+" 2>/dev/null"); len(lines) != 0 {
			t.Errorf("sandbox a sees b's /tmp file: %q", lines)
		}
	})
	t.Run("processes", func(t *testing.T) {
		const ps = `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done`
		la, _ := run(t, au, atok, ps)
		lb, _ := run(t, bu, btok, ps)
		if !strings.Contains(strings.Join(la, "\n"), "sleep 4242") {
			t.Errorf("sandbox a does not see its entrypoint: %q", la)
		}
		if strings.Contains(strings.Join(lb, "\n"), "4242") {
			t.Errorf("sandbox b sees a's processes: %q", lb)
		}
		if len(lb) > 10 {
			t.Errorf("sandbox b sees %d processes, want only its own few: %q", len(lb), lb)
		}
	})
	t.Run("pid 1 and hostname", func(t *testing.T) {
		lines, _ := run(t, bu, btok, `tr '\0' ' ' < /proc/1/cmdline; echo; hostname; echo $$`)
		if len(lines) < 2 || !strings.HasPrefix(lines[0], "sandboxd-init "+b) || lines[1] != b[:12] {
			t.Errorf("pid 1 / hostname = %q, want sandboxd-init and %s", lines, b[:12])
		}
	})
	t.Run("terminal", func(t *testing.T) {
		if _, err := exec.LookPath("python3"); err != nil {
			t.Skip("no python3 in the host fallback image")
		}
		lines, code := run(t, bu, btok, `python3 -c "import os, pty; m, s = pty.openpty(); print(os.ttyname(s))"; ls /dev/pts`)
		if code != 0 || len(lines) < 1 || lines[0] != "/dev/pts/0" {
			t.Errorf("openpty in the sandbox: %q exit %d, want /dev/pts/0 (a private devpts)", lines, code)
		}
	})
	t.Run("overlay root", func(t *testing.T) {
		name := "alineo-sandboxd-test-" + b
		lines, code := run(t, bu, btok, "touch /usr/"+name+" && echo ok")
		if code != 0 || strings.Join(lines, "") != "ok" {
			t.Fatalf("write to /usr in the sandbox: %q exit %d", lines, code)
		}
		if _, err := os.Stat("/usr/" + name); err == nil {
			os.Remove("/usr/" + name)
			t.Error("a write to the sandbox's /usr reached the host")
		}
		if lines, _ := run(t, au, atok, "ls /usr/"+name+" 2>/dev/null"); len(lines) != 0 {
			t.Errorf("sandbox a sees b's write: %q", lines)
		}
	})
}

// counter reads the value a sandbox's counter loop wrote into its upper layer.
func counter(t testing.TB, dataDir, id string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "sandboxes", id, "fs", "layers", "upper", "root", "counter"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

func TestPauseFreezes(t *testing.T) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	// runc under a name sandboxd does not know pauses through its command.
	other := filepath.Join(t.TempDir(), "oci-runtime")
	if err := os.Symlink(runc, other); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  sandboxd.Config
	}{
		// runc's pause: its cgroup freezer, written by sandboxd.
		{"freezer", sandboxd.Config{}},
		// The runtime's pause and resume commands.
		{"runtime", sandboxd.Config{Runtime: other}},
	} {
		t.Run(c.name, func(t *testing.T) {
			testPauseFreezes(t, c.cfg)
		})
	}
}

func testPauseFreezes(t *testing.T, cfg sandboxd.Config) {
	s, base := startServer(t, cfg)
	loop := `i=0; while :; do i=$((i+1)); echo $i > /root/counter.tmp; mv /root/counter.tmp /root/counter; sleep 0.01; done`
	id := create(t, base, map[string]any{"entrypoint": []string{"sh", "-c", loop}})
	waitState(t, base, id, sandboxd.StateRunning)
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := counter(t, s.DataDir(), id); n < 3 {
			return fmt.Errorf("counter = %d, want it running", n)
		}
		return nil
	})
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/pause", nil), http.StatusAccepted)
	waitState(t, base, id, sandboxd.StatePaused)
	if got := runtimeStatus(t, s.DataDir(), id); got != "paused" {
		t.Errorf("runc state of the paused sandbox = %q, want paused", got)
	}
	frozen := counter(t, s.DataDir(), id)
	// Asserting that nothing happens takes waiting: the loop ticks every 10 ms.
	time.Sleep(300 * time.Millisecond)
	if got := counter(t, s.DataDir(), id); got != frozen {
		t.Fatalf("counter advanced while paused: %d → %d", frozen, got)
	}
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/resume", nil), http.StatusAccepted)
	waitState(t, base, id, sandboxd.StateRunning)
	if got := runtimeStatus(t, s.DataDir(), id); got != "running" {
		t.Errorf("runc state of the resumed sandbox = %q, want running", got)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := counter(t, s.DataDir(), id); n <= frozen+2 {
			return fmt.Errorf("counter = %d, want it past %d after resume", n, frozen)
		}
		return nil
	})
	// A paused sandbox can be deleted (it is thawed to be killed).
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/pause", nil), http.StatusAccepted)
	waitState(t, base, id, sandboxd.StatePaused)
	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+id, nil), http.StatusNoContent)
	wantStatus(t, call(t, "GET", base+"/v1/sandboxes/"+id, nil), http.StatusNotFound)
	assertNoProcesses(t, id)
}

// runtimeStatus is runc's own view of sandbox id: its state command's status.
func runtimeStatus(t testing.TB, dataDir, id string) string {
	t.Helper()
	out, err := exec.Command("runc", "--root", filepath.Join(dataDir, "run", "runtime"), "state", id).Output()
	if err != nil {
		t.Fatalf("runc state %s: %v", id, err)
	}
	var st struct{ Status string }
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("runc state %s: %v: %s", id, err, out)
	}
	return st.Status
}

// assertNoProcesses fails t if any process of sandbox id is left on the host.
func assertNoProcesses(t testing.TB, ids ...string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, func() error {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err != nil {
				continue
			}
			for _, id := range ids {
				if strings.Contains(string(b), id) {
					return fmt.Errorf("process %s of sandbox %s still runs: %q", e.Name(), id, b)
				}
			}
		}
		return nil
	})
}

func TestParallelSandboxes(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	const n = 20
	ids := make([]string, n)
	t.Run("group", func(t *testing.T) {
		for i := range n {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				id := create(t, base, map[string]any{"env": map[string]string{"N": strconv.Itoa(i)}})
				ids[i] = id
				waitState(t, base, id, sandboxd.StateRunning)
				u, tok := execdEndpoint(t, base, id, false)
				lines, code := run(t, u, tok, `echo "$N" > /tmp/n; cat /tmp/n; hostname`)
				if want := strconv.Itoa(i) + "|" + id[:12]; code != 0 || strings.Join(lines, "|") != want {
					t.Errorf("sandbox %d: %q exit %d, want %s", i, lines, code, want)
				}
				wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+id, nil), http.StatusNoContent)
			})
		}
	})
	assertNoProcesses(t, ids...)
}

func TestRestartKeepsRecords(t *testing.T) {
	dir := t.TempDir()
	s1, err := sandboxd.Open(context.Background(), sandboxd.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	base1, err := s1.Start(context.Background())
	if err != nil {
		s1.Close(context.Background())
		t.Skip(err)
	}
	live := create(t, base1, map[string]any{"metadata": map[string]string{"k": "v"}, "timeout": 600})
	failed := create(t, base1, map[string]any{"entrypoint": []string{"false"}})
	waitState(t, base1, live, sandboxd.StateRunning)
	waitState(t, base1, failed, sandboxd.StateFailed)
	before := getSandbox(t, base1, live)
	if err := s1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertNoProcesses(t, live)

	// A crash instead of a clean Close is TestServerCrash.
	_, base2 := startServer(t, sandboxd.Config{DataDir: dir})
	sb := getSandbox(t, base2, live)
	if sb.Status.State != sandboxd.StateTerminated || sb.Status.Reason != "sandboxd_shutdown" {
		t.Errorf("after a restart: %+v, want Terminated/sandboxd_shutdown", sb.Status)
	}
	if sb.Metadata["k"] != "v" || !sb.CreatedAt.Equal(before.CreatedAt) || sb.ExpiresAt == nil || !sb.ExpiresAt.Equal(*before.ExpiresAt) {
		t.Errorf("after a restart: %+v, want the record of %+v", sb, before)
	}
	if st := getSandbox(t, base2, failed).Status; st.State != sandboxd.StateFailed || st.Reason != "entrypoint_exited" {
		t.Errorf("failed sandbox after restart: %+v", st)
	}
	id := create(t, base2, nil)
	waitState(t, base2, id, sandboxd.StateRunning)
	r := call(t, "GET", base2+"/v1/sandboxes", nil)
	var page struct{ Items []sandboxd.Sandbox }
	r.decode(t, &page)
	if len(page.Items) != 3 || page.Items[2].ID != id {
		t.Errorf("list after restart = %d items, want the 2 old then the new one", len(page.Items))
	}
}

func TestCloseKillsEverySandbox(t *testing.T) {
	s, err := sandboxd.Open(context.Background(), sandboxd.Config{})
	if err != nil {
		t.Fatal(err)
	}
	base, err := s.Start(context.Background())
	if err != nil {
		s.Close(context.Background())
		t.Skip(err)
	}
	var ids []string
	for range 3 {
		ids = append(ids, create(t, base, map[string]any{"entrypoint": []string{"sh", "-c", "sleep 1000 & sleep 1000"}}))
	}
	for _, id := range ids {
		waitState(t, base, id, sandboxd.StateRunning)
	}
	paused := ids[0]
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+paused+"/pause", nil), http.StatusAccepted)
	waitState(t, base, paused, sandboxd.StatePaused)
	dir := s.DataDir()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertNoProcesses(t, ids...)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("temporary data dir %s left behind (%v)", dir, err)
	}
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/freezer/alineo-sandboxd", id)); err == nil {
			t.Errorf("cgroup of %s left behind", id)
		}
	}
	if _, err := http.Get(base + "/health"); err == nil {
		t.Error("server still answers after Close")
	}
}

func TestNoIsolation(t *testing.T) {
	s, base := startServer(t, sandboxd.Config{NoIsolation: true})
	id := create(t, base, map[string]any{"entrypoint": []string{"sleep", "4343"}})
	waitState(t, base, id, sandboxd.StateRunning)
	u, tok := execdEndpoint(t, base, id, false)
	lines, code := run(t, u, tok, "pwd; echo hi")
	if want := filepath.Join(s.DataDir(), "sandboxes", id, "root") + "|hi"; code != 0 || strings.Join(lines, "|") != want {
		t.Errorf("no-isolation command: %q exit %d, want %s", lines, code, want)
	}
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/pause", nil), http.StatusAccepted)
	waitState(t, base, id, sandboxd.StatePaused)
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/resume", nil), http.StatusAccepted)
	waitState(t, base, id, sandboxd.StateRunning)
	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+id, nil), http.StatusNoContent)
	assertNoProcesses(t, id)
	testenv.Eventually(t, 5*time.Second, func() error {
		b, _ := os.ReadFile("/proc/self/status")
		_ = b
		out, _ := os.ReadDir("/proc")
		for _, e := range out {
			c, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if strings.Contains(string(c), "sleep\x004343") {
				return fmt.Errorf("entrypoint %s still runs", e.Name())
			}
		}
		return nil
	})
}

func TestResourceLimits(t *testing.T) {
	const root = "/sys/fs/cgroup"
	if _, err := os.Stat(root + "/memory/cgroup.procs"); err != nil {
		testenv.SkipOrFail(t, "no cgroup v1 memory controller at "+root)
	}
	_, base := startServer(t, sandboxd.Config{})
	id := create(t, base, map[string]any{"resourceLimits": map[string]string{"cpu": "250m", "memory": "96Mi"}})
	waitState(t, base, id, sandboxd.StateRunning)
	for file, want := range map[string]string{
		"memory/alineo-sandboxd/" + id + "/memory.limit_in_bytes": strconv.Itoa(96 << 20),
		"cpu/alineo-sandboxd/" + id + "/cpu.cfs_quota_us":         "25000",
		"cpu/alineo-sandboxd/" + id + "/cpu.cfs_period_us":        "100000",
		"pids/alineo-sandboxd/" + id + "/pids.max":                "1024",
	} {
		b, err := os.ReadFile(filepath.Join(root, file))
		if got := strings.TrimSpace(string(b)); err != nil || got != want {
			t.Errorf("%s = %q (%v), want %s", file, got, err, want)
		}
	}
	u, tok := execdEndpoint(t, base, id, false)
	lines, _ := run(t, u, tok, "cat /proc/self/cgroup")
	if got := strings.Join(lines, "\n"); !strings.Contains(got, "memory:/alineo-sandboxd/"+id) || !strings.Contains(got, "freezer:/alineo-sandboxd/"+id) {
		t.Errorf("a command's cgroups = %q, want the sandbox's", got)
	}
	// Holding 200 MB in a shell variable exceeds the 96Mi limit.
	if _, code := run(t, u, tok, `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo ${#x}`); code == 0 {
		t.Error("a command used 200 MB under a 96Mi memory limit")
	}
	if lines, code := run(t, u, tok, "echo alive"); code != 0 || strings.Join(lines, "") != "alive" {
		t.Errorf("after the OOM kill: %q exit %d, want execd alive", lines, code)
	}
	// resourceLimits without memory get Config.DefaultMemory.
	_, base2 := startServer(t, sandboxd.Config{DefaultMemory: 80 << 20})
	id2 := create(t, base2, map[string]any{"resourceLimits": map[string]string{"cpu": "250m"}})
	file := filepath.Join(root, "memory/alineo-sandboxd/"+id2+"/memory.limit_in_bytes")
	if b, err := os.ReadFile(file); strings.TrimSpace(string(b)) != strconv.Itoa(80<<20) {
		t.Errorf("default memory limit = %q (%v), want %d", b, err, 80<<20)
	}
}

// TestServerCrash kills a server process outright: its sandboxes, even a
// paused one, must not outlive it (after the next start on the same data
// directory at the latest), and come back Terminated.
func TestServerCrash(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serverEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read the server's URL: %v", err)
	}
	base := strings.TrimSpace(line)
	running := create(t, base, map[string]any{"entrypoint": []string{"sleep", "4545"}})
	paused := create(t, base, map[string]any{"entrypoint": []string{"sleep", "4646"}})
	waitState(t, base, running, sandboxd.StateRunning)
	waitState(t, base, paused, sandboxd.StateRunning)
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+paused+"/pause", nil), http.StatusAccepted)
	waitState(t, base, paused, sandboxd.StatePaused)

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// The running sandbox's init sees its control pipe close and exits.
	assertNoProcesses(t, running)

	_, base2 := startServer(t, sandboxd.Config{DataDir: dir})
	assertNoProcesses(t, paused)
	for _, id := range []string{running, paused} {
		if st := getSandbox(t, base2, id).Status; st.State != sandboxd.StateTerminated || st.Reason != "sandboxd_restart" {
			t.Errorf("%s after the crash: %+v, want Terminated/sandboxd_restart", id, st)
		}
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/freezer/alineo-sandboxd", id)); err == nil {
			t.Errorf("cgroup of %s left behind", id)
		}
	}
	// Nor its mounts, disks, network namespaces or runtime state.
	assertNoLeftovers(t, dir, []string{running, paused})
}

func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	startServer(t, sandboxd.Config{DataDir: dir})
	if _, err := sandboxd.Open(context.Background(), sandboxd.Config{DataDir: dir}); !errors.Is(err, sandboxd.ErrDataDirInUse) {
		t.Fatalf("second server on %s: err = %v, want ErrDataDirInUse", dir, err)
	}
}

// TestNoIsolationEntrypointExitKillsTree checks that, without namespaces and
// cgroups, a sandbox whose entrypoint exits leaves no background process.
func TestNoIsolationEntrypointExitKillsTree(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{NoIsolation: true})
	id := create(t, base, map[string]any{"entrypoint": []string{"sh", "-c", "sleep 2"}})
	waitState(t, base, id, sandboxd.StateRunning)
	u, tok := execdEndpoint(t, base, id, false)
	marker := strconv.Itoa(474700000 + int(time.Now().UnixNano()%100000))
	if _, code := run(t, u, tok, "setsid sleep "+marker+" >/dev/null 2>&1 & echo started"); code != 0 {
		t.Fatalf("start background sleep: exit %d", code)
	}
	running := func() error {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			c, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if strings.Contains(string(c), "sleep\x00"+marker) {
				return fmt.Errorf("background process %s outlived its sandbox", e.Name())
			}
		}
		return nil
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if running() == nil {
			return errors.New("the background sleep is not running")
		}
		return nil
	})
	waitState(t, base, id, sandboxd.StateFailed)
	testenv.Eventually(t, 5*time.Second, running)
}

// TestRacingOperations deletes sandboxes right after create, and pauses,
// resumes and deletes at once: every sandbox is gone (404) with nothing left
// running.
func TestRacingOperations(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	var ids []string
	for range 3 {
		id := create(t, base, nil)
		ids = append(ids, id)
		wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+id, nil), http.StatusNoContent)
		wantStatus(t, call(t, "GET", base+"/v1/sandboxes/"+id, nil), http.StatusNotFound)
	}
	for range 3 {
		id := create(t, base, nil)
		ids = append(ids, id)
		waitState(t, base, id, sandboxd.StateRunning)
		var wg sync.WaitGroup
		for _, op := range []string{"pause", "resume", "pause", "resume"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				call(t, "POST", base+"/v1/sandboxes/"+id+"/"+op, nil)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			call(t, "DELETE", base+"/v1/sandboxes/"+id, nil)
		}()
		wg.Wait()
		wantStatus(t, call(t, "GET", base+"/v1/sandboxes/"+id, nil), http.StatusNotFound)
	}
	assertNoProcesses(t, ids...)
}

func TestIsolationRefused(t *testing.T) {
	// No OCI runtime: Start fails at once, naming the package to install.
	missing := sandboxd.Config{Runtime: filepath.Join(t.TempDir(), "runc")}
	s, err := sandboxd.Open(context.Background(), missing)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	_, err = s.Start(context.Background())
	if !errors.Is(err, sandboxd.ErrIsolationUnavailable) || !strings.Contains(err.Error(), "--no-isolation") || !strings.Contains(err.Error(), "apt-get install runc") {
		t.Fatalf("Start = %v, want ErrIsolationUnavailable naming --no-isolation and the runc package", err)
	}
	// The handler without Start fails the sandbox with the same reason.
	s2, err := sandboxd.Open(context.Background(), missing)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	srv := httptest.NewServer(s2)
	defer srv.Close()
	id := create(t, srv.URL, nil)
	sb := waitState(t, srv.URL, id, sandboxd.StateFailed)
	if !strings.Contains(sb.Status.Message, "isolation unavailable") {
		t.Errorf("status = %+v, want the isolation error", sb.Status)
	}
}

// TestCPULimitNotChargedWithStart: a sandbox's start (runc's init compiling
// the seccomp profile, the sandbox init and execd starting: about 60 ms of
// CPU in its cgroup) is not paid out of its CPU quota, which under 50m took
// a dozen 100 ms periods, over a second, before it answered; its commands
// are held to the quota.
func TestCPULimitNotChargedWithStart(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	id := create(t, base, map[string]any{"resourceLimits": map[string]string{"cpu": "50m", "memory": "256Mi"}})
	waitState(t, base, id, sandboxd.StateRunning)
	stat := filepath.Join("/sys/fs/cgroup/cpu/alineo-sandboxd", id, "cpu.stat") // v1 (hybrid)
	if _, err := os.Stat(stat); err != nil {
		stat = filepath.Join("/sys/fs/cgroup/alineo-sandboxd", id, "cpu.stat") // v2
	}
	throttled := func() int {
		t.Helper()
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatalf("the sandbox's CPU statistics: %v", err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "nr_throttled "); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		t.Fatalf("no nr_throttled in %s: %q", stat, b)
		return 0
	}
	// What execd still does of its start after the grace fits in a period
	// or two of 5 ms.
	if n := throttled(); n > 2 {
		t.Errorf("throttled %d times by the time the sandbox ran, want at most 2: its start was charged to its quota", n)
	}
	before := throttled()
	u, tok := execdEndpoint(t, base, id, false)
	if _, code := run(t, u, tok, "timeout 1 sh -c 'while :; do :; done'"); code != 124 {
		t.Fatalf("the busy loop ended with %d, want timeout's 124", code)
	}
	if n := throttled() - before; n < 5 {
		t.Errorf("a second of busy loop under 50m was throttled %d times, want about 10: the quota is not applied", n)
	}
}
