// Package mountinfo lists the mount points of this process's mount namespace
// from /proc/self/mountinfo: what sandboxd unmounts before removing a
// sandbox's directory, and what the soak unmounts after an aborted run.
package mountinfo

import (
	"bufio"
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Below returns the mount points at or below any of dirs, deepest first
// (a submount before its parent), each once. Without /proc (not Linux) it
// returns the error of opening it.
func Below(dirs ...string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	clean := make([]string, len(dirs))
	for i, d := range dirs {
		clean[i] = filepath.Clean(d)
	}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := Unescape(fields[4])
		for _, d := range clean {
			if p == d || strings.HasPrefix(p, d+"/") {
				out = append(out, p)
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// A path below another is longer: longest first is deepest first.
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return slices.Compact(out), nil
}

// Unescape decodes mountinfo's octal escapes (\040 for a space, \011 for a
// tab, \012 for a newline, \134 for a backslash).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
