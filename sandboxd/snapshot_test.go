package sandboxd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// snapshot posts a snapshot of sandbox id and returns it (state Creating).
func snapshot(t testing.TB, base, id, name string) sandboxd.Snapshot {
	t.Helper()
	var body any = map[string]any{}
	if name != "" {
		body = map[string]any{"name": name}
	}
	r := call(t, "POST", base+"/v1/sandboxes/"+id+"/snapshots", body)
	wantStatus(t, r, http.StatusAccepted)
	var snap sandboxd.Snapshot
	r.decode(t, &snap)
	if snap.ID == "" || snap.SandboxID != id || snap.Status.State != sandboxd.SnapshotCreating {
		t.Fatalf("create snapshot = %+v, want a Creating snapshot of %s", snap, id)
	}
	if got, want := r.Header.Get("Location"), "/v1/snapshots/"+snap.ID; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	return snap
}

func getSnapshot(t testing.TB, base, id string) sandboxd.Snapshot {
	t.Helper()
	r := call(t, "GET", base+"/v1/snapshots/"+id, nil)
	wantStatus(t, r, http.StatusOK)
	var snap sandboxd.Snapshot
	r.decode(t, &snap)
	return snap
}

func waitSnapshot(t testing.TB, base, id string, want sandboxd.SnapshotState) sandboxd.Snapshot {
	t.Helper()
	var snap sandboxd.Snapshot
	testenv.Eventually(t, 25*time.Second, func() error {
		snap = getSnapshot(t, base, id)
		if snap.Status.State == sandboxd.SnapshotFailed && want != sandboxd.SnapshotFailed {
			t.Fatalf("snapshot %s failed: %s: %s", id, snap.Status.Reason, snap.Status.Message)
		}
		if snap.Status.State != want {
			return fmt.Errorf("snapshot state = %s, want %s", snap.Status.State, want)
		}
		return nil
	})
	return snap
}

// fromSnapshot creates a sandbox from snapshot snapID, waits until it runs
// and returns its id and execd endpoint.
func fromSnapshot(t testing.TB, base, snapID string) (string, string, string) {
	t.Helper()
	r := call(t, "POST", base+"/v1/sandboxes", map[string]any{"snapshotId": snapID,
		"resourceLimits": map[string]string{"cpu": "500m", "memory": "512Mi"}})
	wantStatus(t, r, http.StatusAccepted)
	var out struct{ ID string }
	r.decode(t, &out)
	waitState(t, base, out.ID, sandboxd.StateRunning)
	u, tok := execdEndpoint(t, base, out.ID, false)
	return out.ID, u, tok
}

// sh runs command in a sandbox and fails the test unless it exits 0.
func sh(t testing.TB, u, tok, command string) string {
	t.Helper()
	lines, code := run(t, u, tok, command)
	if code != 0 {
		t.Fatalf("%q exited %d: %q", command, code, lines)
	}
	return strings.Join(lines, "\n")
}

