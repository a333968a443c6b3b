package sandboxd_test

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// TestSnapshotsAcrossHosts is issue 36's fleet: two sandboxds ("hosts")
// share a Postgres checkpoint store and an S3 bucket (a real S3 server). A
// snapshot taken on host A is read, listed, restored and deleted on host B
// after A is gone; a blob that no longer hashes to its key fails the
// restore with SNAPSHOT_CORRUPT naming the file.
func TestSnapshotsAcrossHosts(t *testing.T) {
	dsn := testenv.Postgres(t)
	s3 := testenv.S3(t)
	bucket, err := s3.NewBucket()
	if err != nil {
		t.Fatal(err)
	}
	cfg := sandboxd.Config{Checkpoints: dsn, Blobs: s3.URL(bucket)}
	a, baseA := startServer(t, cfg)
	_, baseB := startServer(t, cfg)

	src := create(t, baseA, nil)
	u, tok := execdEndpoint(t, baseA, src, false)
	sh(t, u, tok, "echo from-host-a > /root/data.txt && mkdir -p /srv/app && echo v1 > /srv/app/conf")
	snap := snapshot(t, baseA, src, "before-loss")
	waitSnapshot(t, baseA, snap.ID, sandboxd.SnapshotReady)
	if err := a.Close(context.Background()); err != nil { // host A is gone
		t.Fatal(err)
	}

	got := getSnapshot(t, baseB, snap.ID)
	if got.Status.State != sandboxd.SnapshotReady || got.SandboxID != src || got.Name != "before-loss" {
		t.Fatalf("snapshot on host B: %+v, want Ready, of %s, named before-loss", got, src)
	}
	r := call(t, "GET", baseB+"/v1/snapshots?sandboxId="+src, nil)
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(string(r.Body), snap.ID) {
		t.Errorf("host B's list of %s's snapshots lacks %s: %s", src, snap.ID, r.Body)
	}
	id, u2, tok2 := fromSnapshot(t, baseB, snap.ID)
	if got := sh(t, u2, tok2, "cat /root/data.txt /srv/app/conf"); got != "from-host-a\nv1" {
		t.Errorf("restored on host B: %q", got)
	}
	sh(t, u2, tok2, "echo v2 > /srv/app/conf")
	fork := snapshot(t, baseB, id, "on-b")
	waitSnapshot(t, baseB, fork.ID, sandboxd.SnapshotReady)
	wantStatus(t, call(t, "DELETE", baseB+"/v1/snapshots/"+snap.ID, nil), http.StatusNoContent)
	wantStatus(t, call(t, "GET", baseB+"/v1/snapshots/"+snap.ID, nil), http.StatusNotFound)

	// A blob of host B's snapshot rewritten in the bucket: a third host, cold,
	// refuses it.
	_, baseC := startServer(t, cfg)
	err = filepath.WalkDir(filepath.Join(s3.Dir(), bucket), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil || string(b) != "v2\n" {
			return err
		}
		return os.WriteFile(p, []byte("v3\n"), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	r = call(t, "POST", baseC+"/v1/sandboxes", map[string]any{"snapshotId": fork.ID})
	wantStatus(t, r, http.StatusAccepted)
	var out struct{ ID string }
	r.decode(t, &out)
	var sb sandboxd.Sandbox
	testenv.Eventually(t, 30*time.Second, func() error {
		sb = getSandbox(t, baseC, out.ID)
		if sb.Status.State != sandboxd.StateFailed {
			return fmt.Errorf("state %s", sb.Status.State)
		}
		return nil
	})
	if sb.Status.Reason != sandboxd.ReasonSnapshotCorrupt || !strings.Contains(sb.Status.Message, "srv/app/conf") {
		t.Errorf("restore of a corrupt blob: %s: %s; want %s naming srv/app/conf", sb.Status.Reason, sb.Status.Message, sandboxd.ReasonSnapshotCorrupt)
	}
}

// TestSharedStoresBadURLs: a --checkpoints or --blobs URL that is malformed
// or cannot be reached fails Open at once, naming the URL without its
// password.
func TestSharedStoresBadURLs(t *testing.T) {
	for _, cfg := range []sandboxd.Config{
		{Checkpoints: "postgres://alineo:s3cret@127.0.0.1:1/none?connect_timeout=2"},
		{Checkpoints: "mysql://x"},
		{Blobs: "s3://"},
		{Blobs: "nope://bucket"},
	} {
		s, err := sandboxd.Open(context.Background(), cfg)
		if err == nil {
			s.Close(context.Background())
			t.Errorf("Open(%+v) = nil, want an error", cfg)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%+v): %v shows the password", cfg, err)
		}
	}
}
