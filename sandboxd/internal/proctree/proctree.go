package proctree

import (
	"os"
	"strconv"
	"strings"
)

// Descendants returns the pids of every process below root, breadth first, read from /proc.
// Only processes whose parent chain still reaches root are found: an orphan adopted by init
// (or a subreaper above root) is not. It returns nil when /proc cannot be read. Processes that
// exit while /proc is read are skipped, so the answer is a snapshot, not a guarantee.
func Descendants(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := make(map[int][]int)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if ppid, ok := parentPID(b); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// parentPID reads the parent pid from the contents of /proc/<pid>/stat:
// "pid (comm) state ppid ...", where comm may contain spaces and parentheses.
func parentPID(stat []byte) (int, bool) {
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, false
	}
	return ppid, true
}
