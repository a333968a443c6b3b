package execd

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// fileInfo is the execd FileInfo object. Mode is the octal permission written as a decimal
// number (0644 → 644).
type fileInfo struct {
	Path       string `json:"path"`
	Type       string `json:"type"`
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modified_at"`
	CreatedAt  string `json:"created_at"`
	Owner      string `json:"owner"`
	Group      string `json:"group"`
	Mode       int    `json:"mode"`
}

// idNames maps uids and gids to names using Root's /etc/passwd and /etc/group, so names are
// those of the sandbox, not of the host, in both isolated and --no-isolation mode.
type idNames struct {
	users, groups map[uint32]string
	uids, gids    map[string]uint32
	primary       map[uint32]uint32 // uid → primary gid
}

func (s *Server) loadIDNames() *idNames {
	n := &idNames{users: map[uint32]string{}, groups: map[uint32]string{}, uids: map[string]uint32{},
		gids: map[string]uint32{}, primary: map[uint32]uint32{}}
	read := func(name string, f func(fields []string)) {
		p, err := secureJoin(s.root, name, true)
		if err != nil {
			return
		}
		fh, err := os.Open(p)
		if err != nil {
			return
		}
		defer fh.Close()
		sc := bufio.NewScanner(io.LimitReader(fh, 4<<20))
		for sc.Scan() {
			line := sc.Text()
			if line == "" || line[0] == '#' {
				continue
			}
			f(strings.Split(line, ":"))
		}
	}
	read("/etc/passwd", func(f []string) {
		if len(f) < 4 {
			return
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			return
		}
		if _, ok := n.users[uint32(uid)]; !ok {
			n.users[uint32(uid)] = f[0]
			n.primary[uint32(uid)] = uint32(gid)
		}
		n.uids[f[0]] = uint32(uid)
	})
	read("/etc/group", func(f []string) {
		if len(f) < 3 {
			return
		}
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			return
		}
		if _, ok := n.groups[uint32(gid)]; !ok {
			n.groups[uint32(gid)] = f[0]
		}
		n.gids[f[0]] = uint32(gid)
	})
	return n
}

func (s *Server) primaryGroup(uid uint32) (uint32, bool) {
	g, ok := s.loadIDNames().primary[uid]
	return g, ok
}

func (n *idNames) user(uid uint32) string {
	if name, ok := n.users[uid]; ok {
		return name
	}
	return strconv.FormatUint(uint64(uid), 10)
}

func (n *idNames) group(gid uint32) string {
	if name, ok := n.groups[gid]; ok {
		return name
	}
	return strconv.FormatUint(uint64(gid), 10)
}

// lookupID resolves a user or group given by name or number.
func lookupID(names map[string]uint32, v, what string) (int, error) {
	if id, ok := names[v]; ok {
		return int(id), nil
	}
	if id, err := strconv.ParseUint(v, 10, 32); err == nil {
		return int(id), nil
	}
	return 0, badRequest(CodeInvalidRequestBody, "unknown %s %q", what, v)
}

