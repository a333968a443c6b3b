package sandboxd_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// sh runs script in a sandbox and returns its output (lines joined with \n)
// and exit code.
func shOut(t testing.TB, execdURL, token, script string) (string, int) {
	t.Helper()
	lines, code := run(t, execdURL, token, script)
	return strings.Join(lines, "\n"), code
}

// TestHardening checks Docker's default hardening point by point, from
// inside a sandbox.
func TestHardening(t *testing.T) {
	s, base := startServer(t, sandboxd.Config{})
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)
	u, tok := execdEndpoint(t, base, id, false)

	t.Run("uid map", func(t *testing.T) {
		out, _ := shOut(t, u, tok, "cat /proc/self/uid_map /proc/self/gid_map")
		want := fmt.Sprintf("0 %d %d", sandboxd.IDMapHost, sandboxd.IDMapSize)
		for _, l := range strings.Split(out, "\n") {
			if got := strings.Join(strings.Fields(l), " "); got != want {
				t.Errorf("id map line %q, want %q (not the identity)", l, want)
			}
		}
	})
	t.Run("sysctl", func(t *testing.T) {
		const p = "/proc/sys/kernel/printk_ratelimit"
		before, err := os.ReadFile(p)
		if err != nil {
			t.Skip(err)
		}
		out, code := shOut(t, u, tok, "echo 9 > "+p)
		if code == 0 {
			t.Errorf("sysctl write succeeded: %q", out)
		}
		for _, q := range []string{p, "/proc/sys/kernel/core_pattern"} {
			if out, code := shOut(t, u, tok, "echo x > "+q); code == 0 {
				t.Errorf("write to %s succeeded: %q", q, out)
			}
		}
		if after, _ := os.ReadFile(p); string(after) != string(before) {
			t.Errorf("host %s changed: %q → %q", p, before, after)
		}
	})
	t.Run("file owner on the host", func(t *testing.T) {
		shOut(t, u, tok, "echo x > /root/owned && id -u")
		p := filepath.Join(s.DataDir(), "sandboxes", id, "fs", "layers", "upper", "root", "owned")
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if sys.Uid != sandboxd.IDMapHost || sys.Gid != sandboxd.IDMapHost {
			t.Errorf("file created inside is owned by %d:%d on the host, want %d", sys.Uid, sys.Gid, sandboxd.IDMapHost)
		}
	})
	t.Run("refused syscalls", func(t *testing.T) {
		// perl's syscall() reaches the raw numbers (x86_64) without tools
		// the image may lack; each must fail.
		self := strconv.Itoa(os.Getpid())
		for name, script := range map[string]string{
			"mount":        "mount -t tmpfs none /mnt",
			"unshare":      "unshare -m true",
			"unshare user": "unshare -U true",
			"keyctl":       `perl -e 'exit(syscall(250, 0, -3) == -1 ? 1 : 0)'`, // KEYCTL_GET_KEYRING_ID of the user keyring
			"add_key":      `perl -e 'exit(syscall(248, "user", "k", "v", 1, -4) == -1 ? 1 : 0)'`,
			"bpf":          `perl -e 'exit(syscall(321, 0, 0, 0) == -1 ? 1 : 0)'`,
			"ptrace host":  `perl -e 'exit(syscall(101, 16, ` + self + `, 0, 0) == -1 ? 1 : 0)'`, // PTRACE_ATTACH to the server
		} {
			if _, err := os.Stat("/usr/bin/perl"); err != nil && strings.HasPrefix(script, "perl") {
				continue
			}
			if out, code := shOut(t, u, tok, script+" 2>&1"); code == 0 {
				t.Errorf("%s succeeded in a sandbox: %q", name, out)
			}
		}
	})
	t.Run("masked paths", func(t *testing.T) {
		out, _ := shOut(t, u, tok, "cat /proc/keys /proc/kcore /proc/timer_list 2>/dev/null | wc -c; ls /sys/firmware | wc -l")
		if out != "0\n0" {
			t.Errorf("masked paths show %q, want nothing", out)
		}
	})
	t.Run("capabilities", func(t *testing.T) {
		out, _ := shOut(t, u, tok, "grep -E 'CapEff|NoNewPrivs|Seccomp:' /proc/self/status")
		if !strings.Contains(out, "CapEff:\t00000000a80425fb") {
			t.Errorf("effective capabilities = %q, want Docker's default set (a80425fb)", out)
		}
		if !strings.Contains(out, "NoNewPrivs:\t1") || !strings.Contains(out, "Seccomp:\t2") {
			t.Errorf("status = %q, want no_new_privs and a seccomp filter", out)
		}
	})
	t.Run("shm size", func(t *testing.T) {
		out, code := shOut(t, u, tok, "dd if=/dev/zero of=/dev/shm/fill bs=1M count=100 2>&1; r=$?; rm -f /dev/shm/fill; exit $r")
		if code == 0 || !strings.Contains(out, "No space left") {
			t.Errorf("100 MB into /dev/shm: %q exit %d, want ENOSPC at 64 MiB", out, code)
		}
	})
}