// blobBytes sums the sizes of the stored snapshot blobs. The GC may remove a
// blob while the walk runs: a file gone by then counts as removed.
func blobBytes(t testing.TB, dataDir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(filepath.Join(dataDir, "snapshots", "blobs"), func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p != filepath.Join(dataDir, "snapshots", "blobs") {
			return nil
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("blob dir: %v", err)
	}
	return n
}

// TestSnapshotRestore snapshots a sandbox with new, changed and deleted files,
// creates two sandboxes from the snapshot and checks that they start from its
// content, diverge independently and leave the source as it was.
func TestSnapshotRestore(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	src := create(t, base, nil)
	waitState(t, base, src, sandboxd.StateRunning)
	su, stok := execdEndpoint(t, base, src, false)
	// /srv is in the lower layer and /etc/debian_version in a host directory's
	// (where the host has one): both deletions are whiteouts.
	sh(t, su, stok, `mkdir -p /root/proj/deep && echo one > /root/proj/a.txt && echo deep > /root/proj/deep/b.txt &&
		chmod 0750 /root/proj/deep && ln -s a.txt /root/proj/link && echo edited >> /etc/hosts && rmdir /srv &&
		rm -f /etc/debian_version && echo gone > /root/proj/gone.txt && rm /root/proj/gone.txt &&
		{ rm -rf /etc/ssl && mkdir /etc/ssl && echo mine > /etc/ssl/only; } 2>&1`)
	hosts := sh(t, su, stok, "cat /etc/hosts")

	snap := snapshot(t, base, src, "base")
	ready := waitSnapshot(t, base, snap.ID, sandboxd.SnapshotReady)
	if ready.Name != "base" || ready.SandboxID != src || ready.Status.Reason != sandboxd.ReasonSnapshotReady {
		t.Errorf("ready snapshot = %+v", ready)
	}
	if st := getSandbox(t, base, src).Status.State; st != sandboxd.StateRunning {
		t.Errorf("source state after the snapshot = %s, want Running", st)
	}

	a, au, atok := fromSnapshot(t, base, snap.ID)
	_, bu, btok := fromSnapshot(t, base, snap.ID)
	got := getSandbox(t, base, a)
	if got.SnapshotID != snap.ID || got.Image != nil || strings.Join(got.Entrypoint, " ") != "tail -f /dev/null" {
		t.Errorf("sandbox from snapshot = snapshotId %q image %+v entrypoint %q, want %q, none, the default", got.SnapshotID, got.Image, got.Entrypoint, snap.ID)
	}
	const check = `cat /root/proj/a.txt /root/proj/deep/b.txt; readlink /root/proj/link; stat -c %a /root/proj/deep;
		test -e /srv && echo srv-present; test -e /etc/debian_version && echo debian-present; test -e /root/proj/gone.txt && echo gone-present;
		ls /etc/ssl`
	want := "one\ndeep\na.txt\n750\nonly"
	for _, c := range []struct{ name, u, tok string }{{"a", au, atok}, {"b", bu, btok}} {
		if got := sh(t, c.u, c.tok, check); got != want {
			t.Errorf("sandbox %s from the snapshot:\n got %q\nwant %q", c.name, got, want)
		}
		if got := sh(t, c.u, c.tok, "cat /etc/hosts"); got != hosts {
			t.Errorf("sandbox %s /etc/hosts = %q, want the source's %q", c.name, got, hosts)
		}
	}

	// The children diverge from each other and from the source.
	sh(t, au, atok, "echo from-a > /root/proj/a.txt && echo only-a > /root/proj/new.txt")
	sh(t, bu, btok, "echo from-b > /root/proj/a.txt && rm -r /root/proj/deep")
	if got, want := sh(t, au, atok, "cat /root/proj/a.txt /root/proj/new.txt /root/proj/deep/b.txt"), "from-a\nonly-a\ndeep"; got != want {
		t.Errorf("sandbox a = %q, want %q", got, want)
	}
	if got, want := sh(t, bu, btok, "cat /root/proj/a.txt; test -e /root/proj/new.txt && echo new; test -e /root/proj/deep || echo no-deep"), "from-b\nno-deep"; got != want {
		t.Errorf("sandbox b = %q, want %q", got, want)
	}
	if got, want := sh(t, su, stok, "cat /root/proj/a.txt /root/proj/deep/b.txt; test -e /root/proj/new.txt && echo new; true"), "one\ndeep"; got != want {
		t.Errorf("source after the children wrote = %q, want %q", got, want)
	}

	// A snapshot of a child holds the child's state, and a sandbox from it
	// sees it.
	snapA := snapshot(t, base, a, "")
	waitSnapshot(t, base, snapA.ID, sandboxd.SnapshotReady)
	_, gu, gtok := fromSnapshot(t, base, snapA.ID)
	if got, want := sh(t, gu, gtok, "cat /root/proj/a.txt /root/proj/new.txt"), "from-a\nonly-a"; got != want {
		t.Errorf("grandchild = %q, want %q", got, want)
	}
	// Snapshots outlive their sandbox.
	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+src, nil), http.StatusNoContent)
	if st := getSnapshot(t, base, snap.ID).Status.State; st != sandboxd.SnapshotReady {
		t.Errorf("snapshot after its sandbox's deletion: %s, want Ready", st)
	}
}

