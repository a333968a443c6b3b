package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary is the soak binary of these tests: it runs the
// namespace wrapper and the janitor like cmd/soak does, and a few helpers.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case NetnsExecCommand:
			fmt.Fprintln(os.Stderr, RunInNetns(os.Args[2:]))
			os.Exit(127)
		case NetJanitorCommand:
			if err := RunNetJanitor(os.Args[2:], os.Stdin, os.Stderr); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		case "serve-tcp": // serve-tcp ADDR: accept and close connections
			ln, err := net.Listen("tcp", os.Args[2])
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			for {
				c, err := ln.Accept()
				if err != nil {
					os.Exit(1)
				}
				_, _ = c.Write([]byte("hi\n"))
				c.Close()
			}
		case "dial-tcp": // dial-tcp ADDR: exit 0 when it answers
			if err := dialTCP(os.Args[2], 2*time.Second); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		case "crash-with-network": // crash-with-network ROOT: see TestNetworkTeardownAfterACrash
			crashWithNetwork(os.Args[2])
		}
	}
	os.Exit(m.Run())
}

func dialTCP(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "hi\n" {
		return fmt.Errorf("read %q", line)
	}
	return nil
}

// needNetns skips t unless it runs as root with iproute2; with CI=true it
// fails instead.
func needNetns(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root (the namespaces): sudo go test ./cmd/soak/internal/soak -run Network"
	} else if _, err := exec.LookPath("ip"); err != nil {
		why = "needs ip (apt-get install iproute2, or make deps-net)"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

func self(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func testPlan(t *testing.T, prefix string, third byte) *NetPlan {
	t.Helper()
	p, err := PlanNetwork(prefix, netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, third, 0}), 24), 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func openTestNetwork(t *testing.T, p *NetPlan, root string) *Network {
	t.Helper()
	n, err := OpenNetwork(context.Background(), NetConfig{Plan: p, Root: root, Self: self(t), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// inNS runs argv in the namespace file ns through the wrapper and returns
// its output.
func inNS(t *testing.T, ns string, argv ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(self(t), append([]string{NetnsExecCommand, "-netns", ns, "--"}, argv...)...).CombinedOutput()
	return string(out), err
}

// Every node reaches every other over the bridge and the soak reaches each
// from the root namespace; a node has loopback and its one address of the
// plan, nothing else (no IPv6); a link down cuts the node off until it is up
// again; Close removes every namespace, the root link and what ran inside.
func TestNetworkLinksPartitionsAndTeardown(t *testing.T) {
	needNetns(t)
	p := testPlan(t, "alst1", 251)
	root := t.TempDir()
	n := openTestNetwork(t, p, root)
	h1, h2 := p.Of(RoleHost)[0], p.Of(RoleHost)[1]
	addr := netip.AddrPortFrom(h2.Addr, 7000).String()
	srv := &Proc{Name: "srv", Path: self(t), Args: []string{"serve-tcp", addr}, Dir: root, Log: filepath.Join(root, "srv.log"),
		Netns: n.NS(h2.Name), Self: self(t)}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if !awaitCond(10*time.Second, func() bool { return dialTCP(addr, time.Second) == nil }) {
		log, _ := os.ReadFile(srv.Log)
		t.Fatalf("%s not reachable from the root namespace: %v; log: %s", addr, dialTCP(addr, time.Second), log)
	}
	if out, err := inNS(t, n.NS(h1.Name), self(t), "dial-tcp", addr); err != nil {
		t.Fatalf("h1 cannot reach h2: %v: %s", err, out)
	}
	out, err := inNS(t, n.NS(h1.Name), "ip", "-o", "addr")
	if err != nil {
		t.Fatalf("ip addr: %v: %s", err, out)
	}
	var inet []string
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		inet = append(inet, f[1]+" "+f[2]+" "+f[3])
	}
	if got, want := strings.Join(inet, ", "), "lo inet 127.0.0.1/8, eth0 inet "+p.CIDR(h1.Addr); got != want {
		t.Errorf("h1's addresses: %s, want %s", got, want)
	}

	if err := n.SetLink(context.Background(), h2.Name, false); err != nil {
		t.Fatal(err)
	}
	if err := dialTCP(addr, 500*time.Millisecond); err == nil {
		t.Fatal("h2 answers with its link down")
	}
	if out, err := inNS(t, n.NS(h1.Name), self(t), "dial-tcp", addr); err == nil {
		t.Fatalf("h1 reaches h2 with h2's link down: %s", out)
	}
	if err := n.SetLink(context.Background(), h2.Name, true); err != nil {
		t.Fatal(err)
	}
	if !awaitCond(10*time.Second, func() bool { return dialTCP(addr, time.Second) == nil }) {
		t.Fatalf("h2 unreachable after its link is up again: %v", dialTCP(addr, time.Second))
	}

	pid := srv.Pid()
	srv.expectExit() // the teardown kills it
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	assertGone(t, n.Dir, p.RootLink, pid)
	if crashes := srv.Crashes(); len(crashes) != 0 {
		t.Errorf("crashes: %v", crashes)
	}
}

// assertGone fails t unless the network's namespaces, its root link and
// the processes pids are gone.
func assertGone(t *testing.T, dir, link string, pids ...int) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there: %v", dir, err)
	}
	if !awaitCond(10*time.Second, func() bool { return !linkExists(link) }) {
		t.Errorf("link %s is still there", link)
	}
	for _, pid := range pids {
		if !awaitCond(10*time.Second, func() bool { return gone(pid) }) {
			t.Errorf("process %d still runs", pid)
		}
	}
}

// orphanIn starts a sleep in ns that no parent-death signal reaches (its
// shell exits at once) and returns its pid.
func orphanIn(t *testing.T, ns string) int {
	t.Helper()
	out, err := inNS(t, ns, "/bin/sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!")
	if err != nil {
		t.Fatalf("start an orphan: %v: %s", err, out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// crashWithNetwork is a soak that dies of a panic in a goroutine (no
// deferred function runs) with its network up and an orphan in a host's
// namespace; it prints the orphan's pid first.
func crashWithNetwork(root string) {
	p, err := PlanNetwork("alst2", netip.MustParsePrefix("198.19.252.0/24"), 1, 1)
	if err != nil {
		panic(err)
	}
	exe, _ := os.Executable()
	n, err := OpenNetwork(context.Background(), NetConfig{Plan: p, Root: root, Self: exe})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	out, err := exec.Command(exe, NetnsExecCommand, "-netns", n.NS("h1"), "--", "/bin/sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		fmt.Println("orphan:", err)
		os.Exit(3)
	}
	fmt.Print(string(out))
	done := make(chan struct{})
	go func() { panic("the soak fails") }()
	<-done
}

// A soak that panics in a goroutine runs no deferred teardown: its janitor
// sees its stdin end and removes the network and what ran in it.
func TestNetworkTeardownAfterACrash(t *testing.T) {
	needNetns(t)
	root := t.TempDir()
	cmd := exec.Command(self(t), "crash-with-network", root)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("crash-with-network: %v (want the exit status 2 of a panic): %s", err, out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if !awaitCond(60*time.Second, func() bool { _, err := os.Stat(filepath.Join(root, "alst2")); return err != nil }) {
		t.Fatal("the janitor did not remove the namespaces in 60s")
	}
	assertGone(t, filepath.Join(root, "alst2"), "alst20", pid)
}

// What an earlier run left when its janitor died too (namespaces, the root
// link, a process inside) is removed when the next run opens the network;
// that run's network then works.
func TestNetworkRemovesLeftoversAtStart(t *testing.T) {
	needNetns(t)
	p := testPlan(t, "alst3", 253)
	root := t.TempDir()
	n := openTestNetwork(t, p, root)
	orphan := orphanIn(t, n.NS("h1"))
	_ = n.janitor.Process.Kill() // both die: the soak and its janitor
	<-n.waited
	n.janitor = nil
	n.lock.Close()
	if _, err := os.Stat(n.NS("h1")); err != nil || !linkExists(p.RootLink) {
		t.Fatalf("no leftovers to remove: %v, link %v", err, linkExists(p.RootLink))
	}
	n2 := openTestNetwork(t, p, root)
	if !gone(orphan) {
		t.Error("the earlier run's process still runs")
	}
	h2 := p.Of(RoleHost)[1]
	addr := netip.AddrPortFrom(h2.Addr, 7001).String()
	srv := &Proc{Name: "srv", Path: self(t), Args: []string{"serve-tcp", addr}, Dir: root, Log: filepath.Join(root, "srv.log"),
		Netns: n2.NS(h2.Name), Self: self(t)}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if !awaitCond(10*time.Second, func() bool { return dialTCP(addr, time.Second) == nil }) {
		t.Fatalf("the new network does not work: %v", dialTCP(addr, time.Second))
	}
	srv.expectExit()
	if err := n2.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, n2.Dir, p.RootLink, orphan)
}

// A network whose making fails half-way is removed before OpenNetwork
// returns its error.
func TestNetworkRemovedWhenOpenFails(t *testing.T) {
	needNetns(t)
	p := testPlan(t, "alst4", 254)
	// The last host's port name taken twice: its link cannot be made in the
	// bridge's namespace, after every namespace before it was.
	last := len(p.Nodes) - 1
	p.Nodes[last].Port = p.Nodes[last-1].Port
	root := t.TempDir()
	n, err := OpenNetwork(context.Background(), NetConfig{Plan: p, Root: root, Self: self(t), Logf: t.Logf})
	if err == nil {
		n.Close()
		t.Fatal("opened a network whose two links share a name")
	}
	t.Logf("open: %v", err)
	assertGone(t, filepath.Join(root, "alst4"), p.RootLink)
}

// The wrapper runs a program as the user it is given, in the namespace.
func TestInNetnsDropsToTheUser(t *testing.T) {
	needNetns(t)
	p := testPlan(t, "alst5", 250)
	n := openTestNetwork(t, p, t.TempDir())
	out, err := exec.Command(self(t), NetnsExecCommand, "-netns", n.NS("h1"), "-uid", "65534", "-gid", "65534", "--",
		"/bin/sh", "-c", "id -u; id -g; id -G; ip -o -4 addr show dev eth0").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 4 || lines[0] != "65534" || lines[1] != "65534" || lines[2] != "65534" || !strings.Contains(lines[3], p.CIDR(p.Of(RoleHost)[0].Addr)) {
		t.Fatalf("output:\n%s\nwant uid, gid and groups 65534 and h1's address", out)
	}
}

// Killing a host kills every process on it, however it got there: its
// supervised processes, a child in a session of its own (sandboxd's
// runtime) and a grandchild in a network namespace of its own (a
// sandbox's); none counts as a crash, and another host's process lives on.
func TestKillHostKillsEverythingOnIt(t *testing.T) {
	needNetns(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	p := testPlan(t, "alst6", 249)
	dir := t.TempDir()
	n := openTestNetwork(t, p, dir)
	f := &Fleet{cfg: Config{Dir: dir, Self: self(t)}, Net: n}
	proc := func(name, node, script string) *Proc {
		pr := f.put(&Proc{Name: name, Path: "/bin/sh", Args: []string{"-c", script}, Dir: dir, Log: filepath.Join(dir, name+".log")}, f.at(node))
		if err := pr.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pr.Kill() })
		return pr
	}
	pidFile := func(name string) string { return filepath.Join(dir, name) }
	h1 := &Host{Name: "h1", Netns: n.NS("h1"),
		Sandboxd: proc("h1-sandboxd", "h1", "setsid sleep 1000 & echo $! > "+pidFile("runtime")+
			"; unshare -n sleep 1000 & echo $! > "+pidFile("sandbox")+"; wait"),
		Executors: []*Proc{proc("h1-executor-1", "h1", "exec sleep 1000")}}
	other := proc("h2-executor-1", "h2", "exec sleep 1000")
	var pids []int
	for _, name := range []string{"runtime", "sandbox"} {
		if !awaitCond(10*time.Second, func() bool { data, _ := os.ReadFile(pidFile(name)); return len(data) > 1 }) {
			t.Fatalf("no %s pid", name)
		}
		data, _ := os.ReadFile(pidFile(name))
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		pids = append(pids, pid)
	}
	// The sandbox's process is in a namespace of its own, not h1's.
	if !awaitCond(10*time.Second, func() bool {
		a, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pids[1]))
		b, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", h1.Sandboxd.Pid()))
		return a != "" && b != "" && a != b
	}) {
		t.Fatal("the sandbox's process did not get a network namespace of its own")
	}
	pids = append(pids, h1.Sandboxd.Pid(), h1.Executors[0].Pid())
	if err := f.killHost(h1); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("process %d of h1 still runs", pid)
		}
	}
	for _, pr := range h1.procs() {
		if pr.Running() || len(pr.Crashes()) > 0 {
			t.Errorf("%s: running %v, crashes %v", pr.Name, pr.Running(), pr.Crashes())
		}
	}
	if !other.Running() {
		t.Error("h2's process died with h1")
	}
}

