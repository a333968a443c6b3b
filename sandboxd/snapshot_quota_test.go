package sandboxd_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd"
)

// TestSnapshotSparseAndQuota (issue 41, F6): in a sandbox with a 256 MiB
// disk, a snapshot of a 3 GiB sparse file stores its few bytes of data, and a
// sandbox restored from it has the file whole, still sparse; a tree that a
// restore could not fit in that disk (a 100 MB file under three names) fails
// its snapshot with the quota's reason. (Before, the first snapshot stored 3
// GiB in 18 s and its restore failed; the second was Ready and could never be
// restored.)
func TestSnapshotSparseAndQuota(t *testing.T) {
	s, base := startServer(t, sandboxd.Config{DiskQuota: 256 << 20})
	src := create(t, base, nil)
	waitState(t, base, src, sandboxd.StateRunning)
	u, tok := execdEndpoint(t, base, src, false)
	sh(t, u, tok, `truncate -s 3G /root/sparse.img && printf tail >> /root/sparse.img &&
		printf head | dd of=/root/sparse.img conv=notrunc status=none`)

	snap := snapshot(t, base, src, "sparse")
	waitSnapshot(t, base, snap.ID, sandboxd.SnapshotReady)
	if got, limit := blobBytes(t, s.DataDir()), int64(1<<20); got > limit {
		t.Errorf("the snapshot stored %d bytes, want at most %d", got, limit)
	}
	_, cu, ctok := fromSnapshot(t, base, snap.ID)
	out := strings.Split(sh(t, cu, ctok, `stat -c %s /root/sparse.img; du -k /root/sparse.img | cut -f1;
		head -c 4 /root/sparse.img; echo; tail -c 4 /root/sparse.img; echo`), "\n")
	if len(out) != 4 || out[0] != strconv.Itoa(3<<30+4) || out[2] != "head" || out[3] != "tail" {
		t.Fatalf("restored sparse.img: size, KiB on disk, head, tail = %q, want %d, a few, head, tail", out, 3<<30+4)
	}
	if kib, err := strconv.Atoi(out[1]); err != nil || kib > 1024 {
		t.Errorf("the restored sparse.img takes %s KiB on disk, want at most 1024", out[1])
	}

	sh(t, u, tok, `rm /root/sparse.img && head -c 100000000 /dev/urandom > /root/a && ln /root/a /root/b && ln /root/a /root/c`)
	over := snapshot(t, base, src, "")
	failed := waitSnapshot(t, base, over.ID, sandboxd.SnapshotFailed)
	if failed.Status.Reason != sandboxd.ReasonSnapshotFailed || !strings.Contains(failed.Status.Message, "larger than the disk quota") {
		t.Errorf("snapshot over the quota = %s: %q, want %s saying it is larger than the disk quota",
			failed.Status.Reason, failed.Status.Message, sandboxd.ReasonSnapshotFailed)
	}
	if st := getSandbox(t, base, src).Status.State; st != sandboxd.StateRunning {
		t.Errorf("source after the failed snapshot: %s, want Running", st)
	}
}
