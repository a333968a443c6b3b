package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// NetRoot is where a multi-host soak binds its network namespaces: the
// directory NetRoot/<prefix> holds one file per namespace, and
// NetRoot/<prefix>.lock is held for the run's life. The soak makes no name
// under /run/netns: `ip netns` shares that directory with whatever else
// runs on the machine, and mounts it on itself the first time.
const NetRoot = "/run/alineo-soak"

// bridgeName is the bridge's name inside the bridge's own namespace.
const bridgeName = "br0"

// nodeLink is a node's end of its link to the bridge, in its namespace.
const nodeLink = "eth0"

// NetConfig configures OpenNetwork.
type NetConfig struct {
	Plan *NetPlan
	// Root is the directory of the namespace files and the lock (default
	// NetRoot).
	Root string
	// Self is the soak binary: processes enter a namespace through it
	// (NetnsExecCommand), and it runs the janitor (NetJanitorCommand).
	Self string
	// Unmount are directories below which the janitor detaches every
	// mount after a run that died (sandboxd's data and run directories).
	Unmount []string
	// Log receives the janitor's output (default os.Stderr).
	Log io.Writer
	// Logf receives progress lines (default: none).
	Logf func(format string, args ...any)
}

// Network is a multi-host soak's network made real: a bridge in a
// namespace of its own, one namespace per node of the plan with a veth to
// the bridge, its address and loopback up, and the soak's own veth from
// the root namespace (RootLink, the plan's first address), by which the
// soak's clients reach the nodes.
//
// The bridge is not the root namespace's: nothing of the network but one
// link and its address is visible there, the root namespace's firewall
// (a FORWARD policy of DROP, as Docker sets) and bridge netfilter never see
// the nodes' traffic, and removing the bridge's namespace removes every
// link at once. IPv6 is disabled in every namespace and on RootLink, so no
// link-local address or neighbour discovery appears: every address on the
// network is one of the plan's, from TestRange.
//
// A janitor process (NetJanitorCommand) holds the network's lock and
// tears it down when the soak closes its stdin or dies in any way (a
// panic in any goroutine, SIGKILL): Close asks it to and waits. A run
// that finds leftovers of an earlier one (both killed) removes them first.
type Network struct {
	Plan *NetPlan
	// Dir holds the namespace files: Dir/br, Dir/<node name>.
	Dir string

	cfg     NetConfig
	lock    *os.File
	janitor *exec.Cmd
	stdin   io.WriteCloser
	waited  chan error
}

// NS returns the path of the namespace file of node (or of the bridge:
// the plan's Bridge).
func (n *Network) NS(node string) string { return filepath.Join(n.Dir, node) }

// OpenNetwork takes the prefix's lock, removes what an earlier run with the
// same prefix left, starts the janitor, then makes the plan's namespaces
// and links. On an error everything made is removed again.
func OpenNetwork(ctx context.Context, cfg NetConfig) (*Network, error) {
	if cfg.Root == "" {
		cfg.Root = NetRoot
	}
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("open network: %w (install iproute2)", err)
	}
	p := cfg.Plan
	n := &Network{Plan: p, Dir: filepath.Join(cfg.Root, p.Prefix), cfg: cfg}
	if err := os.MkdirAll(cfg.Root, 0o755); err != nil {
		return nil, fmt.Errorf("open network: %w", err)
	}
	lock, err := lockFile(ctx, filepath.Join(cfg.Root, p.Prefix+".lock"), 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("open network %s: %w", n.Dir, err)
	}
	n.lock = lock
	left, err := teardownNetwork(n.Dir, p.RootLink, nil)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("open network: remove what an earlier run left: %w", err)
	}
	if left != "" {
		cfg.Logf("removed what an earlier run left: %s", left)
	}
	if err := n.startJanitor(); err != nil {
		lock.Close()
		return nil, err
	}
	if err := n.build(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("open network: %w", err), n.Close())
	}
	return n, nil
}