// TestKillNetnsProcsThawsFrozen: a process of a frozen cgroup (a sandbox
// frozen for its checkpoint when its host is lost) dies with the others. On
// cgroup v1 its SIGKILL waits until the cgroup is thawed: killNetnsProcs
// thaws it (without that: "still alive 10s after SIGKILL", checked).
func TestKillNetnsProcsThawsFrozen(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (a cgroup of its own)")
		}
		t.Skip("needs root (a cgroup of its own)")
	}
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	name := fmt.Sprint("alineo-soak-test-", pid)
	var dir, freeze, frozen string
	var isFrozen func() bool
	if _, err := os.Stat("/sys/fs/cgroup/freezer"); err == nil {
		dir, freeze, frozen = filepath.Join("/sys/fs/cgroup/freezer", name), "freezer.state", "FROZEN"
		isFrozen = func() bool {
			b, _ := os.ReadFile(filepath.Join(dir, "freezer.state"))
			return strings.TrimSpace(string(b)) == "FROZEN"
		}
	} else if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir, freeze, frozen = filepath.Join("/sys/fs/cgroup", name), "cgroup.freeze", "1"
		isFrozen = func() bool {
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.events"))
			return strings.Contains(string(b), "frozen 1")
		}
	} else {
		t.Skip("no cgroup freezer here")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		thaw(pid)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if err := os.Remove(dir); err != nil {
			t.Error(err)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, freeze), []byte(frozen), 0); err != nil {
		t.Fatal(err)
	}
	if !awaitCond(10*time.Second, isFrozen) {
		t.Fatal("the cgroup did not freeze")
	}
	if _, err := killNetnsProcs(nil, 10*time.Second, pid); err != nil {
		t.Fatal(err)
	}
}
