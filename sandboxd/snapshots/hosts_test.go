package snapshots_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/postgres"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
	"github.com/alineo-labs/alineo/testenv"
)

// fleet is shared storage as a fleet of sandbox hosts has it: one Postgres
// checkpoint store and one S3 bucket, each host with its own connection and
// its own blob cache.
type fleet struct {
	t      *testing.T
	dsn    string
	bucket *s3Bucket
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	return &fleet{t: t, dsn: testenv.Postgres(t), bucket: newS3Bucket(t)}
}

// host opens a Manager on the shared storage, as one sandboxd would.
func (f *fleet) host(cfg snapshots.ManagerConfig, bcfg snapshots.BlobConfig) *snapshots.Manager {
	f.t.Helper()
	store, err := postgres.Open(context.Background(), f.dsn, checkpoints.Options{})
	must(f.t, err)
	f.t.Cleanup(func() { _ = store.Close() })
	return snapshots.NewManager(store, f.bucket.open(f.t, bcfg), cfg)
}

// TestRestoreOnAnotherHost: a snapshot taken on host A restores on host B,
// with a cold cache, after A is gone; B's second restore is served by its
// cache while S3 is down.
func TestRestoreOnAnotherHost(t *testing.T) {
	ctx := t.Context()
	f := newFleet(t)
	a := f.host(snapshots.ManagerConfig{}, snapshots.BlobConfig{})
	src := filepath.Join(t.TempDir(), "src")
	buildTree(t, src)
	backdate(t, src)
	want := describe(t, src, true)
	c, _, err := a.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-a", Root: src})
	must(t, err)
	must(t, a.Blobs().Close()) // host A is gone
	must(t, a.Store().Close())

	b := f.host(snapshots.ManagerConfig{}, snapshots.BlobConfig{})
	got, err := b.Store().Get(ctx, c.ID)
	must(t, err)
	if got.ThreadID != "sbx-a" {
		t.Fatalf("host B sees %+v", got)
	}
	dest := filepath.Join(t.TempDir(), "dest")
	must(t, b.Restore(ctx, c.ID, dest, snapshots.RestoreOptions{}))
	diff(t, "restore on host B", describe(t, dest, true), want)
	must(t, b.Blobs().WaitCache(ctx)) // the restore wrote the files first; the cache is filled right after

	must(t, f.bucket.srv.Stop())
	dest2 := filepath.Join(t.TempDir(), "dest")
	must(t, b.Restore(ctx, c.ID, dest2, snapshots.RestoreOptions{}))
	diff(t, "restore on host B from its cache while S3 is down", describe(t, dest2, true), want)
	must(t, f.bucket.srv.Start())

	// B takes the lineage on: its snapshot's parent is A's.
	c2, _, err := b.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "sbx-a", Root: dest})
	must(t, err)
	if c2.ParentID != c.ID {
		t.Fatalf("host B's snapshot has parent %q, want %q", c2.ParentID, c.ID)
	}
}