// TestHostKeyringHidden: a key in the host's session keyring is invisible in
// a sandbox (/proc/keys is masked and keyctl refused).
func TestHostKeyringHidden(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)
	u, tok := execdEndpoint(t, base, id, false)
	// add_key(2) into the host process's session keyring.
	desc := "alineo-test-" + strconv.Itoa(os.Getpid())
	typ, _ := syscall.BytePtrFromString("user")
	d, _ := syscall.BytePtrFromString(desc)
	payload := []byte("secret")
	keySpecSessionKeyring := -3
	if _, _, errno := syscall.Syscall6(248, uintptr(unsafe.Pointer(typ)), uintptr(unsafe.Pointer(d)), uintptr(unsafe.Pointer(&payload[0])), uintptr(len(payload)), uintptr(keySpecSessionKeyring), 0); errno != 0 {
		t.Skipf("add_key on the host: %v", errno)
	}
	if b, _ := os.ReadFile("/proc/keys"); !strings.Contains(string(b), desc) {
		t.Skip("the host's /proc/keys does not show the test key")
	}
	if out, _ := shOut(t, u, tok, "cat /proc/keys 2>&1; echo end"); strings.Contains(out, desc) {
		t.Errorf("the host's key is visible in the sandbox: %q", out)
	}
}

// TestForkBomb: a bounded fork bomb hits the pids limit; the sandbox and its
// neighbour keep answering.
func TestForkBomb(t *testing.T) {
	// The init and execd hold about 40 threads (16 spare each): 128 leaves
	// the shell some 80 processes before the limit.
	_, base := startServer(t, sandboxd.Config{MaxProcesses: 128})
	a, b := create(t, base, nil), create(t, base, nil)
	waitState(t, base, a, sandboxd.StateRunning)
	waitState(t, base, b, sandboxd.StateRunning)
	au, atok := execdEndpoint(t, base, a, false)
	bu, btok := execdEndpoint(t, base, b, false)
	out, _ := shOut(t, au, atok, `n=0; for i in $(seq 300); do sleep 5 & n=$((n+1)); done 2>&1 | grep -c -i 'resource temporarily unavailable\|cannot fork' ; kill $(jobs -p) 2>/dev/null; true`)
	if n, _ := strconv.Atoi(strings.TrimSpace(out)); n == 0 {
		t.Errorf("300 processes under a pids limit of 128: %q fork failures, want some", out)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if out, code := shOut(t, au, atok, "echo alive"); code != 0 || out != "alive" {
			return fmt.Errorf("sandbox after the bomb: %q exit %d", out, code)
		}
		return nil
	})
	if out, code := shOut(t, bu, btok, "echo neighbour"); code != 0 || out != "neighbour" {
		t.Errorf("neighbour: %q exit %d", out, code)
	}
	if st := getSandbox(t, base, a).Status.State; st != sandboxd.StateRunning {
		t.Errorf("state after the bomb = %s, want Running", st)
	}
}

// TestMemoryBomb: at its memory limit a sandbox loses the command that
// allocates, never its init or execd; it stays Running.
func TestMemoryBomb(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	id := create(t, base, map[string]any{"resourceLimits": map[string]string{"memory": "128Mi"}})
	waitState(t, base, id, sandboxd.StateRunning)
	u, tok := execdEndpoint(t, base, id, false)
	// Many small allocators, each smaller than execd: the OOM killer must
	// still pick them (their oom_score_adj), not execd.
	out, code := shOut(t, u, tok, `for i in 1 2 3 4 5 6 7 8; do (x=$(head -c 30000000 /dev/zero | tr '\0' a); sleep 2) & done; wait; echo done`)
	t.Logf("bomb: %q exit %d", out, code)
	// A child forked at once inherits the score too: it is set before the
	// command runs.
	for range 20 {
		if out, code := shOut(t, u, tok, "echo alive; (cat /proc/self/oom_score_adj)"); code != 0 || out != "alive\n1000" {
			t.Fatalf("after the bomb: %q exit %d, want execd alive and commands at oom_score_adj 1000", out, code)
		}
	}
	if st := getSandbox(t, base, id).Status; st.State != sandboxd.StateRunning {
		t.Errorf("state after the bomb = %+v, want Running", st)
	}
	// A single allocator past the limit is killed, the sandbox stays.
	if _, code := shOut(t, u, tok, `x=$(head -c 300000000 /dev/zero | tr '\0' a); echo ${#x}`); code == 0 {
		t.Error("a command held 300 MB under a 128Mi limit")
	}
	if st := getSandbox(t, base, id).Status; st.State != sandboxd.StateRunning {
		t.Errorf("state after the OOM kill = %+v, want Running", st)
	}
}