// TestSnapshotAPIErrors covers the error statuses, the list filters and
// pagination, and delete while Creating.
// TestSnapshotCreatingRecordIsFlushed: the Creating record of a snapshot is
// flushed to disk, with its directory, before the create is answered (what
// a restart finds the snapshot again from, see TestSnapshotServerCrash).
func TestSnapshotCreatingRecordIsFlushed(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)
	var mu sync.Mutex
	var synced []string
	defer sandboxd.SetSyncHook(func(p string) {
		mu.Lock()
		synced = append(synced, p)
		mu.Unlock()
	})()
	snap := snapshot(t, base, id, "flushed")
	mu.Lock()
	got := slices.Clone(synced)
	mu.Unlock()
	var file, dir string
	for _, p := range got {
		if filepath.Base(p) == snap.ID+".json.tmp" {
			file = p
		}
	}
	for _, p := range got {
		if file != "" && p == filepath.Dir(file) {
			dir = p
		}
	}
	if file == "" || dir == "" {
		t.Errorf("flushed before the answer: %q; want %s's record and its directory", got, snap.ID)
	}
	waitSnapshot(t, base, snap.ID, sandboxd.SnapshotReady)
}

// TestSnapshotOutcomeRecordedAfterTheAnswer: the answer that waits for a
// capture (Prefer: wait) does not wait for the outcome's record to be
// written; the record follows, and a snapshot deleted before its Ready record
// was written stays deleted, on disk and after a restart.
func TestSnapshotOutcomeRecordedAfterTheAnswer(t *testing.T) {
	dir := t.TempDir()
	s, base := startServer(t, sandboxd.Config{DataDir: dir})
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)
	held, release := make(chan string, 2), make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseAll) // before the server's Close, which waits for the writes
	s.SetSnapshotRecordHook(func(id string) { held <- id; <-release })
	onDisk := func(snap string) (sandboxd.SnapshotState, error) {
		b, err := os.ReadFile(filepath.Join(dir, "snapshots", "records", snap+".json"))
		if err != nil {
			return "", err
		}
		var r sandboxd.Snapshot
		if err := json.Unmarshal(b, &r); err != nil {
			return "", err
		}
		return r.Status.State, nil
	}
	post := func() sandboxd.Snapshot {
		t.Helper()
		r := call(t, "POST", base+"/v1/sandboxes/"+id+"/snapshots", map[string]any{}, "Prefer", "wait=30")
		wantStatus(t, r, http.StatusAccepted)
		var snap sandboxd.Snapshot
		r.decode(t, &snap)
		if snap.Status.State != sandboxd.SnapshotReady || r.Header.Get("Preference-Applied") != "wait" {
			t.Fatalf("answer with the record write held: %+v, Preference-Applied %q; want Ready, wait", snap, r.Header.Get("Preference-Applied"))
		}
		select {
		case got := <-held:
			if got != snap.ID {
				t.Fatalf("record hook saw %s, want %s", got, snap.ID)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the record of %s was not written after its answer", snap.ID)
		}
		return snap
	}

	kept := post()
	if st, err := onDisk(kept.ID); st != sandboxd.SnapshotCreating {
		t.Errorf("record on disk while its write is held: %s (%v), want %s", st, err, sandboxd.SnapshotCreating)
	}
	deleted := post()
	wantStatus(t, call(t, "DELETE", base+"/v1/snapshots/"+deleted.ID, nil), http.StatusNoContent)
	releaseAll()
	testenv.Eventually(t, 10*time.Second, func() error {
		if st, err := onDisk(kept.ID); st != sandboxd.SnapshotReady {
			return fmt.Errorf("record of %s on disk: %s (%v), want %s", kept.ID, st, err, sandboxd.SnapshotReady)
		}
		return nil
	})
	if err := s.Close(context.Background()); err != nil { // waits for every write
		t.Fatal(err)
	}
	if _, err := onDisk(deleted.ID); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("record of the deleted %s after its held write: %v, want none", deleted.ID, err)
	}

	_, base = startServer(t, sandboxd.Config{DataDir: dir})
	if got := getSnapshot(t, base, kept.ID); got.Status.State != sandboxd.SnapshotReady {
		t.Errorf("after a restart %s is %s, want %s", kept.ID, got.Status.State, sandboxd.SnapshotReady)
	}
	wantStatus(t, call(t, "GET", base+"/v1/snapshots/"+deleted.ID, nil), http.StatusNotFound)
}

