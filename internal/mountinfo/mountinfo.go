package mountinfo

import (
	"bufio"
	"bytes"
	"cmp"
	"io"
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
	return below(f, dirs)
}

// below is Below reading mountinfo from r. A line is looked at in place:
// only the mount points that match become strings (sandboxd reads the
// table at every delete, and a host running many sandboxes has hundreds of
// mounts).
func below(r io.Reader, dirs []string) ([]string, error) {
	clean := make([][]byte, len(dirs)) // converted once, not per line
	for i, d := range dirs {
		clean[i] = []byte(filepath.Clean(d))
	}
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p, ok := mountPoint(sc.Bytes())
		if !ok {
			continue
		}
		if bytes.IndexByte(p, '\\') >= 0 {
			p = []byte(Unescape(string(p)))
		}
		for _, d := range clean {
			if bytes.HasPrefix(p, d) && (len(p) == len(d) || p[len(d)] == '/') {
				out = append(out, string(p))
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

// mountPoint returns the fifth field of a mountinfo line (the mount point,
// escaped; the kernel separates fields with one space); false for a line
// with fewer than five.
func mountPoint(line []byte) ([]byte, bool) {
	for range 4 {
		i := bytes.IndexByte(line, ' ')
		if i < 0 {
			return nil, false
		}
		line = line[i+1:]
	}
	if i := bytes.IndexByte(line, ' '); i >= 0 {
		line = line[:i]
	}
	return line, len(line) > 0
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