// lockFile takes an exclusive flock on path, retrying until timeout passes
// (a janitor may still be removing the last run's network).
func lockFile(ctx context.Context, path string, timeout time.Duration) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	err = poll(ctx, "lock "+path, timeout, 100*time.Millisecond, func() (bool, error) {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, ErrNetworkBusy
		}
		return err == nil, err
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// startJanitor starts the janitor in a process group of its own (a Ctrl-C
// at the terminal must not stop it before its work), without a parent-death
// signal (its work begins when the soak dies), holding the lock.
func (n *Network) startJanitor() error {
	args := []string{NetJanitorCommand, "-dir", n.Dir, "-link", n.Plan.RootLink}
	for _, d := range n.cfg.Unmount {
		args = append(args, "-unmount", d)
	}
	cmd := exec.Command(n.cfg.Self, args...)
	cmd.Stdout, cmd.Stderr = n.cfg.Log, n.cfg.Log
	cmd.ExtraFiles = []*os.File{n.lock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("start the network's janitor: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the network's janitor: %w", err)
	}
	n.janitor, n.stdin, n.waited = cmd, in, make(chan error, 1)
	go func() { n.waited <- cmd.Wait() }()
	return nil
}

// build makes the namespaces, the bridge and the links.
func (n *Network) build(ctx context.Context) error {
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return err
	}
	p := n.Plan
	br := n.NS(p.Bridge)
	if err := createNetns(br); err != nil {
		return err
	}
	bridge := []string{"link set lo up", "link add " + bridgeName + " type bridge", "link set " + bridgeName + " up"}
	if err := n.ip(ctx, br, bridge...); err != nil {
		return err
	}
	for _, node := range p.Nodes {
		if node.Role == RoleCtl {
			continue
		}
		ns := n.NS(node.Name)
		if err := createNetns(ns); err != nil {
			return err
		}
		if err := n.ip(ctx, ns, "link set lo up",
			fmt.Sprintf("link add %s type veth peer name %s netns %s", nodeLink, node.Port, br),
			fmt.Sprintf("addr add %s dev %s", p.CIDR(node.Addr), nodeLink),
			"link set "+nodeLink+" up"); err != nil {
			return fmt.Errorf("node %s: %w", node.Name, err)
		}
	}
	ctl := p.Of(RoleCtl)[0]
	if err := n.ip(ctx, "", fmt.Sprintf("link add %s type veth peer name %s netns %s", p.RootLink, ctl.Port, br)); err != nil {
		return err
	}
	// No IPv6 on the root namespace's end either: no link-local address.
	if err := writeSysctl(fmt.Sprintf("/proc/sys/net/ipv6/conf/%s/disable_ipv6", p.RootLink), "1"); err != nil {
		return err
	}
	if err := n.ip(ctx, "", fmt.Sprintf("addr add %s dev %s", p.CIDR(ctl.Addr), p.RootLink), "link set "+p.RootLink+" up"); err != nil {
		return err
	}
	var ports []string
	for _, node := range p.Nodes {
		ports = append(ports, fmt.Sprintf("link set %s master %s", node.Port, bridgeName), "link set "+node.Port+" up")
	}
	return n.ip(ctx, br, ports...)
}

// ip runs ip's commands in one batch in the namespace ns ("" the root
// namespace's).
func (n *Network) ip(ctx context.Context, ns string, cmds ...string) error {
	return runIP(ctx, n.cfg.Self, ns, cmds...)
}

func runIP(ctx context.Context, self, ns string, cmds ...string) error {
	var cmd *exec.Cmd
	if ns == "" {
		cmd = exec.CommandContext(ctx, "ip", "-batch", "-")
	} else {
		cmd = exec.CommandContext(ctx, self, NetnsExecCommand, "-netns", ns, "--", "ip", "-batch", "-")
	}
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		where := ns
		if where == "" {
			where = "the root namespace"
		}
		return fmt.Errorf("ip in %s: %q: %w: %s", where, cmds, err, bytes.TrimSpace(out))
	}
	return nil
}

// SetLink takes node's link to the bridge down (a partition: its port on
// the bridge goes down, as a switch port would) or up again.
func (n *Network) SetLink(ctx context.Context, node string, up bool) error {
	nd, ok := n.Plan.Node(node)
	if !ok {
		return fmt.Errorf("set link: no node %q", node)
	}
	state := "down"
	if up {
		state = "up"
	}
	return n.ip(ctx, n.NS(n.Plan.Bridge), "link set "+nd.Port+" "+state)
}