// TestSnapshotPreferWait: a client that asks for it (Prefer: wait=N) gets its
// answer once the snapshot is done, Ready, or after N seconds, still Creating;
// a client that does not gets it at once.
func TestSnapshotPreferWait(t *testing.T) {
	s, base := startServer(t, sandboxd.Config{})
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)

	post := func(prefer string) (sandboxd.Snapshot, resp) {
		t.Helper()
		r := call(t, "POST", base+"/v1/sandboxes/"+id+"/snapshots", map[string]any{}, "Prefer", prefer)
		wantStatus(t, r, http.StatusAccepted)
		var snap sandboxd.Snapshot
		r.decode(t, &snap)
		return snap, r
	}
	if snap, r := post("return=representation, wait=30"); snap.Status.State != sandboxd.SnapshotReady || r.Header.Get("Preference-Applied") != "wait" {
		t.Errorf("with wait=30: %+v, Preference-Applied %q; want Ready, wait", snap, r.Header.Get("Preference-Applied"))
	}

	// A capture held up: wait=1 answers after a second, Creating; no wait
	// answers at once, Creating too.
	release := make(chan struct{})
	s.SetSnapshotHook(func(string) { <-release })
	held := []string{}
	for _, prefer := range []string{"wait=1", "", "wait=abc", "wait=-3"} {
		snap, r := post(prefer)
		if snap.Status.State != sandboxd.SnapshotCreating || r.Header.Get("Preference-Applied") != "" {
			t.Errorf("Prefer %q with the capture held: %+v, Preference-Applied %q; want Creating, none", prefer, snap, r.Header.Get("Preference-Applied"))
		}
		held = append(held, snap.ID)
	}
	close(release)
	s.SetSnapshotHook(nil)
	for _, snap := range held {
		waitSnapshot(t, base, snap, sandboxd.SnapshotReady)
	}
}