// TestS3OutageFailsCapture: S3 goes down during a capture, before its first
// put or in the middle of its puts, and stays down past the Manager's
// patience (none here: StoreOutage < 0). The snapshot fails as Unavailable,
// no checkpoint is written, every object in the bucket is a whole blob, and
// once S3 is back the next snapshot of the same tree succeeds and restores.
func TestS3OutageFailsCapture(t *testing.T) {
	for _, tc := range []struct {
		name   string
		outage func(t *testing.T, srv *testenv.S3Server, src string) (stop func())
	}{
		{"BeforeFirstPut", func(t *testing.T, srv *testenv.S3Server, _ string) func() {
			must(t, srv.Stop())
			return func() {}
		}},
		{"DuringPuts", func(t *testing.T, srv *testenv.S3Server, src string) func() {
			// The small files sort before big.bin; kill the server once all of
			// them are stored, while big.bin is read and uploaded.
			var want []string
			for i := range 8 {
				want = append(want, keyOf(fileContent(i)))
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				deadline := time.Now().Add(30 * time.Second)
				for time.Now().Before(deadline) {
					all := true
					for _, k := range want {
						if _, err := os.Stat(filepath.Join(srv.Dir(), bucketOf(srv), "sha256", k[:2], k)); err != nil {
							all = false
							break
						}
					}
					if all {
						_ = srv.Kill()
						return
					}
					time.Sleep(100 * time.Microsecond) // polls the bucket's directory, a few µs per round
				}
			}()
			return func() { <-done }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			t.Setenv("AWS_MAX_ATTEMPTS", "1")
			bk := newS3Bucket(t)
			blobs := bk.open(t, snapshots.BlobConfig{})
			store := newMemoryStore()
			m := snapshots.NewManager(store, blobs, snapshots.ManagerConfig{StoreOutage: -1})
			src := t.TempDir()
			for i := range 8 {
				write(t, src, fmt.Sprintf("a/small%d", i), string(fileContent(i)), 0o644)
			}
			big := make([]byte, 96<<20)
			for i := range big {
				big[i] = byte(i * 7)
			}
			write(t, src, "big.bin", string(big), 0o644)
			backdate(t, src)
			var wait func()
			_, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src,
				Freeze: func(context.Context) (func(), error) {
					wait = tc.outage(t, bk.srv, src)
					return func() {}, nil
				}})
			wait()
			if !snapshots.Unavailable(err) {
				t.Fatalf("snapshot through an S3 outage: got %v, want an error wrapping ErrUnavailable", err)
			}
			t.Logf("snapshot failed as it should: %v", err)
			if list, err := store.List(ctx, "t"); err != nil || len(list) != 0 {
				t.Fatalf("checkpoints after the failed snapshot = %d, %v; want none", len(list), err)
			}
			must(t, bk.srv.Start())
			n := allBlobsWhole(t, blobs)
			t.Logf("%d whole blobs in the bucket after the outage", n)
			if tc.name == "DuringPuts" && n < 8 {
				t.Fatalf("only %d blobs stored before the outage, want the 8 small ones", n)
			}
			c, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src})
			must(t, err)
			dest := filepath.Join(t.TempDir(), "dest")
			must(t, m.Restore(ctx, c.ID, dest, snapshots.RestoreOptions{}))
			diff(t, "restore after the outage", describe(t, dest, true), describe(t, src, true))
		})
	}
}

// TestS3OutageRetried: S3 goes down as a capture starts and is back a
// second later. The snapshot is taken again and succeeds, and the
// sandboxd-side put of an artifact done with Manager.Retry rides the same
// outage out.
func TestS3OutageRetried(t *testing.T) {
	ctx := t.Context()
	t.Setenv("AWS_MAX_ATTEMPTS", "1")
	bk := newS3Bucket(t)
	blobs := bk.open(t, snapshots.BlobConfig{})
	m := snapshots.NewManager(newMemoryStore(), blobs, snapshots.ManagerConfig{})
	src := filepath.Join(t.TempDir(), "src")
	buildTree(t, src)
	outage := func() <-chan error {
		must(t, bk.srv.Stop())
		back := make(chan error, 1)
		go func() {
			<-time.After(time.Second) // the outage: the attempts in it fail
			back <- bk.srv.Start()
		}()
		return back
	}

	back := outage()
	var key string
	err := m.Retry(ctx, "put an artifact", func(ctx context.Context) (err error) {
		key, _, err = blobs.Put(ctx, strings.NewReader("the record"))
		return err
	})
	must(t, <-back)
	if err != nil {
		t.Fatalf("put through a 1 s outage: %v", err)
	}
	if ok, err := blobs.Exists(ctx, key); err != nil || !ok {
		t.Fatalf("the artifact's blob after the outage: %v, %v", ok, err)
	}

	var backs []<-chan error
	c, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "t", Root: src,
		Freeze: func(context.Context) (func(), error) {
			if len(backs) == 0 {
				backs = append(backs, outage())
			}
			return func() {}, nil
		}})
	must(t, <-backs[0])
	if err != nil {
		t.Fatalf("snapshot through a 1 s outage: %v", err)
	}
	dest := filepath.Join(t.TempDir(), "dest")
	must(t, m.Restore(ctx, c.ID, dest, snapshots.RestoreOptions{}))
	diff(t, "restore", describe(t, dest, true), describe(t, src, true))
}

func fileContent(i int) []byte {
	return []byte(strings.Repeat(fmt.Sprintf("small file %d\n", i), 1000))
}