// Close asks the janitor to tear the network down and waits for it; then
// it checks that nothing is left. Closing twice does nothing.
func (n *Network) Close() error {
	if n.janitor == nil {
		return nil
	}
	n.stdin.Close()
	var err error
	select {
	case err = <-n.waited:
	case <-time.After(2 * time.Minute):
		_ = n.janitor.Process.Kill()
		err = errors.Join(errors.New("the janitor did not finish in 2 minutes"), <-n.waited)
	}
	n.janitor = nil
	if err != nil {
		err = fmt.Errorf("tear the network down: janitor: %w", err)
	}
	n.lock.Close()
	if left := leftOf(n.Dir, n.Plan.RootLink); left != "" {
		err = errors.Join(err, fmt.Errorf("tear the network down: left %s", left))
	}
	return err
}

// leftOf says what of a network is still there ("" when nothing).
func leftOf(dir, rootLink string) string {
	var left []string
	if ents, err := os.ReadDir(dir); err == nil {
		left = append(left, fmt.Sprintf("%s (%d namespaces)", dir, len(ents)))
	}
	if linkExists(rootLink) {
		left = append(left, "link "+rootLink)
	}
	return strings.Join(left, ", ")
}

// linkExists reports whether the root namespace has a link named name.
func linkExists(name string) bool {
	_, err := os.Lstat("/sys/class/net/" + name)
	return err == nil
}