func TestSnapshotAPIErrors(t *testing.T) {
	s, base := startServer(t, sandboxd.Config{})
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)

	for _, c := range []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"unknown sandbox", "POST", "/v1/sandboxes/nope/snapshots", map[string]any{}, 404, "SANDBOX_NOT_FOUND"},
		{"unknown snapshot", "GET", "/v1/snapshots/nope", nil, 404, "SNAPSHOT_NOT_FOUND"},
		{"delete unknown", "DELETE", "/snapshots/nope", nil, 404, "SNAPSHOT_NOT_FOUND"},
		{"create from unknown", "POST", "/v1/sandboxes", map[string]any{"snapshotId": "nope"}, 404, "SNAPSHOT_NOT_FOUND"},
		{"image and snapshot", "POST", "/v1/sandboxes", map[string]any{"snapshotId": "x", "image": map[string]string{"uri": "a"}}, 400, "INVALID_REQUEST"},
		{"unknown field", "POST", "/v1/sandboxes/" + id + "/snapshots", `{"nme":"x"}`, 400, "INVALID_REQUEST"},
		{"empty name", "POST", "/v1/sandboxes/" + id + "/snapshots", `{"name":""}`, 400, "INVALID_REQUEST"},
		{"malformed", "POST", "/v1/sandboxes/" + id + "/snapshots", `{`, 400, "INVALID_REQUEST"},
		{"bad page", "GET", "/v1/snapshots?page=0", nil, 400, "INVALID_REQUEST"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := call(t, c.method, base+c.path, c.body)
			wantStatus(t, r, c.status)
			var e struct{ Code string }
			r.decode(t, &e)
			if e.Code != c.code {
				t.Errorf("code = %q, want %q", e.Code, c.code)
			}
		})
	}

	// Hold the capture so the snapshot stays Creating.
	release := make(chan struct{})
	started := make(chan string, 4)
	s.SetSnapshotHook(func(id string) { started <- id; <-release })
	creating := snapshot(t, base, id, "held")
	<-started
	r := call(t, "DELETE", base+"/v1/snapshots/"+creating.ID, nil)
	wantStatus(t, r, http.StatusConflict)
	r = call(t, "POST", base+"/v1/sandboxes", map[string]any{"snapshotId": creating.ID})
	wantStatus(t, r, http.StatusConflict)
	close(release)
	s.SetSnapshotHook(nil)
	waitSnapshot(t, base, creating.ID, sandboxd.SnapshotReady)
	wantStatus(t, call(t, "DELETE", base+"/snapshots/"+creating.ID, nil), http.StatusNoContent)
	wantStatus(t, call(t, "GET", base+"/snapshots/"+creating.ID, nil), http.StatusNotFound)

	// A paused sandbox cannot be snapshot.
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/pause", nil), http.StatusAccepted)
	waitState(t, base, id, sandboxd.StatePaused)
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/snapshots", nil), http.StatusConflict)
	wantStatus(t, call(t, "POST", base+"/v1/sandboxes/"+id+"/resume", nil), http.StatusAccepted)
	waitState(t, base, id, sandboxd.StateRunning)

	// List: filter by sandbox and state, pages of two, oldest first.
	other := create(t, base, nil)
	waitState(t, base, other, sandboxd.StateRunning)
	var ids []string
	for i := range 3 {
		snap := snapshot(t, base, id, fmt.Sprintf("s%d", i))
		waitSnapshot(t, base, snap.ID, sandboxd.SnapshotReady)
		ids = append(ids, snap.ID)
	}
	waitSnapshot(t, base, snapshot(t, base, other, "").ID, sandboxd.SnapshotReady)
	type page struct {
		Items      []sandboxd.Snapshot
		Pagination sandboxd.Pagination
	}
	var got []string
	for p := 1; ; p++ {
		r := call(t, "GET", fmt.Sprintf("%s/v1/snapshots?sandboxId=%s&state=Ready&state=Failed&page=%d&pageSize=2", base, id, p), nil)
		wantStatus(t, r, http.StatusOK)
		var pg page
		r.decode(t, &pg)
		if pg.Pagination.TotalItems != 3 || pg.Pagination.TotalPages != 2 || pg.Pagination.Page != p {
			t.Fatalf("page %d pagination = %+v", p, pg.Pagination)
		}
		for _, it := range pg.Items {
			got = append(got, it.ID)
		}
		if !pg.Pagination.HasNextPage {
			break
		}
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Errorf("listed %v, want %v", got, ids)
	}
	var all page
	call(t, "GET", base+"/snapshots", nil).decode(t, &all)
	if all.Pagination.TotalItems != 4 {
		t.Errorf("unfiltered list has %d items, want 4", all.Pagination.TotalItems)
	}
	var none page
	call(t, "GET", base+"/snapshots?state=Creating", nil).decode(t, &none)
	if none.Pagination.TotalItems != 0 || none.Items == nil {
		t.Errorf("Creating filter = %+v, want an empty items array", none)
	}

	// A sandbox deleted before its capture starts gives a Failed snapshot,
	// which can be deleted.
	release = make(chan struct{})
	s.SetSnapshotHook(func(id string) { started <- id; <-release })
	doomed := snapshot(t, base, other, "")
	<-started
	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+other, nil), http.StatusNoContent)
	close(release)
	failed := waitSnapshot(t, base, doomed.ID, sandboxd.SnapshotFailed)
	if failed.Status.Reason != sandboxd.ReasonSnapshotFailed || !strings.Contains(failed.Status.Message, "Terminated") {
		t.Errorf("failed snapshot status = %+v, want %s naming the Terminated state", failed.Status, sandboxd.ReasonSnapshotFailed)
	}
	wantStatus(t, call(t, "DELETE", base+"/v1/snapshots/"+doomed.ID, nil), http.StatusNoContent)
}