// bucketOf returns the only bucket of srv.
func bucketOf(srv *testenv.S3Server) string {
	ents, _ := os.ReadDir(srv.Dir())
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			return e.Name()
		}
	}
	return ""
}

// TestGCWindow runs a collection on a third host exactly while host A's
// capture has stored its blobs but not yet appended its checkpoint. With a
// grace period the blobs are spared and A's snapshot restores on host B.
// Without one they are collected: A notices after its append, removes its
// checkpoint and captures again, which stores them anew; and if they are
// collected in that window every time, the snapshot fails rather than
// leave a checkpoint whose blobs are gone.
func TestGCWindow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		grace  time.Duration
		gcRuns int // how many of the capture's attempts a collection interrupts
	}{
		{"Grace", time.Minute, 2},
		{"NoGrace", time.Nanosecond, 1},
		{"NoGraceEveryTime", time.Nanosecond, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFleet(t)
			bcfg := snapshots.BlobConfig{RefreshAfter: tc.grace / 4}
			a := f.host(snapshots.ManagerConfig{GCMinAge: tc.grace}, bcfg)
			b := f.host(snapshots.ManagerConfig{GCMinAge: tc.grace}, bcfg)
			c := f.host(snapshots.ManagerConfig{GCMinAge: tc.grace}, bcfg)
			src := t.TempDir()
			write(t, src, "one", "first file", 0o644)
			write(t, src, "dir/two", "second file", 0o644)
			var gcs []checkpoints.GCStats
			snap, st, err := a.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: "a", Root: src,
				Freeze: func(context.Context) (func(), error) {
					return func() { // after the capture's puts, before its append
						if len(gcs) < tc.gcRuns {
							st, err := c.GC(ctx)
							must(t, err)
							gcs = append(gcs, st)
						}
					}, nil
				}})
			t.Logf("collections during the capture: %+v; snapshot: %+v, %v", gcs, st, err)
			switch tc.name {
			case "Grace":
				must(t, err)
				if len(gcs) != 1 || gcs[0].Deleted != 0 || gcs[0].Spared != 2 {
					t.Fatalf("collections during the capture: %+v, want one sparing 2 blobs", gcs)
				}
			case "NoGrace":
				must(t, err)
				if len(gcs) != 1 || gcs[0].Deleted != 2 || st.StoredBlobs != 2 {
					t.Fatalf("collections %+v, capture %+v; want 2 blobs collected and stored again", gcs, st)
				}
			case "NoGraceEveryTime":
				if !errors.Is(err, snapshots.ErrBlobNotFound) {
					t.Fatalf("Snapshot whose blobs were collected twice: err = %v, want ErrBlobNotFound", err)
				}
				if list, err := b.Store().List(ctx, "a"); err != nil || len(list) != 0 {
					t.Fatalf("checkpoints left = %d, %v; want none", len(list), err)
				}
				return
			}
			dest := filepath.Join(t.TempDir(), "dest")
			must(t, b.Restore(ctx, snap.ID, dest, snapshots.RestoreOptions{}))
			diff(t, "restore on host B", describe(t, dest, true), describe(t, src, true))
		})
	}
}