// teardownNetwork removes a network whatever state it is in: every process
// in one of its namespaces (and every descendant of one) is killed, what is
// mounted below unmount is detached, each namespace file unmounted and
// removed, dir removed and the root namespace's link deleted (it goes with
// the bridge's namespace; it is deleted explicitly when that was not
// mounted). It returns what it found ("" when nothing).
func teardownNetwork(dir, rootLink string, unmount []string) (string, error) {
	var found []string
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	inodes := map[uint64]bool{}
	for _, e := range ents {
		if ino, err := nsInode(filepath.Join(dir, e.Name())); err == nil {
			inodes[ino] = true
		}
	}
	var errs []error
	if len(inodes) > 0 {
		killed, err := killNetnsProcs(inodes, 30*time.Second)
		errs = append(errs, err)
		if killed > 0 {
			found = append(found, fmt.Sprintf("%d processes", killed))
		}
	}
	if len(unmount) > 0 {
		n, err := unmountBelow(unmount...)
		errs = append(errs, err)
		if n > 0 {
			found = append(found, fmt.Sprintf("%d mounts", n))
		}
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, &os.PathError{Op: "unmount", Path: p, Err: err})
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(ents) > 0 {
		found = append(found, fmt.Sprintf("%d namespaces", len(ents)))
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if rootLink != "" {
		// The veth goes with its peer's namespace, in the kernel's own time.
		gone := awaitCond(5*time.Second, func() bool { return !linkExists(rootLink) })
		if !gone {
			found = append(found, "link "+rootLink)
			if out, err := exec.Command("ip", "link", "del", rootLink).CombinedOutput(); err != nil && linkExists(rootLink) {
				errs = append(errs, fmt.Errorf("ip link del %s: %w: %s", rootLink, err, bytes.TrimSpace(out)))
			}
		}
	}
	return strings.Join(found, ", "), errors.Join(errs...)
}

// awaitCond polls cond until it holds or timeout passes.
func awaitCond(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for d := time.Millisecond; ; d = min(2*d, 50*time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(d)
	}
}

// nsInode returns the inode of the namespace bound at path; an error when
// nothing is bound there (a plain file).
func nsInode(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	if st.Type != unix.NSFS_MAGIC {
		return 0, fmt.Errorf("%s: no namespace bound", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Sys().(*syscall.Stat_t).Ino, nil
}

// createNetns makes a network namespace bound at path, with IPv6 disabled,
// from a thread locked for the purpose that returns to its own namespace
// after (the thread is left to end with its goroutine if it cannot).
func createNetns(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o400)
	if err != nil {
		return fmt.Errorf("network namespace file: %w", err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self := "/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/ns/net"
		orig, err := os.Open(self)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		err = unix.Mount(self, path, "", unix.MS_BIND, "")
		if err != nil {
			err = fmt.Errorf("bind the namespace at %s: %w", path, err)
		} else {
			// /proc/sys/net is the opening thread's namespace's.
			err = errors.Join(writeSysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1"),
				writeSysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1"))
		}
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		_ = os.Remove(path)
		return err
	}
	return nil
}

// writeSysctl writes v to the sysctl file p; a kernel without IPv6 (no
// such file) is fine.
func writeSysctl(p, v string) error {
	err := os.WriteFile(p, []byte(v), 0o644)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// procInfo is what killNetnsProcs reads of a process.
type procInfo struct {
	pid, ppid int
	netns     uint64
}

// procs lists the live processes (zombies excluded) with their parent and
// network namespace.
func procs() []procInfo {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pi := procInfo{pid: pid, ppid: ppid}
		if fi, err := os.Stat("/proc/" + e.Name() + "/ns/net"); err == nil {
			pi.netns = fi.Sys().(*syscall.Stat_t).Ino
		}
		out = append(out, pi)
	}
	return out
}

// thaw thaws the freezer cgroup of the process pid (cgroup v1's freezer, or
// v2's cgroup.freeze), if it is in one. It ignores every error: the process
// may be gone, or in no frozen cgroup.
func thaw(pid int) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return
	}
	for line := range strings.Lines(string(data)) {
		// hierarchy-ID:controllers:path
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		switch {
		case len(f) != 3:
		case slices.Contains(strings.Split(f[1], ","), "freezer"):
			_ = os.WriteFile(filepath.Join("/sys/fs/cgroup/freezer", f[2], "freezer.state"), []byte("THAWED"), 0)
		case f[0] == "0" && f[1] == "":
			_ = os.WriteFile(filepath.Join("/sys/fs/cgroup", f[2], "cgroup.freeze"), []byte("0"), 0)
		}
	}
}

// killNetnsProcs kills every process in one of the network namespaces
// inodes, with every descendant of one (the containers of a host's
// sandboxd run in namespaces of their own, below its runtime's processes)
// and of the pids extra. Each is stopped first, until a scan finds no new
// one (a stopped process neither forks nor exits, so no descendant is
// reparented out of sight); then all are killed. It waits up to timeout for
// them to be gone and returns how many it killed.
func killNetnsProcs(inodes map[uint64]bool, timeout time.Duration, extra ...int) (int, error) {
	self := os.Getpid()
	stopped := map[int]bool{}
	for range 100 {
		ps := procs()
		kids := map[int][]int{}
		var roots []int
		for _, p := range ps {
			kids[p.ppid] = append(kids[p.ppid], p.pid)
			if inodes[p.netns] {
				roots = append(roots, p.pid)
			}
		}
		roots = append(roots, extra...)
		fresh := 0
		for len(roots) > 0 {
			pid := roots[len(roots)-1]
			roots = roots[:len(roots)-1]
			if pid == self || pid <= 1 {
				continue
			}
			if !stopped[pid] {
				if err := unix.Kill(pid, unix.SIGSTOP); err == nil {
					fresh++
				}
				stopped[pid] = true
			}
			roots = append(roots, kids[pid]...)
		}
		if fresh == 0 {
			break
		}
	}
	for pid := range stopped {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	// A process of a frozen cgroup (a sandbox that sandboxd froze for a
	// checkpoint) takes its SIGKILL only once thawed on cgroup v1; a lost
	// machine loses it all the same.
	for pid := range stopped {
		thaw(pid)
	}
	alive := func() []int {
		var out []int
		for _, p := range procs() {
			if stopped[p.pid] {
				out = append(out, p.pid)
			}
		}
		return out
	}
	if !awaitCond(timeout, func() bool { return len(alive()) == 0 }) {
		return len(stopped), fmt.Errorf("processes %v still alive %s after SIGKILL", alive(), timeout)
	}
	return len(stopped), nil
}
