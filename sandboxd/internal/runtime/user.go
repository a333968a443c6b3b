package runtime

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// imageUser resolves an image's User ("uid", "uid:gid", "name",
// "name:group", names from root's /etc/passwd and /etc/group) as Docker
// does: a uid alone takes its primary group from /etc/passwd, else 0.
func imageUser(root, spec string) (uid, gid uint32, err error) {
	user, group, hasGroup := strings.Cut(spec, ":")
	passwd := readIDFile(filepath.Join(root, "etc", "passwd"))
	if n, perr := strconv.ParseUint(user, 10, 32); perr == nil {
		uid = uint32(n)
		for _, f := range passwd {
			if f[2] == user {
				g, _ := strconv.ParseUint(f[3], 10, 32)
				gid = uint32(g)
				break
			}
		}
	} else {
		found := false
		for _, f := range passwd {
			if f[0] == user {
				u, uerr := strconv.ParseUint(f[2], 10, 32)
				g, gerr := strconv.ParseUint(f[3], 10, 32)
				if uerr != nil || gerr != nil {
					return 0, 0, fmt.Errorf("user %q: malformed /etc/passwd entry", user)
				}
				uid, gid, found = uint32(u), uint32(g), true
				break
			}
		}
		if !found {
			return 0, 0, fmt.Errorf("user %q: no such user in the image's /etc/passwd", user)
		}
	}
	if !hasGroup {
		return uid, gid, nil
	}
	if n, perr := strconv.ParseUint(group, 10, 32); perr == nil {
		return uid, uint32(n), nil
	}
	for _, f := range readIDFile(filepath.Join(root, "etc", "group")) {
		if f[0] == group {
			g, gerr := strconv.ParseUint(f[2], 10, 32)
			if gerr != nil {
				return 0, 0, fmt.Errorf("group %q: malformed /etc/group entry", group)
			}
			return uid, uint32(g), nil
		}
	}
	return 0, 0, fmt.Errorf("group %q: no such group in the image's /etc/group", group)
}

// readIDFile reads the colon-separated lines of an /etc/passwd or
// /etc/group file with at least four fields; none if it is missing.
func readIDFile(p string) [][]string {
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Split(sc.Text(), ":"); len(fields) >= 4 {
			out = append(out, fields)
		}
	}
	return out
}