// TestSnapshotIncremental checks that a second snapshot after a small change
// stores only the change, and that deleting the snapshots frees their blobs.
func TestSnapshotIncremental(t *testing.T) {
	s, base := startServer(t, sandboxd.Config{})
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)
	u, tok := execdEndpoint(t, base, id, false)
	const files, size = 16, 1 << 20
	sh(t, u, tok, fmt.Sprintf(`mkdir -p /root/ws && for i in $(seq %d); do head -c %d /dev/urandom > /root/ws/f$i; done`, files, size))

	first := snapshot(t, base, id, "")
	waitSnapshot(t, base, first.ID, sandboxd.SnapshotReady)
	b1 := blobBytes(t, s.DataDir())
	if b1 < files*size {
		t.Fatalf("blobs after the first snapshot = %d bytes, want at least %d", b1, files*size)
	}
	sh(t, u, tok, fmt.Sprintf("head -c %d /dev/urandom > /root/ws/f3", size))
	second := snapshot(t, base, id, "")
	waitSnapshot(t, base, second.ID, sandboxd.SnapshotReady)
	grew := blobBytes(t, s.DataDir()) - b1
	if grew < size || grew > size+size/2 {
		t.Errorf("the second snapshot stored %d bytes, want about %d (the one changed file)", grew, size)
	}

	// A sandbox created from the snapshot continues its lineage: its first
	// snapshot stores only what it changed.
	child, cu, ctok := fromSnapshot(t, base, second.ID)
	sh(t, cu, ctok, "echo small > /root/ws/small")
	b2 := blobBytes(t, s.DataDir())
	third := snapshot(t, base, child, "")
	msg := waitSnapshot(t, base, third.ID, sandboxd.SnapshotReady).Status.Message
	if grew := blobBytes(t, s.DataDir()) - b2; grew > 4096 {
		t.Errorf("the child's first snapshot stored %d bytes, want only its small change", grew)
	}
	var nfiles, total, read, stored int64
	if _, err := fmt.Sscanf(msg, sandboxd.SnapshotReadyMessage, &nfiles, &total, &read, &stored); err != nil {
		t.Fatalf("ready message %q: %v", msg, err)
	}
	if total < files*size || read > 4096 {
		t.Errorf("the child's first snapshot holds %d bytes and read %d, want at least %d and only its small change", total, read, files*size)
	}

	// Deleting every snapshot and forgetting the child (whose lineage still
	// references the blobs) frees every blob.
	for _, id := range []string{first.ID, second.ID, third.ID} {
		wantStatus(t, call(t, "DELETE", base+"/v1/snapshots/"+id, nil), http.StatusNoContent)
	}
	// One delete forgets the child (it is 404 from then on).
	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+child, nil), http.StatusNoContent)
	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+child, nil), http.StatusNotFound)
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := blobBytes(t, s.DataDir()); n != 0 {
			return fmt.Errorf("blobs after deleting every snapshot = %d bytes, want 0", n)
		}
		return nil
	})
}

// TestSnapshotSurvivesRestart takes a snapshot, restarts the server on the
// same data directory and creates a sandbox from it.
func TestSnapshotSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s1, err := sandboxd.Open(context.Background(), sandboxd.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	base, err := s1.Start(context.Background())
	if err != nil {
		_ = s1.Close(context.Background())
		testenv.SkipOrFail(t, err.Error())
	}
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)
	u, tok := execdEndpoint(t, base, id, false)
	sh(t, u, tok, "echo kept > /root/kept.txt")
	snap := snapshot(t, base, id, "before-restart")
	waitSnapshot(t, base, snap.ID, sandboxd.SnapshotReady)
	if err := s1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	_, base2 := startServer(t, sandboxd.Config{DataDir: dir})
	got := getSnapshot(t, base2, snap.ID)
	if got.Status.State != sandboxd.SnapshotReady || got.Name != "before-restart" || got.SandboxID != id || !got.CreatedAt.Equal(snap.CreatedAt) {
		t.Errorf("snapshot after restart = %+v, want Ready %+v", got, snap)
	}
	_, cu, ctok := fromSnapshot(t, base2, snap.ID)
	if got := sh(t, cu, ctok, "cat /root/kept.txt"); got != "kept" {
		t.Errorf("file from the snapshot after restart = %q, want kept", got)
	}
}

