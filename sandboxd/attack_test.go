package sandboxd_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// The attacks of issue 41 (F1-F3), kept as tests: each failed on the code
// before its fix.

// swapLoop is a shell command that, inside a sandbox, swaps directory dir/a
// with a symbolic link dir/b -> / (renameat2 RENAME_EXCHANGE, through perl's
// syscall: x86_64 number 316) as fast as it can, for secs seconds.
func swapLoop(dir string, secs int) string {
	return fmt.Sprintf(`cd %s && mkdir -p a && touch a/inside && ln -sfn / b && `+
		`perl -e 'my ($x, $y) = ("a", "b"); my $end = time + %d; while (time < $end) { for (1..1000) { syscall(316, -100, $x, -100, $y, 2) } }' `+
		`>/dev/null 2>&1 &`, dir, secs)
}

// raceSeconds is how long TestVolumeSwapRace races: SANDBOXD_RACE_SECONDS
// (make soak runs it for minutes), else 20.
func raceSeconds() int {
	if n, err := strconv.Atoi(os.Getenv("SANDBOXD_RACE_SECONDS")); err == nil && n > 0 {
		return n
	}
	return 20
}

// TestVolumeSwapRace is F1: a running sandbox that shares a volume swaps a
// component of another sandbox's subPath for a symbolic link to / while that
// sandbox is created, as fast as it can. Before the fix the server resolved
// the path at create and the runtime bound it later, and 3 of 6 new
// sandboxes got the host's / at their mount path. Now no new sandbox ever
// sees anything but the volume's own directory (or fails to start): for a
// pvc volume and for a host volume below a volume root.
func TestVolumeSwapRace(t *testing.T) {
	root := t.TempDir()
	// A file only the host's / holds, at a path the sandboxes do not have.
	probe := filepath.Join(t.TempDir(), "host-root-probe")
	if err := os.WriteFile(probe, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, base := startServer(t, sandboxd.Config{VolumeRoots: []string{root}, MaxSandboxes: 64})
	shared := filepath.Join(root, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil { // any sandbox root may write there
		t.Fatal(err)
	}
	secs := raceSeconds()
	attacker := create(t, base, map[string]any{"volumes": []any{
		map[string]any{"name": "p", "mountPath": "/vol/pvc", "pvc": map[string]any{"claimName": "race"}},
		map[string]any{"name": "h", "mountPath": "/vol/host", "host": map[string]any{"path": filepath.Join(root, "shared")}},
	}})
	au, atok := execdEndpoint(t, base, attacker, false)
	if _, code := run(t, au, atok, swapLoop("/vol/pvc", secs)+" "+swapLoop("/vol/host", secs)); code != 0 {
		t.Fatalf("start the swap loops: exit %d", code)
	}
	// Both swaps run: each name is seen as a link and as a directory.
	for _, dir := range []string{filepath.Join(s.DataDir(), "volumes", "race"), shared} {
		seen := map[bool]bool{}
		testenv.Eventually(t, 10*time.Second, func() error {
			if fi, err := os.Lstat(filepath.Join(dir, "a")); err == nil {
				seen[fi.Mode()&os.ModeSymlink != 0] = true
			}
			if !seen[true] || !seen[false] {
				return fmt.Errorf("%s/a seen as link %v, as directory %v: the swap does not run", dir, seen[true], seen[false])
			}
			return nil
		})
	}
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	tries, started, refused := 0, 0, 0
	for time.Now().Before(deadline) {
		tries++
		vol := map[string]any{"name": "v", "mountPath": "/mnt/v", "pvc": map[string]any{"claimName": "race"}, "subPath": "a"}
		if tries%2 == 0 {
			vol = map[string]any{"name": "v", "mountPath": "/mnt/v", "host": map[string]any{"path": filepath.Join(root, "shared", "a")}}
		}
		r := call(t, "POST", base+"/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "host"},
			"entrypoint": []string{"tail", "-f", "/dev/null"}, "volumes": []any{vol}})
		if r.Status == http.StatusBadRequest {
			refused++ // the create met the link: refused, nothing made
			continue
		}
		wantStatus(t, r, http.StatusAccepted)
		var out struct{ ID string }
		r.decode(t, &out)
		sb := waitStarted(t, base, out.ID)
		if sb.Status.State == sandboxd.StateRunning {
			started++
			u, tok := execdEndpoint(t, base, out.ID, false)
			lines, _ := run(t, u, tok, "test -e /mnt/v"+probe+" && echo HOST-ROOT; test -e /mnt/v/inside && echo VOLUME")
			got := strings.Join(lines, " ")
			if strings.Contains(got, "HOST-ROOT") || got != "VOLUME" {
				t.Fatalf("try %d (%v): the sandbox's volume shows %q, want the volume's own directory", tries, vol, got)
			}
		}
		wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+out.ID, nil), http.StatusNoContent)
	}
	t.Logf("%d creates raced the swap for %ds: %d refused, %d started, none saw the host's root", tries, secs, refused, started)
	if started == 0 {
		t.Errorf("no sandbox started in %d tries: the race was not run", tries)
	}
}

