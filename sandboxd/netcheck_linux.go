package sandboxd

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// listensOn reports whether a process of the sandbox holds a listening TCP
// socket on port. Sandboxes share the host network, so without this check the
// unauthenticated proxy route would reach any loopback service of the host.
func (p *proc) listensOn(port int) bool {
	inodes := listeningInodes(port)
	if len(inodes) == 0 {
		return false
	}
	pids := p.cg.pids()
	if len(pids) == 0 {
		pids = append([]int{p.pid()}, descendants(p.pid())...)
	}
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

// listeningInodes returns the socket inodes of TCP sockets listening on port.
func listeningInodes(port int) map[string]bool {
	out := map[string]bool{}
	hexPort := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
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