// TestSnapshotConcurrent takes several snapshots of two sandboxes at once,
// while the sandboxes write, and restores the last one of each.
func TestSnapshotConcurrent(t *testing.T) {
	_, base := startServer(t, sandboxd.Config{})
	var ids []string
	for range 2 {
		id := create(t, base, map[string]any{"entrypoint": []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /root/n.new; mv /root/n.new /root/n; sleep 0.01; done"}})
		ids = append(ids, id)
	}
	var snaps []sandboxd.Snapshot
	for _, id := range ids {
		waitState(t, base, id, sandboxd.StateRunning)
		u, tok := execdEndpoint(t, base, id, false)
		testenv.Eventually(t, 10*time.Second, func() error {
			if _, code := run(t, u, tok, "test -s /root/n"); code != 0 {
				return fmt.Errorf("the counter of %s has not written yet", id)
			}
			return nil
		})
	}
	for range 3 {
		for _, id := range ids {
			snaps = append(snaps, snapshot(t, base, id, ""))
		}
	}
	for _, snap := range snaps {
		waitSnapshot(t, base, snap.ID, sandboxd.SnapshotReady)
	}
	// The loop renames each count into place, so a capture never sees a
	// half-written /root/n (the freeze may land between a truncate and its
	// write).
	for _, snap := range snaps[len(snaps)-2:] {
		_, u, tok := fromSnapshot(t, base, snap.ID)
		// The child runs the default entrypoint: /root/n stays as captured.
		if got := sh(t, u, tok, "cat /root/n"); got == "" || got == "0" {
			t.Errorf("counter restored from %s = %q, want a positive count", snap.ID, got)
		}
	}
	for _, id := range ids {
		if st := getSandbox(t, base, id).Status.State; st != sandboxd.StateRunning {
			t.Errorf("source %s after the snapshots: %s, want Running", id, st)
		}
	}
}

// TestSnapshotServerCrash kills the server during a capture: after a restart
// the snapshot is Failed (sandboxd_restart), or Ready and restorable if the
// capture had finished, never Creating.
func TestSnapshotServerCrash(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serverEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read the server's URL: %v", err)
	}
	base := strings.TrimSpace(line)
	id := create(t, base, nil)
	waitState(t, base, id, sandboxd.StateRunning)
	u, tok := execdEndpoint(t, base, id, false)
	sh(t, u, tok, "for i in $(seq 64); do head -c 1048576 /dev/urandom > /root/f$i; done")
	snap := snapshot(t, base, id, "")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	_, base2 := startServer(t, sandboxd.Config{DataDir: dir})
	got := getSnapshot(t, base2, snap.ID)
	switch got.Status.State {
	case sandboxd.SnapshotFailed:
		if got.Status.Reason != sandboxd.ReasonRestart {
			t.Errorf("snapshot after the crash = %+v, want reason %s", got.Status, sandboxd.ReasonRestart)
		}
	case sandboxd.SnapshotReady:
		t.Log("the capture finished before the kill")
		_, cu, ctok := fromSnapshot(t, base2, snap.ID)
		if got := sh(t, cu, ctok, "ls /root | grep -c '^f'"); got != "64" {
			t.Errorf("restored %s files, want 64", got)
		}
	default:
		t.Errorf("snapshot after the crash = %+v, want Failed or Ready", got.Status)
	}
	wantStatus(t, call(t, "DELETE", base2+"/v1/snapshots/"+snap.ID, nil), http.StatusNoContent)
}

// TestSnapshotTmp checks that /tmp is part of a sandbox's snapshotted root
// (as in a container) while execd's own files are not: a file written to /tmp
// before a snapshot is in every sandbox made from it, those sandboxes do not
// see each other's later /tmp writes, and the output of a background command
// (kept by execd under /dev/shm) is neither in the upper layer on the host
// nor restored.
func TestSnapshotTmp(t *testing.T) {
	s, base := startServer(t, sandboxd.Config{})
	src := create(t, base, nil)
	waitState(t, base, src, sandboxd.StateRunning)
	su, stok := execdEndpoint(t, base, src, false)
	const mounts = `stat -c %a /tmp; awk '$2=="/tmp"' /proc/mounts | wc -l; awk '$2=="/dev/shm"{print $3}' /proc/mounts`
	if got, want := sh(t, su, stok, mounts), "1777\n0\ntmpfs"; got != want {
		t.Errorf("/tmp mode, mounts on /tmp, /dev/shm type = %q, want %q", got, want)
	}
	sh(t, su, stok, "echo kept > /tmp/job.out && mkdir /tmp/d && echo deep > /tmp/d/f")
	r := call(t, "POST", su+"/command", map[string]any{"command": "echo bg-output-marker", "background": true}, sandboxd.ExecdTokenHeader, stok)
	wantStatus(t, r, http.StatusOK)
	testenv.Eventually(t, 10*time.Second, func() error {
		lines, _ := run(t, su, stok, "cat /dev/shm/execd-*/*.log 2>/dev/null")
		if !strings.Contains(strings.Join(lines, "\n"), "bg-output-marker") {
			return fmt.Errorf("background log in /dev/shm = %q, want the marker", lines)
		}
		return nil
	})
	upperTmp := func(id string) string {
		return filepath.Join(s.DataDir(), "sandboxes", id, "fs", "layers", "upper", "tmp")
	}
	if b, err := os.ReadFile(filepath.Join(upperTmp(src), "job.out")); err != nil || string(b) != "kept\n" {
		t.Errorf("source upper layer /tmp/job.out = %q, %v; want kept", b, err)
	}
	if m, _ := filepath.Glob(filepath.Join(upperTmp(src), "execd-*")); len(m) != 0 {
		t.Errorf("execd state in the source's upper layer: %q", m)
	}

	snap := snapshot(t, base, src, "")
	waitSnapshot(t, base, snap.ID, sandboxd.SnapshotReady)
	sh(t, su, stok, "echo late > /tmp/late") // after the snapshot: in no child
	a, au, atok := fromSnapshot(t, base, snap.ID)
	b, bu, btok := fromSnapshot(t, base, snap.ID)
	const check = `cat /tmp/job.out /tmp/d/f; stat -c %a /tmp; ls -A /tmp; grep -rl bg-output-marker /tmp /dev/shm 2>/dev/null; true`
	for _, c := range []struct{ id, u, tok string }{{a, au, atok}, {b, bu, btok}} {
		if got, want := sh(t, c.u, c.tok, check), "kept\ndeep\n1777\nd\njob.out"; got != want {
			t.Errorf("sandbox %s from the snapshot: /tmp\n got %q\nwant %q", c.id, got, want)
		}
		if got, want := sh(t, c.u, c.tok, mounts), "1777\n0\ntmpfs"; got != want {
			t.Errorf("sandbox %s: /tmp mode, mounts on /tmp, /dev/shm type = %q, want %q", c.id, got, want)
		}
		if m, _ := filepath.Glob(filepath.Join(upperTmp(c.id), "execd-*")); len(m) != 0 {
			t.Errorf("execd state restored into sandbox %s: %q", c.id, m)
		}
	}

	// Sandboxes from one snapshot keep private /tmp directories.
	sh(t, au, atok, "echo mine > /tmp/a-only && echo changed > /tmp/job.out")
	if got, want := sh(t, bu, btok, "cat /tmp/job.out; ls -A /tmp"), "kept\nd\njob.out"; got != want {
		t.Errorf("sandbox b after a wrote /tmp = %q, want %q", got, want)
	}
	if got, want := sh(t, su, stok, "cat /tmp/job.out; ls -A /tmp"), "kept\nd\njob.out\nlate"; got != want {
		t.Errorf("source after a wrote /tmp = %q, want %q", got, want)
	}
}