// TestDiskQuota: past its quota a sandbox's writes fail with ENOSPC; its
// neighbour's writes, new creates and snapshots go on.
func TestDiskQuota(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{DiskQuota: 64 << 20})
	a, b := create(t, base, nil), create(t, base, nil)
	waitState(t, base, a, sandboxd.StateRunning)
	waitState(t, base, b, sandboxd.StateRunning)
	au, atok := execdEndpoint(t, base, a, false)
	bu, btok := execdEndpoint(t, base, b, false)
	out, code := shOut(t, au, atok, "dd if=/dev/zero of=/tmp/fill bs=1M count=100 2>&1")
	if code == 0 || !strings.Contains(out, "No space left") {
		t.Fatalf("100 MB past a 64 MiB quota: %q exit %d, want ENOSPC", out, code)
	}
	if out, code := shOut(t, bu, btok, "dd if=/dev/zero of=/tmp/ok bs=1M count=40 2>&1 && echo ok"); code != 0 || !strings.HasSuffix(out, "ok") {
		t.Errorf("neighbour's write: %q exit %d", out, code)
	}
	c := create(t, base, nil)
	waitState(t, base, c, sandboxd.StateRunning)
	snap := snapshot(t, base, b, "")
	waitSnapshot(t, base, snap.ID, sandboxd.SnapshotReady)
	// Freeing space makes the full sandbox writable again.
	if out, code := shOut(t, au, atok, "rm /tmp/fill && echo x > /tmp/after && cat /tmp/after"); code != 0 || out != "x" {
		t.Errorf("after freeing: %q exit %d", out, code)
	}
}

// TestHostAddressesClosed: an allow-all policy reaches no listener on the
// host's loopback or interface address, until the operator opens that one
// destination.
func TestHostAddressesClosed(t *testing.T) {
	hostIP := ""
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
				hostIP = n.IP.String()
				break
			}
		}
	}
	listen := func(addr string) (net.Listener, string) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "host service") }))
		return ln, ln.Addr().String()
	}
	_, lo := listen("127.0.0.1:0")
	_, lo2 := listen("127.0.0.1:0")
	targets := []string{lo, lo2}
	if hostIP != "" {
		_, ifa := listen(net.JoinHostPort(hostIP, "0"))
		targets = append(targets, ifa)
	}
	allowAll := map[string]any{"networkPolicy": map[string]any{"defaultAction": "allow"}}
	try := func(t *testing.T, base, target string) (string, int) {
		id := create(t, base, allowAll)
		waitState(t, base, id, sandboxd.StateRunning)
		u, tok := execdEndpoint(t, base, id, false)
		// NO_PROXY names 127.0.0.1: --noproxy overrides it, so every
		// request goes through the proxy (the sandbox's only way out).
		px := fmt.Sprintf("-x http://127.0.0.1:%d --noproxy none.invalid ", sandboxd.ProxyPort)
		return curl(t, u, tok, px+"http://"+target+"/")
	}
	t.Run("closed", func(t *testing.T) {
		_, base := startServer(t, sandboxd.Config{})
		for _, target := range targets {
			if out, _ := try(t, base, target); strings.Contains(out, "host service") {
				t.Errorf("allow-all sandbox reached %s on the host: %q", target, out)
			}
		}
	})
	t.Run("opened by the operator", func(t *testing.T) {
		_, base := startServer(t, sandboxd.Config{AllowHosts: []string{lo}})
		if out, code := try(t, base, lo); code != 0 || out != "host service" {
			t.Errorf("opened %s: %q exit %d", lo, out, code)
		}
		if out, _ := try(t, base, lo2); strings.Contains(out, "host service") {
			t.Errorf("%s (not opened) reached: %q", lo2, out)
		}
	})
	t.Run("bad allow-host", func(t *testing.T) {
		for _, h := range []string{"nonsense", "example.com:80", "127.0.0.1:99999"} {
			if _, err := sandboxd.Open(context.Background(), sandboxd.Config{AllowHosts: []string{h}}); err == nil {
				t.Errorf("New with AllowHosts %q succeeded", h)
			}
		}
	})
}