func (s *Server) makeFileInfo(names *idNames, clientPath string, fi fs.FileInfo) fileInfo {
	out := fileInfo{
		Path:       clientPath,
		Type:       fileType(fi.Mode()),
		Size:       fi.Size(),
		ModifiedAt: fi.ModTime().UTC().Format(time.RFC3339Nano),
		CreatedAt:  fi.ModTime().UTC().Format(time.RFC3339Nano),
		Mode:       modeToDecimal(fi.Mode()),
		Owner:      "0",
		Group:      "0",
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		// Linux stat has no birth time; ctime is the closest stable answer.
		out.CreatedAt = time.Unix(st.Ctim.Unix()).UTC().Format(time.RFC3339Nano)
		out.Owner = names.user(st.Uid)
		out.Group = names.group(st.Gid)
	}
	return out
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

// modeToDecimal renders permission bits (with setuid/setgid/sticky) as octal digits in a decimal int.
func modeToDecimal(m fs.FileMode) int {
	v := uint64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	d, _ := strconv.Atoi(strconv.FormatUint(v, 8))
	return d
}

// parseMode reads a mode written as octal digits in a decimal int (755 → 0755). 0 means unset.
func parseMode(m int) (fs.FileMode, error) {
	if m < 0 || m > 7777 {
		return 0, badRequest(CodeInvalidRequestBody, "mode %d is not an octal permission (0..7777)", m)
	}
	v, err := strconv.ParseUint(strconv.Itoa(m), 8, 32)
	if err != nil {
		return 0, badRequest(CodeInvalidRequestBody, "mode %d is not an octal permission (digits 0-7)", m)
	}
	mode := fs.FileMode(v & 0o777)
	if v&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if v&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if v&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode, nil
}

// permission is the execd Permission object (also the non-path fields of upload metadata).
type permission struct {
	Owner string `json:"owner"`
	Group string `json:"group"`
	Mode  int    `json:"mode"`
}

// apply sets mode (unless 0) and owner/group (unless empty) on host path p, following links.
func (s *Server) applyPermission(p string, perm permission, names *idNames) error {
	if perm.Mode != 0 {
		mode, err := parseMode(perm.Mode)
		if err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil {
			return s.fsError(err, p)
		}
	}
	if perm.Owner == "" && perm.Group == "" {
		return nil
	}
	uid, gid := -1, -1
	var err error
	if perm.Owner != "" {
		if uid, err = lookupID(names.uids, perm.Owner, "owner"); err != nil {
			return err
		}
	}
	if perm.Group != "" {
		if gid, err = lookupID(names.gids, perm.Group, "group"); err != nil {
			return err
		}
	}
	if err := os.Chown(p, uid, gid); err != nil {
		return s.fsError(err, p)
	}
	return nil
}

// fsError maps a file-system error on host path p to an API error naming the client path.
func (s *Server) fsError(err error, p string) error {
	cp := s.clientPath(p)
	var ae *APIError
	switch {
	case errors.As(err, &ae):
		return err
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fileNotFound(cp)
	case errors.Is(err, fs.ErrPermission):
		return apiErr(http.StatusForbidden, CodeRuntimeError, err, "permission denied: %s", cp)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return badRequest(CodeInvalidFile, "file name too long: %s", cp)
	case errors.Is(err, syscall.ELOOP):
		return badRequest(CodeInvalidFile, "too many levels of symbolic links: %s", cp)
	}
	return runtimeError(err, "%s: %v", cp, scrubPath(err, s.root))
}

// scrubPath keeps host paths under Root out of messages.
func scrubPath(err error, root string) string {
	msg := err.Error()
	if root != "/" {
		msg = strings.ReplaceAll(msg, root, "")
	}
	return msg
}

// replaceStream copies r to w replacing every non-overlapping occurrence of old (left to right,
// like bytes.ReplaceAll) by new. It holds at most one read chunk plus len(old)-1 bytes.
func replaceStream(w io.Writer, r io.Reader, old, new []byte) (int, error) {
	if len(old) == 0 {
		return 0, errors.New("replace: empty old string")
	}
	const chunk = 32 << 10
	buf := make([]byte, 0, chunk+len(old))
	count := 0
	eof := false
	for !eof {
		n, err := io.ReadAtLeast(r, buf[len(buf):cap(buf)], 1)
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			eof = true
		case err != nil:
			return count, err
		}
		start := 0
		for {
			i := bytes.Index(buf[start:], old)
			if i < 0 {
				break
			}
			if _, err := w.Write(buf[start : start+i]); err != nil {
				return count, err
			}
			if _, err := w.Write(new); err != nil {
				return count, err
			}
			count++
			start += i + len(old)
		}
		keep := len(old) - 1
		if eof {
			keep = 0
		}
		if end := len(buf) - keep; end > start {
			if _, err := w.Write(buf[start:end]); err != nil {
				return count, err
			}
			start = end
		}
		buf = buf[:copy(buf, buf[start:])]
	}
	return count, nil
}

// globMatch matches rel (slash-separated, relative to the search root) against pattern. A pattern
// without '/' matches the base name, with `**` meaning `*`; a pattern with '/' matches the whole
// relative path, `**` matching any number of directories.
func globMatch(pattern, rel string) (bool, error) {
	if !strings.Contains(pattern, "/") {
		return path.Match(strings.ReplaceAll(pattern, "**", "*"), path.Base(rel))
	}
	return matchSegments(strings.Split(pattern, "/"), strings.Split(rel, "/"))
}

func matchSegments(ps, ns []string) (bool, error) {
	for len(ps) > 0 {
		if ps[0] == "**" {
			for i := 0; i <= len(ns); i++ {
				if ok, err := matchSegments(ps[1:], ns[i:]); err != nil || ok {
					return ok, err
				}
			}
			return false, nil
		}
		if len(ns) == 0 {
			return false, nil
		}
		if ok, err := path.Match(ps[0], ns[0]); err != nil || !ok {
			return false, err
		}
		ps, ns = ps[1:], ns[1:]
	}
	return len(ns) == 0, nil
}

// validGlob rejects malformed patterns and ones that would make matching expensive.
func validGlob(pattern string) error {
	if len(pattern) > 1024 {
		return badRequest(CodeInvalidRequestBody, "pattern longer than 1024 bytes")
	}
	if strings.Count(pattern, "**") > 4 {
		return badRequest(CodeInvalidRequestBody, "pattern has more than 4 '**'")
	}
	for _, seg := range strings.Split(strings.ReplaceAll(pattern, "**", "*"), "/") {
		if _, err := path.Match(seg, ""); err != nil {
			return badRequest(CodeInvalidRequestBody, "bad pattern %q: %v", pattern, err)
		}
	}
	return nil
}

// tempName returns a fresh hidden file name next to host path p.
func tempName(p string) string {
	return filepath.Join(filepath.Dir(p), ".execd-"+newID()[:12]+".tmp")
}

// chownLike gives host path p the owner and group of fi (best effort when not root).
func chownLike(p string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if err := os.Lchown(p, int(st.Uid), int(st.Gid)); err != nil && !errors.Is(err, fs.ErrPermission) {
		return err
	}
	return nil
}
