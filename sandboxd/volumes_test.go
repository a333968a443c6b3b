package sandboxd_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd"
)

// TestVolumes binds a host directory below a volume root (read-write and
// read-only) and a managed pvc volume that outlives its sandbox.
func TestVolumes(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "hello.txt"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A host directory owned by host root is the sandbox root's through the
	// volume's idmapped bind: it may write there (as under Docker), and what
	// it writes is owned by host root.
	shared := filepath.Join(root, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	s, base := startServer(t, sandboxd.Config{VolumeRoots: []string{root}})
	vols := []any{
		map[string]any{"name": "ro", "mountPath": "/mnt/ro", "readOnly": true, "host": map[string]any{"path": root}},
		map[string]any{"name": "rw", "mountPath": "/mnt/rw", "host": map[string]any{"path": shared}},
		map[string]any{"name": "new", "mountPath": "/mnt/new", "host": map[string]any{"path": filepath.Join(root, "made", "here")}},
		map[string]any{"name": "data", "mountPath": "/data", "pvc": map[string]any{"claimName": "cache"}},
	}
	id := create(t, base, map[string]any{"volumes": vols})
	u, tok := execdEndpoint(t, base, id, false)
	for _, c := range []struct {
		cmd  string
		want string
		code int
	}{
		{"cat /mnt/ro/hello.txt", "from the host", 0},
		{"touch /mnt/ro/x 2>&1; echo $?", "", -1},
		{"echo written > /mnt/rw/out && cat /mnt/rw/out", "written", 0},
		{"echo kept > /data/kept && stat -c %u /data/kept", "0", 0},
		{"test -d /mnt/new && echo yes", "yes", 0},
	} {
		lines, code := run(t, u, tok, c.cmd)
		got := strings.Join(lines, "\n")
		if c.code == -1 {
			if !strings.Contains(got, "Read-only file system") {
				t.Errorf("%s: %q, want Read-only file system", c.cmd, got)
			}
			continue
		}
		if got != c.want || code != c.code {
			t.Errorf("%s: %q exit %d, want %q exit %d", c.cmd, got, code, c.want, c.code)
		}
	}
	if b, err := os.ReadFile(filepath.Join(shared, "out")); err != nil || string(b) != "written\n" {
		t.Errorf("host side of rw volume: %q %v", b, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(shared, "out"), &st); err != nil || st.Uid != 0 {
		t.Errorf("host side of a file the sandbox's root wrote: uid %d (%v), want 0", st.Uid, err)
	}
	pvc := filepath.Join(s.DataDir(), "volumes", "cache")
	for _, p := range []string{pvc, filepath.Join(pvc, "kept")} {
		if err := syscall.Stat(p, &st); err != nil || st.Uid != 0 {
			t.Errorf("%s: uid %d (%v), want 0 (the ids the sandbox sees)", p, st.Uid, err)
		}
	}
	if err := syscall.Stat(filepath.Join(s.DataDir(), "volumes"), &st); err != nil || st.Mode&0o777 != 0o700 {
		t.Errorf("volumes dir mode %o (%v), want 700", st.Mode&0o777, err)
	}
	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+id, nil), http.StatusNoContent)

	// The pvc volume is kept for the next sandbox that names it.
	id2 := create(t, base, map[string]any{"volumes": vols[3:]})
	u2, tok2 := execdEndpoint(t, base, id2, false)
	if lines, _ := run(t, u2, tok2, "cat /data/kept"); strings.Join(lines, "") != "kept" {
		t.Errorf("pvc volume in a second sandbox: %q, want kept", lines)
	}
	// createIfNotExists=false on a missing volume, and a path outside the
	// roots (also through a symlink) are refused.
	if err := os.Symlink("/etc", filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		vol  map[string]any
		code string
	}{
		{map[string]any{"name": "m", "mountPath": "/m", "pvc": map[string]any{"claimName": "missing", "createIfNotExists": false}}, "VOLUME::PVC_NOT_FOUND"},
		{map[string]any{"name": "m", "mountPath": "/m", "host": map[string]any{"path": "/etc"}}, "VOLUME::HOST_PATH_NOT_ALLOWED"},
		{map[string]any{"name": "m", "mountPath": "/m", "host": map[string]any{"path": filepath.Join(root, "escape")}}, "VOLUME::HOST_PATH_NOT_ALLOWED"},
		{map[string]any{"name": "m", "mountPath": "/m", "nfs": map[string]any{}}, "VOLUME::UNSUPPORTED_BACKEND"},
	} {
		r := call(t, "POST", base+"/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "host"},
			"entrypoint": []string{"tail", "-f", "/dev/null"}, "volumes": []any{c.vol}})
		wantStatus(t, r, http.StatusBadRequest)
		wantCode(t, r, c.code)
	}
}