// TestGCAcrossHosts: hosts A and B take snapshots in a loop (changing
// files, some back to earlier contents, and deleting older snapshots, so
// that there is garbage) while host C collects garbage in a loop. Afterwards
// every snapshot left restores, on a fourth host with a cold cache, to the
// files it captured, and a collection after the grace period leaves exactly
// the referenced blobs.
func TestGCAcrossHosts(t *testing.T) {
	ctx := t.Context()
	f := newFleet(t)
	// S3 keeps modification times to the second, so a blob may look up to a
	// second older than it is: the grace period covers that and a capture.
	const grace = 2 * time.Second
	bcfg := snapshots.BlobConfig{RefreshAfter: grace / 4}
	mcfg := snapshots.ManagerConfig{GCMinAge: grace}
	hosts := []*snapshots.Manager{f.host(mcfg, bcfg), f.host(mcfg, bcfg)}
	collector := f.host(mcfg, bcfg)

	var (
		mu   sync.Mutex
		kept = map[string]map[string]string{} // snapshot id → file → content
	)
	stopHosts, stopCollector := make(chan struct{}), make(chan struct{})
	var hostsWG sync.WaitGroup
	errs := make(chan error, len(hosts)+1)
	for h, m := range hosts {
		src := filepath.Join(t.TempDir(), "src")
		must(t, os.MkdirAll(src, 0o755))
		hostsWG.Add(1)
		go func() {
			defer hostsWG.Done()
			errs <- takeSnapshots(ctx, m, h, src, stopHosts, &mu, kept)
		}()
	}
	var rounds, deleted atomic.Int64
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for {
			select {
			case <-stopCollector:
				return
			default:
			}
			st, err := collector.GC(ctx)
			if err != nil {
				errs <- fmt.Errorf("collector: %w", err)
				return
			}
			rounds.Add(1)
			deleted.Add(int64(st.Deleted))
		}
	}()
	// The hosts go on until the collector has collected garbage (which must
	// first age past the grace period) for a while, or a minute has passed.
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	for deleted.Load() < 10 && time.Since(start) < time.Minute {
		<-tick.C
	}
	tick.Stop()
	close(stopHosts)
	hostsWG.Wait()
	close(stopCollector)
	<-collected
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("in %v the collector ran %d rounds and deleted %d blobs while the hosts took snapshots", time.Since(start).Round(time.Millisecond), rounds.Load(), deleted.Load())
	if deleted.Load() < 10 {
		t.Fatalf("the collector deleted %d blobs in a minute, want garbage collected while the hosts ran", deleted.Load())
	}

	fresh := f.host(mcfg, snapshots.BlobConfig{})
	for id, files := range kept {
		dest := filepath.Join(t.TempDir(), "dest")
		if err := fresh.Restore(ctx, id, dest, snapshots.RestoreOptions{}); err != nil {
			t.Fatalf("restore %s: %v", id, err)
		}
		for name, want := range files {
			if got, err := os.ReadFile(filepath.Join(dest, name)); err != nil || string(got) != want {
				t.Fatalf("restore %s: %s = %.40q, %v; want %.40q", id, name, got, err, want)
			}
		}
	}

	later := f.host(snapshots.ManagerConfig{GCMinAge: grace, Now: func() time.Time { return time.Now().Add(2 * grace) }}, bcfg)
	_, err := later.GC(ctx)
	must(t, err)
	refs, err := later.Store().ListBlobReferences(ctx)
	must(t, err)
	list, err := later.Blobs().List(ctx)
	must(t, err)
	if len(list) != len(refs) {
		t.Fatalf("after a collection past the grace period: %d blobs, %d referenced", len(list), len(refs))
	}
	for i := range list {
		if list[i].Key != refs[i].Key {
			t.Fatalf("blob %d is %s, the reference %s", i, list[i].Key, refs[i].Key)
		}
	}
}

// takeSnapshots is one host of TestGCAcrossHosts: rounds of changing a few
// files of src and snapshotting it, keeping the last 3 snapshots, until stop
// is closed. kept records what each snapshot left holds.
func takeSnapshots(ctx context.Context, m *snapshots.Manager, h int, src string, stop <-chan struct{}, mu *sync.Mutex, kept map[string]map[string]string) error {
	rng := rand.New(rand.NewPCG(uint64(h), 1))
	files := map[string]string{}
	var ids []string
	for round := 0; ; round++ {
		select {
		case <-stop:
			return nil
		default:
		}
		for i := range 4 {
			name := fmt.Sprintf("f%d", rng.IntN(8))
			content := strings.Repeat(fmt.Sprintf("host %d version %d of %s\n", h, rng.IntN(4), name), 1+i*300)
			if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
				return err
			}
			files[name] = content
		}
		c, _, err := m.Snapshot(ctx, snapshots.SnapshotInput{ThreadID: fmt.Sprintf("host%d", h), Root: src})
		if err != nil {
			return fmt.Errorf("host %d round %d: %w", h, round, err)
		}
		mu.Lock()
		kept[c.ID] = maps.Clone(files)
		mu.Unlock()
		if ids = append(ids, c.ID); len(ids) > 3 { // an old snapshot goes: its blobs may become garbage
			if err := m.Delete(ctx, ids[0]); err != nil {
				return fmt.Errorf("host %d: %w", h, err)
			}
			mu.Lock()
			delete(kept, ids[0])
			mu.Unlock()
			ids = ids[1:]
		}
	}
}