// waitStarted waits until sandbox id is Running or Failed.
func waitStarted(t *testing.T, base, id string) sandboxd.Sandbox {
	t.Helper()
	var sb sandboxd.Sandbox
	testenv.Eventually(t, 30*time.Second, func() error {
		sb = getSandbox(t, base, id)
		if st := sb.Status.State; st != sandboxd.StateRunning && st != sandboxd.StateFailed {
			return fmt.Errorf("state %s", st)
		}
		return nil
	})
	return sb
}

// TestVolumeSubPathThroughLink is F2: a subPath through a symbolic link that
// a sandbox planted in its volume is refused, and the server creates nothing
// where the link leads (before the fix it made, and chowned to the
// sandboxes' uid, every missing directory there before answering 400).
func TestVolumeSubPathThroughLink(t *testing.T) {
	root := t.TempDir()
	outside, outside2 := t.TempDir(), t.TempDir()
	s, base := startServer(t, sandboxd.Config{VolumeRoots: []string{root}})
	if err := os.Mkdir(filepath.Join(root, "shared"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "shared"), 0o777); err != nil {
		t.Fatal(err)
	}
	id := create(t, base, map[string]any{"volumes": []any{
		map[string]any{"name": "p", "mountPath": "/vol/pvc", "pvc": map[string]any{"claimName": "planted"}},
		map[string]any{"name": "h", "mountPath": "/vol/host", "host": map[string]any{"path": filepath.Join(root, "shared")}},
	}})
	u, tok := execdEndpoint(t, base, id, false)
	if _, code := run(t, u, tok, "ln -s "+outside+" /vol/pvc/link && ln -s "+outside+" /vol/host/link && mkdir -p /vol/pvc/d && ln -s "+outside2+" /vol/pvc/d/etc"); code != 0 {
		t.Fatalf("plant the links: exit %d", code)
	}
	for _, c := range []struct {
		vol  map[string]any
		code string
	}{
		{map[string]any{"pvc": map[string]any{"claimName": "planted"}, "subPath": "link/made/here"}, "VOLUME::INVALID_SUB_PATH"},
		{map[string]any{"pvc": map[string]any{"claimName": "planted"}, "subPath": "link"}, "VOLUME::INVALID_SUB_PATH"},
		{map[string]any{"pvc": map[string]any{"claimName": "planted"}, "subPath": "d/etc/made"}, "VOLUME::INVALID_SUB_PATH"},
		{map[string]any{"host": map[string]any{"path": filepath.Join(root, "shared", "link", "made")}}, "VOLUME::HOST_PATH_NOT_ALLOWED"},
	} {
		c.vol["name"], c.vol["mountPath"] = "v", "/mnt/v"
		r := call(t, "POST", base+"/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "host"},
			"entrypoint": []string{"tail", "-f", "/dev/null"}, "volumes": []any{c.vol}})
		wantStatus(t, r, http.StatusBadRequest)
		wantCode(t, r, c.code)
	}
	for _, dir := range []string{outside, outside2} {
		if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
			t.Errorf("the server made %v (%v) in %s, where a planted link leads", ents, err, dir)
		}
	}
	// The link itself, and what the sandbox made, stay as they were.
	if fi, err := os.Lstat(filepath.Join(s.DataDir(), "volumes", "planted", "link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("planted link: %v %v", fi, err)
	}
}

