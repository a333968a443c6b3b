package runtime

import (
	"errors"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// newNetns creates a network namespace bind-mounted at path, with its
// loopback up, and returns a listener on 127.0.0.1:ProxyPort inside it (where
// the sandbox's egress proxy is served). The namespace belongs to the host's
// user namespace, so a sandbox's root cannot reconfigure it.
func newNetns(path string) (net.Listener, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o400)
	if err != nil {
		return nil, fmt.Errorf("network namespace file: %w", err)
	}
	f.Close()
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		ln, err := inNewNetns(path, func() (net.Listener, error) {
			if err := loopbackUp(); err != nil {
				return nil, err
			}
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ProxyPort))
			if err != nil {
				return nil, fmt.Errorf("listen on the proxy port: %w", err)
			}
			return ln, nil
		})
		ch <- result{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		removeNetns(path)
		return nil, r.err
	}
	return r.ln, nil
}

// inNewNetns runs f on a locked thread moved into a new network namespace,
// bound at path, then moves the thread back to the namespace it came from.
// Only when it cannot go back is the thread left locked, so Go ends it with
// the goroutine: a thread that ends kills the children it started with
// Pdeathsig, so the server's threads must not end for nothing.
func inNewNetns(path string, f func() (net.Listener, error)) (net.Listener, error) {
	goruntime.LockOSThread()
	self := "/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/ns/net"
	orig, err := os.Open(self)
	if err != nil {
		goruntime.UnlockOSThread()
		return nil, fmt.Errorf("open the host's network namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		goruntime.UnlockOSThread()
		return nil, fmt.Errorf("unshare: %w", err)
	}
	ln, err := func() (net.Listener, error) {
		if err := unix.Mount(self, path, "", unix.MS_BIND, ""); err != nil {
			return nil, fmt.Errorf("bind the namespace: %w", err)
		}
		return f()
	}()
	if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
		goruntime.UnlockOSThread()
	}
	return ln, err
}

// removeNetns unmounts and removes a network namespace made by newNetns; the
// namespace itself goes when its last process and socket are gone.
func removeNetns(path string) {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return
	}
	_ = os.Remove(path)
}
