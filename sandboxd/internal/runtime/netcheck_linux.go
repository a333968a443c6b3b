package runtime

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/alineo-labs/alineo/sandboxd/internal/proctree"
)

// ListensOn reports whether a process of the sandbox holds a listening TCP
// socket on port. A sandbox that shares the host network would otherwise let
// the unauthenticated proxy route reach any loopback service of the host; one
// with its own network namespace is checked there.
func (p *Process) ListensOn(port int) bool {
	procNet := "/proc/net"
	if p.eg != nil {
		procNet = "/proc/" + strconv.Itoa(p.pid()) + "/net"
	}
	inodes := listeningInodes(procNet, port)
	if len(inodes) == 0 {
		return false
	}
	pids := append([]int{p.pid()}, proctree.Descendants(p.pid())...)
	for _, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd"
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			link, err := os.Readlink(dir + "/" + e.Name())
			if err != nil {
				continue
			}
			if ino, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(ino, "]")] {
				return true
			}
		}
	}
	return false
}

// listeningInodes returns the socket inodes of TCP sockets listening on port
// in the network namespace procNet (/proc/net or /proc/<pid>/net) shows.
func listeningInodes(procNet string, port int) map[string]bool {
	out := map[string]bool{}
	hexPort := fmt.Sprintf(":%04X", port)
	for _, f := range []string{procNet + "/tcp", procNet + "/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st ... inode (field 9)
			if len(fields) < 10 || !strings.HasSuffix(fields[1], hexPort) || fields[3] != "0A" {
				continue
			}
			out[fields[9]] = true
		}
		fh.Close()
	}
	return out
}

// Transport reaches the sandbox's ports other than execd's: nil (the
// default transport) for a sandbox on the host network, else one that dials
// in the sandbox's network namespace (no idle connections kept: each
// request dials afresh).
func (p *Process) Transport() http.RoundTripper {
	if p.netns == "" {
		return nil
	}
	ns := p.netns
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return dialNetns(ctx, ns, addr)
		},
		DisableKeepAlives:     true,
		ResponseHeaderTimeout: 0,
	}
}

// dialNetns connects to addr from inside the network namespace at nsPath. The
// socket is made on a locked thread that joins the namespace and then goes
// back to the one it came from; only when it cannot is it left locked, so Go
// ends it with the goroutine and no other goroutine ever runs in the
// sandbox's namespace.
func dialNetns(ctx context.Context, nsPath string, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		orig, err := os.Open("/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open the host's network namespace: %w", err)}
			return
		}
		defer orig.Close()
		ns, err := os.Open(nsPath)
		if err != nil {
			goruntime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open network namespace: %w", err)}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("enter network namespace: %w", err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