// TestSandboxRootsPrivate is F3: an unprivileged host user, and a host
// process running as another sandbox's root, cannot reach a sandbox's root;
// the root is mounted nosuid,nodev; every sandbox has a host id range of its
// own, so one sandbox's files are not another's.
func TestSandboxRootsPrivate(t *testing.T) {
	s, base := startServer(t, sandboxd.Config{})
	a := create(t, base, nil)
	b := create(t, base, nil)
	au, atok := execdEndpoint(t, base, a, false)
	bu, btok := execdEndpoint(t, base, b, false)
	const secret = "/root/secret"
	if _, code := run(t, au, atok, "echo s3cret > "+secret+" && chmod 600 "+secret+" && echo open > /etc/world-readable && cp /bin/sh /tmp/suid-sh && chmod 4755 /tmp/suid-sh"); code != 0 {
		t.Fatalf("write the files: exit %d", code)
	}
	idmap := func(u, tok string) string {
		lines, _ := run(t, u, tok, "cat /proc/self/uid_map")
		return strings.Join(strings.Fields(strings.Join(lines, " ")), " ")
	}
	amap, bmap := idmap(au, atok), idmap(bu, btok)
	if amap == bmap {
		t.Fatalf("two sandboxes share the uid map %q", amap)
	}
	var abase, bbase int
	fmt.Sscanf(amap, "0 %d %d", &abase, new(int))
	fmt.Sscanf(bmap, "0 %d %d", &bbase, new(int))
	if abase < sandboxd.IDMapHost || bbase < sandboxd.IDMapHost || abs(abase-bbase) < sandboxd.IDMapSize {
		t.Fatalf("uid maps %q and %q overlap or start below %d", amap, bmap, sandboxd.IDMapHost)
	}

	// Each sandbox's session keyring counts against its own host uid's key
	// quota (kernel.keys.maxkeys), not one quota shared by every sandbox.
	if b, err := os.ReadFile("/proc/key-users"); err == nil {
		for _, id := range []int{abase, bbase} {
			if !strings.Contains(string(b), fmt.Sprintf("%d:", id)) {
				t.Errorf("/proc/key-users has no keys of uid %d:\n%s", id, b)
			}
		}
	}
	rootA := s.RootDir(a)
	dir := filepath.Dir(rootA)
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o777 != 0o700 || int(st.Uid) != abase {
		t.Errorf("%s: mode %o owner %d, want 700 owned by the sandbox's root %d", dir, st.Mode&0o777, st.Uid, abase)
	}
	if opts := mountOptions(t, rootA); !strings.Contains(","+opts+",", ",nosuid,") || !strings.Contains(","+opts+",", ",nodev,") {
		t.Errorf("root of %s mounted %q, want nosuid,nodev", a, opts)
	}
	// As an unprivileged host user (nobody), and as sandbox b's root on the
	// host (what a setuid file b planted would run as), every way in fails.
	for _, who := range []struct {
		name string
		uid  int
	}{{"nobody", 65534}, {"sandbox b's root", bbase}} {
		for _, argv := range [][]string{
			{"cat", filepath.Join(rootA, secret)},
			{"cat", filepath.Join(rootA, "etc", "world-readable")},
			{"ls", rootA},
			{filepath.Join(rootA, "tmp", "suid-sh"), "-c", "id -u"},
		} {
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(who.uid), Gid: uint32(who.uid)}}
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Errorf("as %s, %v succeeded: %q", who.name, argv, out)
			}
		}
	}
	// Inside b, the secret of a is nowhere to be seen, and b's own root owns
	// its files under its own host ids.
	if lines, _ := run(t, bu, btok, "cat "+secret+" 2>&1"); strings.Contains(strings.Join(lines, ""), "s3cret") {
		t.Errorf("sandbox b reads a's secret")
	}
	p := filepath.Join(s.DataDir(), "sandboxes", a, "fs", "layers", "upper", "root", "secret")
	if err := syscall.Stat(p, &st); err != nil || int(st.Uid) != abase {
		t.Errorf("a's secret on the host: uid %d (%v), want %d", st.Uid, err, abase)
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// mountOptions returns the per-mount options of the mount at p, from the
// host's mountinfo.
func mountOptions(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	opts := ""
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[4] == p {
			opts = f[5] // the last mount at p is the one seen
		}
	}
	if opts == "" {
		t.Fatalf("nothing mounted at %s", p)
	}
	return opts
}

// TestEntrypointLogBounded is F5: the entrypoint log lies outside the disk
// quota, so neither the entrypoint nor an exec that makes the entrypoint
// write (here through a FIFO it relays, as a ptrace of it could) grows it past
// Config.EntrypointLogLimit. Before the fix it grew to 400 MB under a
// 256 MiB quota.
func TestEntrypointLogBounded(t *testing.T) {
	const limit = 1 << 20
	s, base := startServer(t, sandboxd.Config{EntrypointLogLimit: limit})
	id := create(t, base, map[string]any{"entrypoint": []string{"sh", "-c",
		"head -c 20000000 /dev/zero | tr '\\0' e; mkfifo /tmp/relay; echo entrypoint-end; while :; do cat /tmp/relay; done"}})
	u, tok := execdEndpoint(t, base, id, false)
	log := filepath.Join(s.DataDir(), "sandboxes", id, "entrypoint.log")
	testenv.Eventually(t, 30*time.Second, func() error {
		b, _ := os.ReadFile(log)
		if !strings.Contains(string(b), "entrypoint-end") {
			return fmt.Errorf("entrypoint log has %d bytes, no end line yet", len(b))
		}
		return nil
	})
	// The entrypoint relays what an exec writes into /tmp/relay. It is
	// written through one open of the FIFO: a second open can find the
	// relay's cat still holding it after reading the end of the first,
	// and the write after that cat has closed it dies of SIGPIPE.
	if out, code := run(t, u, tok, "(head -c 30000000 /dev/zero | tr '\\0' x; echo exec-end) 2>&1 >/tmp/relay"); code != 0 {
		t.Fatalf("write into the entrypoint's output: exit %d: %q", code, out)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		b, _ := os.ReadFile(log)
		if !strings.HasSuffix(string(b), "exec-end\n") {
			return fmt.Errorf("entrypoint log has %d bytes, not the exec's end yet", len(b))
		}
		return nil
	})
	fi, err := os.Stat(log)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > limit {
		t.Errorf("entrypoint log is %d bytes after 50 MB of output, limit %d", fi.Size(), limit)
	}
	b, _ := os.ReadFile(log)
	if !strings.HasPrefix(string(b), "[sandboxd: ") {
		t.Errorf("the log does not say what it dropped: starts %q", b[:min(len(b), 60)])
	}
}

// TestOldRuncRefused: a runc without the fixes of the November 2025
// advisories is refused at Start, naming the fix, unless AllowOldRuntime.
func TestOldRuncRefused(t *testing.T) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		testenv.SkipOrFail(t, "runc not installed (make deps)")
	}
	old := filepath.Join(t.TempDir(), "runc")
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'runc version 1.1.5'; echo 'commit: unknown'; exit 0; fi\nexec %s \"$@\"\n", runc)
	if err := os.WriteFile(old, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := sandboxd.Open(t.Context(), sandboxd.Config{Runtime: old})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Start(t.Context())
	s.Close(t.Context())
	if !errors.Is(err, sandboxd.ErrIsolationUnavailable) || !strings.Contains(err.Error(), "CVE-2025-31133") || !strings.Contains(err.Error(), "--allow-old-runtime") {
		t.Errorf("Start with runc 1.1.5: %v, want ErrIsolationUnavailable naming the CVEs and --allow-old-runtime", err)
	}
	_, base := startServer(t, sandboxd.Config{Runtime: old, AllowOldRuntime: true})
	waitState(t, base, create(t, base, nil), sandboxd.StateRunning)
}

// TestMessagesHideServerPaths is F10: a failure a client reads (a sandbox's
// status after a restore that met a missing blob) names what failed, not
// the server's data directory; and the lifecycle key is checked.
func TestMessagesHideServerPaths(t *testing.T) {
	s, base := startServer(t, sandboxd.Config{APIKey: "k3y"})
	key := []string{sandboxd.APIKeyHeader, "k3y"}
	wantStatus(t, call(t, "GET", base+"/v1/sandboxes", nil, sandboxd.APIKeyHeader, "k3x"), http.StatusUnauthorized)
	r := call(t, "POST", base+"/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "host"},
		"entrypoint": []string{"tail", "-f", "/dev/null"}}, key...)
	wantStatus(t, r, http.StatusAccepted)
	var sb struct{ ID string }
	r.decode(t, &sb)
	u, tok := execdEndpointKey(t, base, sb.ID, key)
	sh(t, u, tok, "echo data > /root/file")
	r = call(t, "POST", base+"/v1/sandboxes/"+sb.ID+"/snapshots", map[string]any{}, append(key, "Prefer", "wait=30")...)
	var snap sandboxd.Snapshot
	r.decode(t, &snap)
	if snap.Status.State != sandboxd.SnapshotReady {
		t.Fatalf("snapshot: %s", r.Body)
	}
	// Every blob becomes a directory: the restore fails reading it, and the
	// error it meets names the blob's path.
	err := filepath.WalkDir(filepath.Join(s.DataDir(), "snapshots", "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		if err := os.Remove(p); err != nil {
			return err
		}
		return os.Mkdir(p, 0o700)
	})
	if err != nil {
		t.Fatal(err)
	}
	r = call(t, "POST", base+"/v1/sandboxes", map[string]any{"snapshotId": snap.ID}, key...)
	wantStatus(t, r, http.StatusAccepted)
	var out struct{ ID string }
	r.decode(t, &out)
	var got sandboxd.Sandbox
	testenv.Eventually(t, 20*time.Second, func() error {
		r := call(t, "GET", base+"/v1/sandboxes/"+out.ID, nil, key...)
		r.decode(t, &got)
		if got.Status.State != sandboxd.StateFailed {
			return fmt.Errorf("state %s", got.Status.State)
		}
		return nil
	})
	if strings.Contains(got.Status.Message, s.DataDir()) || !strings.Contains(got.Status.Message, "<data>") {
		t.Errorf("status message %q names the data directory %s", got.Status.Message, s.DataDir())
	}
}

// execdEndpointKey is execdEndpoint on a server that wants the API key.
func execdEndpointKey(t *testing.T, base, id string, key []string) (string, string) {
	t.Helper()
	r := call(t, "GET", fmt.Sprintf("%s/v1/sandboxes/%s/endpoints/%d", base, id, sandboxd.ExecdPort), nil, key...)
	wantStatus(t, r, http.StatusOK)
	var ep sandboxd.Endpoint
	r.decode(t, &ep)
	return "http://" + ep.Endpoint, ep.Headers[sandboxd.ExecdTokenHeader]
}

// TestVolumeQuota is issue 41's last quota: a managed (pvc) volume has a
// disk of its own, of its request's storage (or Config.VolumeQuota), so a
// sandbox cannot fill the host's disk through it; the volume and its data
// survive a restart of the server, and a volume deleted with its sandbox
// takes its disk along.
func TestVolumeQuota(t *testing.T) {
	data := t.TempDir()
	s, base := startServer(t, sandboxd.Config{DataDir: data})
	vol := map[string]any{"name": "v", "mountPath": "/vol", "pvc": map[string]any{"claimName": "small", "storage": "16Mi"}}
	id := create(t, base, map[string]any{"volumes": []any{vol}})
	u, tok := execdEndpoint(t, base, id, false)
	if got := sh(t, u, tok, "ls -A /vol | wc -l"); got != "0" {
		t.Errorf("a new volume holds %s entries, want none", got)
	}
	out := sh(t, u, tok, "echo kept > /vol/kept; head -c 64000000 /dev/zero > /vol/big 2>&1; echo $?; cat /vol/kept")
	if !strings.HasPrefix(out, "1") || !strings.HasSuffix(out, "kept") {
		t.Errorf("writing 64 MB into a 16 MiB volume: %q, want a failure and the earlier file kept", out)
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err != nil || !strings.Contains(string(b), filepath.Join(data, "volumes", "small")+" ") {
		t.Errorf("the volume's disk is not mounted on its directory (%v)", err)
	}
	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+id, nil), http.StatusNoContent)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, base = startServer(t, sandboxd.Config{DataDir: data})
	vol["pvc"].(map[string]any)["deleteOnSandboxTermination"] = false
	id = create(t, base, map[string]any{"volumes": []any{vol}})
	u, tok = execdEndpoint(t, base, id, false)
	if got := sh(t, u, tok, "cat /vol/kept"); got != "kept" {
		t.Errorf("after a restart the volume holds %q, want kept", got)
	}
	gone := map[string]any{"name": "g", "mountPath": "/gone", "pvc": map[string]any{"claimName": "gone", "deleteOnSandboxTermination": true}}
	id2 := create(t, base, map[string]any{"volumes": []any{gone}})
	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+id2, nil), http.StatusNoContent)
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, p := range []string{filepath.Join(data, "volumes", "gone"), filepath.Join(data, "volumes", ".disks", "gone.img")} {
			if _, err := os.Stat(p); err == nil {
				return fmt.Errorf("%s still there", p)
			}
		}
		return nil
	})
}
