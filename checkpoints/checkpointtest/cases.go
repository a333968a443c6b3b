package checkpointtest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
)

func testAppendGetList(t *testing.T, f Factory) {
	e := newEnv(t, f)
	if h := e.head("t1"); h != "" {
		t.Fatalf("empty thread head = %q, want \"\"", h)
	}
	l := e.acquire("t1")
	c1 := checkpoint("c1", "t1", "", "k1", "k2")
	c1.Label = "install"
	c1.SourceRunID = "run-1"
	c1.Reason = checkpoints.ReasonNamed
	c1.Files = append(c1.Files,
		checkpoints.Entry{Path: "work/link", Kind: checkpoints.KindSymlink, Target: "../etc/é"},
		checkpoints.Entry{Path: "work/gone", Kind: checkpoints.KindWhiteout},
		checkpoints.Entry{Path: "work/sub", Kind: checkpoints.KindDir, Mode: 0o1777, Opaque: true, UID: 1000, GID: 1000},
		checkpoints.Entry{Path: "work/sub/ü 名前", Kind: checkpoints.KindFile, BlobKey: "k3", Size: 0, Mode: 0o4755, ModTime: 1234567890123456789},
		checkpoints.Entry{Path: "work/sparse.img", Kind: checkpoints.KindFile, BlobKey: "k3", Size: 3 << 30, Mode: 0o644,
			Holes: []checkpoints.Extent{{Offset: 0, Length: 1 << 20}, {Offset: 1<<20 + 4096, Length: 3<<30 - 1<<20 - 4096}}},
	)
	c1.Artifacts = []checkpoints.Artifact{{ArtifactID: "a1", Name: "report.txt", MimeType: "text/plain", Size: 5, BlobKey: "k4", CreatedAt: time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)}}
	c1.Conversation = []byte(`[{"role":"user","content":"hi"}]`)
	e.append(l, c1)

	got, err := e.s.Get(e.ctx, "c1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	// Checkpoint times are kept to the millisecond, the contract's precision.
	if want := e.clock.Now().Truncate(time.Millisecond); !got.CreatedAt.Equal(want) {
		t.Fatalf("CreatedAt = %v, want the store clock to the millisecond %v", got.CreatedAt, want)
	}
	if got, want := got.Artifacts[0].CreatedAt, time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("artifact CreatedAt = %v, want %v (to the millisecond)", got, want)
	}
	c1.CreatedAt = got.CreatedAt
	c1.Artifacts[0].CreatedAt = got.Artifacts[0].CreatedAt
	sameCheckpoint(t, "Get(c1)", got, c1)

	// The store keeps its own copy.
	got.Files[0].Path = "mutated"
	c1.Files[0].Path = "mutated-too"
	sparse := len(c1.Files) - 1
	got.Files[sparse].Holes[0].Length = 7
	c1.Files[sparse].Holes[0].Length = 8
	again, _ := e.s.Get(e.ctx, "c1")
	if again.Files[0].Path != "work" {
		t.Fatalf("store shares memory with callers: path = %q", again.Files[0].Path)
	}
	if got := again.Files[sparse].Holes[0].Length; got != 1<<20 {
		t.Fatalf("store shares holes with callers: length = %d", got)
	}

	e.clock.Advance(time.Second)
	c2 := checkpoint("c2", "t1", "c1", "k1")
	c2.CreatedAt = time.Date(2025, 12, 31, 23, 59, 59, 999999999, time.UTC)
	e.append(l, c2)
	if h := e.head("t1"); h != "c2" {
		t.Fatalf("head = %q, want c2", h)
	}
	got2, err := e.s.Get(e.ctx, "c2")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2025, 12, 31, 23, 59, 59, 999000000, time.UTC); !got2.CreatedAt.Equal(want) {
		t.Fatalf("CreatedAt = %v, want the given %v to the millisecond", got2.CreatedAt, want)
	}
	list, err := e.s.List(e.ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(list), "c1,c2"; got != want {
		t.Fatalf("List = %s, want %s", got, want)
	}
	if list, _ := e.s.List(e.ctx, "other"); len(list) != 0 {
		t.Fatalf("List(other) = %s, want empty", ids(list))
	}
	l0 := e.acquire("a-thread")
	e.append(l0, checkpoint("a1", "a-thread", ""))
	e.acquire("leased-but-empty")
	threads, err := e.s.Threads(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(threads, ","), "a-thread,t1"; got != want {
		t.Fatalf("Threads = %s, want %s", got, want)
	}
	if err := e.s.DeleteHead(e.ctx, checkpoints.DeleteHeadInput{ThreadID: "a-thread", CheckpointID: "a1", Writer: l0.Writer}); err != nil {
		t.Fatal(err)
	}
	if threads, _ := e.s.Threads(e.ctx); strings.Join(threads, ",") != "t1" {
		t.Fatalf("Threads after emptying a-thread = %v, want [t1]", threads)
	}
}

func ids(cs []*checkpoints.Checkpoint) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.ID)
	}
	return strings.Join(s, ",")
}

func testHeadCAS(t *testing.T, f Factory) {
	e := newEnv(t, f)
	l := e.acquire("t1")
	e.append(l, checkpoint("c1", "t1", ""))
	// Expecting an empty thread when it has a head.
	_, err := e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: checkpoint("c2", "t1", ""), ExpectedHead: "", Writer: l.Writer})
	wantCode(t, "append with stale expected head", err, checkpoints.ErrStaleHead)
	// Expecting a head that is not the current one.
	e.append(l, checkpoint("c2", "t1", "c1"))
	_, err = e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: checkpoint("c3", "t1", "c1"), ExpectedHead: "c1", Writer: l.Writer})
	wantCode(t, "append on old head", err, checkpoints.ErrStaleHead)
	// Parent differs from the expected head.
	_, err = e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: checkpoint("c3", "t1", "c1"), ExpectedHead: "c2", Writer: l.Writer})
	wantCode(t, "append with parent != expected head", err, checkpoints.ErrParentMismatch)
	_, err = e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: checkpoint("c3", "t1", ""), ExpectedHead: "c2", Writer: l.Writer})
	wantCode(t, "append without parent on a head", err, checkpoints.ErrParentMismatch)
	if h := e.head("t1"); h != "c2" {
		t.Fatalf("head = %q after rejected appends, want c2", h)
	}
	if list, _ := e.s.List(e.ctx, "t1"); ids(list) != "c1,c2" {
		t.Fatalf("List = %s, want c1,c2", ids(list))
	}
}

func testDuplicateID(t *testing.T, f Factory) {
	e := newEnv(t, f)
	l1 := e.acquire("t1")
	l2 := e.acquire("t2")
	e.append(l1, checkpoint("c1", "t1", ""))
	_, err := e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: checkpoint("c1", "t1", "c1"), ExpectedHead: "c1", Writer: l1.Writer})
	wantCode(t, "same id in the same thread", err, checkpoints.ErrDuplicateID)
	_, err = e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: checkpoint("c1", "t2", ""), Writer: l2.Writer})
	wantCode(t, "same id in another thread", err, checkpoints.ErrDuplicateID)
	if h := e.head("t2"); h != "" {
		t.Fatalf("t2 head = %q, want none", h)
	}
}

func testInvalidInput(t *testing.T, f Factory) {
	e := newEnv(t, f)
	l := e.acquire("t1")
	file := func(p string) checkpoints.Entry {
		return checkpoints.Entry{Path: p, Kind: checkpoints.KindFile, BlobKey: "k", Size: 1}
	}
	cases := []struct {
		name string
		mod  func(c *checkpoints.Checkpoint)
		want *checkpoints.Error
	}{
		{"empty id", func(c *checkpoints.Checkpoint) { c.ID = "" }, checkpoints.ErrInvalidID},
		{"id with slash", func(c *checkpoints.Checkpoint) { c.ID = "a/b" }, checkpoints.ErrInvalidID},
		{"id with space", func(c *checkpoints.Checkpoint) { c.ID = "a b" }, checkpoints.ErrInvalidID},
		{"id dotdot", func(c *checkpoints.Checkpoint) { c.ID = ".." }, checkpoints.ErrInvalidID},
		{"long id", func(c *checkpoints.Checkpoint) { c.ID = strings.Repeat("x", checkpoints.MaxIDLen+1) }, checkpoints.ErrInvalidID},
		{"unknown reason", func(c *checkpoints.Checkpoint) { c.Reason = "whim" }, checkpoints.ErrInvalidEntry},
		{"empty path", func(c *checkpoints.Checkpoint) { c.Files = append(c.Files, file("")) }, checkpoints.ErrInvalidEntry},
		{"dotdot path", func(c *checkpoints.Checkpoint) { c.Files = append(c.Files, file("../etc/passwd")) }, checkpoints.ErrInvalidEntry},
		{"inner dotdot", func(c *checkpoints.Checkpoint) { c.Files = append(c.Files, file("work/../../x")) }, checkpoints.ErrInvalidEntry},
		{"absolute path", func(c *checkpoints.Checkpoint) { c.Files = append(c.Files, file("/etc/passwd")) }, checkpoints.ErrInvalidEntry},
		{"unclean path", func(c *checkpoints.Checkpoint) { c.Files = append(c.Files, file("work//x")) }, checkpoints.ErrInvalidEntry},
		{"dot path", func(c *checkpoints.Checkpoint) { c.Files = append(c.Files, file(".")) }, checkpoints.ErrInvalidEntry},
		{"negative size", func(c *checkpoints.Checkpoint) {
			e := file("work/x")
			e.Size = -1
			c.Files = append(c.Files, e)
		}, checkpoints.ErrInvalidEntry},
		{"file without blob", func(c *checkpoints.Checkpoint) {
			c.Files = append(c.Files, checkpoints.Entry{Path: "work/x", Kind: checkpoints.KindFile})
		}, checkpoints.ErrInvalidEntry},
		{"unknown kind", func(c *checkpoints.Checkpoint) {
			c.Files = append(c.Files, checkpoints.Entry{Path: "work/x", Kind: "fifo"})
		}, checkpoints.ErrInvalidEntry},
		{"duplicate path", func(c *checkpoints.Checkpoint) { c.Files = append(c.Files, file("work/x"), file("work/x")) }, checkpoints.ErrInvalidEntry},
		{"below a symlink", func(c *checkpoints.Checkpoint) {
			c.Files = append(c.Files, checkpoints.Entry{Path: "work/l", Kind: checkpoints.KindSymlink, Target: "/etc"}, file("work/l/passwd"))
		}, checkpoints.ErrInvalidEntry},
		{"symlink without target", func(c *checkpoints.Checkpoint) {
			c.Files = append(c.Files, checkpoints.Entry{Path: "work/l", Kind: checkpoints.KindSymlink})
		}, checkpoints.ErrInvalidEntry},
		{"mode out of range", func(c *checkpoints.Checkpoint) {
			e := file("work/x")
			e.Mode = 0o20000644
			c.Files = append(c.Files, e)
		}, checkpoints.ErrInvalidEntry},
		{"artifact negative size", func(c *checkpoints.Checkpoint) {
			c.Artifacts = []checkpoints.Artifact{{ArtifactID: "a", BlobKey: "k", Size: -5}}
		}, checkpoints.ErrInvalidEntry},
		{"artifact without blob", func(c *checkpoints.Checkpoint) {
			c.Artifacts = []checkpoints.Artifact{{ArtifactID: "a"}}
		}, checkpoints.ErrInvalidEntry},
		{"bad conversation", func(c *checkpoints.Checkpoint) { c.Conversation = []byte("{") }, checkpoints.ErrInvalidEntry},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := checkpoint("c1", "t1", "", "k1")
			tc.mod(c)
			_, err := e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: c, Writer: l.Writer})
			wantCode(t, tc.name, err, tc.want)
		})
	}
	_, err := e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: nil, Writer: l.Writer})
	if err == nil {
		t.Fatal("Append(nil checkpoint) succeeded")
	}
	_, err = e.s.AcquireWriter(e.ctx, "")
	wantCode(t, "AcquireWriter(\"\")", err, checkpoints.ErrInvalidID)
	_, err = e.s.Get(e.ctx, "")
	wantCode(t, "Get(\"\")", err, checkpoints.ErrInvalidID)
	if h := e.head("t1"); h != "" {
		t.Fatalf("head = %q after invalid appends, want none", h)
	}
	if refs, _ := e.s.ListBlobReferences(e.ctx); len(refs) != 0 {
		t.Fatalf("refs = %v after invalid appends, want none", refs)
	}
}

func testNotFound(t *testing.T, f Factory) {
	e := newEnv(t, f)
	_, err := e.s.Get(e.ctx, "nope")
	wantCode(t, "Get(unknown)", err, checkpoints.ErrCheckpointNotFound)
}

func testLeases(t *testing.T, f Factory) {
	e := newEnv(t, f)
	l1 := e.acquire("t1")
	if l1.ThreadID != "t1" || l1.OwnerToken == "" || l1.Fence <= 0 {
		t.Fatalf("lease = %+v, want thread t1, a token and a positive fence", l1.Writer)
	}
	if got, want := l1.ExpiresAt(), e.clock.Now().Add(leaseDuration); !got.Equal(want) {
		t.Fatalf("ExpiresAt = %v, want %v", got, want)
	}
	if l1.RenewAfter != renewAfter {
		t.Fatalf("RenewAfter = %v, want %v", l1.RenewAfter, renewAfter)
	}
	_, err := e.s.AcquireWriter(e.ctx, "t1")
	wantCode(t, "second AcquireWriter", err, checkpoints.ErrWriterConflict)
	// Another thread is independent.
	lo := e.acquire("t2")

	// Writers of another thread, or with a forged token or fence, are lost.
	_, err = e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: checkpoint("c1", "t1", ""), Writer: lo.Writer})
	wantCode(t, "append with another thread's writer", err, checkpoints.ErrWriterLost)
	forged := l1.Writer
	forged.OwnerToken = "forged"
	_, err = e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: checkpoint("c1", "t1", ""), Writer: forged})
	wantCode(t, "append with a forged token", err, checkpoints.ErrWriterLost)
	forged = l1.Writer
	forged.Fence++
	_, err = e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: checkpoint("c1", "t1", ""), Writer: forged})
	wantCode(t, "append with a forged fence", err, checkpoints.ErrWriterLost)

	e.append(l1, checkpoint("c1", "t1", ""))
	if err := l1.Release(e.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	_, err = e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: checkpoint("c2", "t1", "c1"), ExpectedHead: "c1", Writer: l1.Writer})
	wantCode(t, "append after release", err, checkpoints.ErrWriterLost)
	wantCode(t, "second Release", l1.Release(e.ctx), checkpoints.ErrWriterLost)
	_, err = l1.Renew(e.ctx)
	wantCode(t, "Renew after release", err, checkpoints.ErrWriterLost)

	l2 := e.acquire("t1")
	if l2.Fence <= l1.Fence {
		t.Fatalf("fence after release = %d, want > %d", l2.Fence, l1.Fence)
	}
	err = e.s.DeleteHead(e.ctx, checkpoints.DeleteHeadInput{ThreadID: "t1", CheckpointID: "c1", Writer: l1.Writer})
	wantCode(t, "DeleteHead by the released writer", err, checkpoints.ErrWriterLost)
	e.append(l2, checkpoint("c2", "t1", "c1"))
}

func testLeaseExpiry(t *testing.T, f Factory) {
	e := newEnv(t, f)
	l1 := e.acquire("t1")
	// Renewing before expiry extends it.
	e.clock.Advance(leaseDuration * 2 / 3)
	exp, err := l1.Renew(e.ctx)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if want := e.clock.Now().Add(leaseDuration); !exp.Equal(want) || !l1.ExpiresAt().Equal(want) {
		t.Fatalf("Renew = %v (ExpiresAt %v), want %v", exp, l1.ExpiresAt(), want)
	}
	e.clock.Advance(leaseDuration * 2 / 3)
	_, err = e.s.AcquireWriter(e.ctx, "t1")
	wantCode(t, "AcquireWriter while renewed lease lives", err, checkpoints.ErrWriterConflict)
	e.append(l1, checkpoint("c1", "t1", ""))

	// Expired but not yet superseded: lost.
	e.clock.Advance(leaseDuration)
	_, err = e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: checkpoint("c2", "t1", "c1"), ExpectedHead: "c1", Writer: l1.Writer})
	wantCode(t, "append on an expired lease", err, checkpoints.ErrWriterLost)
	_, err = l1.Renew(e.ctx)
	wantCode(t, "Renew of an expired lease", err, checkpoints.ErrWriterLost)

	// Superseded: a new writer gets a greater fence; the old one stays lost.
	l2 := e.acquire("t1")
	if l2.Fence <= l1.Fence {
		t.Fatalf("fence after expiry = %d, want > %d", l2.Fence, l1.Fence)
	}
	_, err = e.s.Append(e.ctx, checkpoints.AppendInput{Checkpoint: checkpoint("c2", "t1", "c1"), ExpectedHead: "c1", Writer: l1.Writer})
	wantCode(t, "append by a superseded writer", err, checkpoints.ErrWriterLost)
	wantCode(t, "Release by a superseded writer", l1.Release(e.ctx), checkpoints.ErrWriterLost)
	e.append(l2, checkpoint("c2", "t1", "c1"))
	// The superseded writer's failed release did not end the new lease.
	_, err = e.s.AcquireWriter(e.ctx, "t1")
	wantCode(t, "AcquireWriter after a stale release", err, checkpoints.ErrWriterConflict)
}

func testDeleteHead(t *testing.T, f Factory) {
	e := newEnv(t, f)
	l := e.acquire("t1")
	e.append(l, checkpoint("c1", "t1", "", "k1"))
	e.append(l, checkpoint("c2", "t1", "c1", "k2"))
	del := func(id string) error {
		return e.s.DeleteHead(e.ctx, checkpoints.DeleteHeadInput{ThreadID: "t1", CheckpointID: id, Writer: l.Writer})
	}
	wantCode(t, "DeleteHead(not head)", del("c1"), checkpoints.ErrNotHead)
	wantCode(t, "DeleteHead(unknown)", del("zz"), checkpoints.ErrCheckpointNotFound)
	lo := e.acquire("t2")
	e.append(lo, checkpoint("o1", "t2", ""))
	wantCode(t, "DeleteHead(head of another thread)", del("o1"), checkpoints.ErrNotHead)

	if err := del("c2"); err != nil {
		t.Fatalf("DeleteHead(c2): %v", err)
	}
	if h := e.head("t1"); h != "c1" {
		t.Fatalf("head = %q after delete, want c1", h)
	}
	_, err := e.s.Get(e.ctx, "c2")
	wantCode(t, "Get(deleted)", err, checkpoints.ErrCheckpointNotFound)
	// The head moved back, so the thread continues from c1; c2's id is free again.
	e.append(l, checkpoint("c2", "t1", "c1", "k3"))
	if err := del("c2"); err != nil {
		t.Fatal(err)
	}
	if err := del("c1"); err != nil {
		t.Fatal(err)
	}
	if h := e.head("t1"); h != "" {
		t.Fatalf("head = %q after deleting all, want none", h)
	}
	if list, _ := e.s.List(e.ctx, "t1"); len(list) != 0 {
		t.Fatalf("List = %s, want empty", ids(list))
	}
	e.append(l, checkpoint("n1", "t1", ""))
}

func refsString(refs []checkpoints.BlobRef) string {
	var s []string
	for _, r := range refs {
		s = append(s, fmt.Sprintf("%s=%d", r.Key, r.References))
	}
	return strings.Join(s, ",")
}

func testBlobReferences(t *testing.T, f Factory) {
	e := newEnv(t, f)
	l1 := e.acquire("t1")
	l2 := e.acquire("t2")
	c1 := checkpoint("c1", "t1", "", "k1", "k1", "k2")
	c1.Artifacts = []checkpoints.Artifact{{ArtifactID: "a", Name: "a", BlobKey: "k3", Size: 1}}
	e.append(l1, c1)
	e.append(l2, checkpoint("c2", "t2", "", "k1"))
	refs, err := e.s.ListBlobReferences(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := refsString(refs), "k1=3,k2=1,k3=1"; got != want {
		t.Fatalf("refs = %s, want %s", got, want)
	}
	if err := e.s.DeleteHead(e.ctx, checkpoints.DeleteHeadInput{ThreadID: "t1", CheckpointID: "c1", Writer: l1.Writer}); err != nil {
		t.Fatal(err)
	}
	refs, _ = e.s.ListBlobReferences(e.ctx)
	if got, want := refsString(refs), "k1=1"; got != want {
		t.Fatalf("refs after delete = %s, want %s", got, want)
	}
}

func testFork(t *testing.T, f Factory) {
	e := newEnv(t, f)
	ls := e.acquire("src")
	c1 := checkpoint("c1", "src", "", "k1")
	c1.Label = "base"
	c1.SourceRunID = "run-1"
	e.append(ls, c1)
	e.append(ls, checkpoint("c2", "src", "c1", "k2"))
	ld := e.acquire("dst")
	fork := func(in checkpoints.ForkInput) (*checkpoints.Checkpoint, error) {
		if in.Writer == (checkpoints.Writer{}) {
			in.Writer = ld.Writer
		}
		return e.s.ForkFromCheckpoint(e.ctx, in)
	}
	_, err := fork(checkpoints.ForkInput{SourceThreadID: "src", SourceCheckpointID: "zz", DestinationThreadID: "dst", DestinationCheckpointID: "d1"})
	wantCode(t, "fork unknown source", err, checkpoints.ErrForkSourceNotFound)
	_, err = fork(checkpoints.ForkInput{SourceThreadID: "other", SourceCheckpointID: "c1", DestinationThreadID: "dst", DestinationCheckpointID: "d1"})
	wantCode(t, "fork thread mismatch", err, checkpoints.ErrForkSourceThreadMismatch)
	_, err = fork(checkpoints.ForkInput{SourceThreadID: "src", SourceCheckpointID: "c1", DestinationThreadID: "dst", DestinationCheckpointID: "c2"})
	wantCode(t, "fork to a used id", err, checkpoints.ErrDuplicateID)
	_, err = fork(checkpoints.ForkInput{SourceThreadID: "src", SourceCheckpointID: "c1", DestinationThreadID: "dst", DestinationCheckpointID: "d1", Writer: ls.Writer})
	wantCode(t, "fork with the source's writer", err, checkpoints.ErrWriterLost)
	_, err = fork(checkpoints.ForkInput{SourceThreadID: "src", SourceCheckpointID: "c1", DestinationThreadID: "src", DestinationCheckpointID: "d1", Writer: ls.Writer})
	wantCode(t, "fork into a non-empty thread", err, checkpoints.ErrForkDestinationNotEmpty)
	_, err = fork(checkpoints.ForkInput{SourceThreadID: "src", SourceCheckpointID: "c1", DestinationThreadID: "dst", DestinationCheckpointID: "bad id"})
	wantCode(t, "fork to an invalid id", err, checkpoints.ErrInvalidID)

	at := time.Date(2026, 5, 6, 7, 8, 9, 10, time.UTC)
	got, err := fork(checkpoints.ForkInput{SourceThreadID: "src", SourceCheckpointID: "c1", DestinationThreadID: "dst", DestinationCheckpointID: "d1", CreatedAt: at})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	want := c1.Clone()
	want.ID, want.ThreadID, want.Reason, want.ForkedFrom, want.CreatedAt = "d1", "dst", checkpoints.ReasonForkRoot, "c1", at.Truncate(time.Millisecond)
	if !got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("fork-root CreatedAt = %v, want %v", got.CreatedAt, want.CreatedAt)
	}
	sameCheckpoint(t, "fork-root", got, want)
	stored, err := e.s.Get(e.ctx, "d1")
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, "stored fork-root", stored, want)
	if h := e.head("dst"); h != "d1" {
		t.Fatalf("dst head = %q, want d1", h)
	}
	if h := e.head("src"); h != "c2" {
		t.Fatalf("src head = %q after fork, want c2", h)
	}
	_, err = fork(checkpoints.ForkInput{SourceThreadID: "src", SourceCheckpointID: "c2", DestinationThreadID: "dst", DestinationCheckpointID: "d2"})
	wantCode(t, "second fork into the same thread", err, checkpoints.ErrForkDestinationNotEmpty)
	refs, _ := e.s.ListBlobReferences(e.ctx)
	if got, want := refsString(refs), "k1=2,k2=1"; got != want {
		t.Fatalf("refs after fork = %s, want %s", got, want)
	}
	// The fork continues on its own.
	e.append(ld, checkpoint("d2", "dst", "d1", "k9"))
	// Deleting the fork-root empties the destination; the source is untouched.
	if err := e.s.DeleteHead(e.ctx, checkpoints.DeleteHeadInput{ThreadID: "dst", CheckpointID: "d2", Writer: ld.Writer}); err != nil {
		t.Fatal(err)
	}
	if err := e.s.DeleteHead(e.ctx, checkpoints.DeleteHeadInput{ThreadID: "dst", CheckpointID: "d1", Writer: ld.Writer}); err != nil {
		t.Fatal(err)
	}
	if h := e.head("dst"); h != "" {
		t.Fatalf("dst head = %q, want none", h)
	}
	if _, err := e.s.Get(e.ctx, "c1"); err != nil {
		t.Fatalf("source lost after deleting its fork: %v", err)
	}
}

// testForkCapability checks checkpoints.Fork: through the store it forks, and
// through the same store without its fork capability it fails with
// ATOMIC_FORK_REQUIRED and writes nothing.
func testForkCapability(t *testing.T, f Factory) {
	e := newEnv(t, f)
	ls := e.acquire("src")
	e.append(ls, checkpoint("c1", "src", "", "k1"))
	ld := e.acquire("dst")
	in := checkpoints.ForkInput{SourceThreadID: "src", SourceCheckpointID: "c1", DestinationThreadID: "dst", DestinationCheckpointID: "d1", Writer: ld.Writer}

	plain := WithoutFork(e.s)
	if checkpoints.IsForkCapable(plain) {
		t.Fatal("IsForkCapable(WithoutFork(s)) = true, want false")
	}
	_, err := checkpoints.Fork(e.ctx, plain, in)
	wantCode(t, "Fork through a store that cannot fork", err, checkpoints.ErrAtomicForkRequired)
	if h := e.head("dst"); h != "" {
		t.Fatalf("dst head = %q after a refused fork, want none", h)
	}
	if _, err := e.s.Get(e.ctx, "d1"); !errors.Is(err, checkpoints.ErrCheckpointNotFound) {
		t.Fatalf("Get(d1) after a refused fork: err = %v, want CHECKPOINT_NOT_FOUND", err)
	}

	if !checkpoints.IsForkCapable(e.s) {
		t.Fatal("IsForkCapable(s) = false, want true")
	}
	got, err := checkpoints.Fork(e.ctx, e.s, in)
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	if got.ID != "d1" || got.Reason != checkpoints.ReasonForkRoot || got.ForkedFrom != "c1" {
		t.Fatalf("Fork = %s (%s, from %q), want d1 (fork-root, from c1)", got.ID, got.Reason, got.ForkedFrom)
	}
	if h := e.head("dst"); h != "d1" {
		t.Fatalf("dst head = %q, want d1", h)
	}
}

// memBlobs is a BlobStore for the GC case.
type memBlobs struct {
	mu    sync.Mutex
	blobs map[string]checkpoints.BlobInfo
}

func (m *memBlobs) List(context.Context) ([]checkpoints.BlobInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []checkpoints.BlobInfo
	for _, b := range m.blobs {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (m *memBlobs) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.blobs, key)
	return nil
}

func (m *memBlobs) keys() string {
	bs, _ := m.List(context.Background())
	var s []string
	for _, b := range bs {
		s = append(s, b.Key)
	}
	return strings.Join(s, ",")
}

func testGC(t *testing.T, f Factory) {
	e := newEnv(t, f)
	old := e.clock.Now().Add(-time.Hour)
	blobs := &memBlobs{blobs: map[string]checkpoints.BlobInfo{}}
	for _, k := range []string{"k1", "k2", "k3", "k4", "k5"} {
		blobs.blobs[k] = checkpoints.BlobInfo{Key: k, ModTime: old, Size: 10}
	}
	young := blobs.blobs["k5"]
	young.ModTime = e.clock.Now()
	blobs.blobs["k5"] = young
	l := e.acquire("t1")
	e.append(l, checkpoint("c1", "t1", "", "k1", "k2"))
	e.append(l, checkpoint("c2", "t1", "c1", "k2"))
	st, err := checkpoints.GC(e.ctx, e.s, blobs, checkpoints.GCOptions{MinAge: time.Minute, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := blobs.keys(), "k1,k2,k5"; got != want {
		t.Fatalf("blobs after GC = %s, want %s", got, want)
	}
	if st.Scanned != 5 || st.Deleted != 2 || st.DeletedBytes != 20 || st.Spared != 1 {
		t.Fatalf("stats = %+v, want 5 scanned, 2 deleted (20 bytes), 1 spared", st)
	}
	if err := e.s.DeleteHead(e.ctx, checkpoints.DeleteHeadInput{ThreadID: "t1", CheckpointID: "c2", Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoints.GC(e.ctx, e.s, blobs, checkpoints.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := blobs.keys(), "k1,k2"; got != want {
		t.Fatalf("blobs after second GC = %s, want %s", got, want)
	}
}

func testClosed(t *testing.T, f Factory) {
	e := newEnv(t, f)
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := e.s.Get(e.ctx, "c1"); !errors.Is(err, checkpoints.ErrClosed) {
		t.Fatalf("Get after Close: err = %v, want ErrClosed", err)
	}
	if _, err := e.s.AcquireWriter(e.ctx, "t1"); !errors.Is(err, checkpoints.ErrClosed) {
		t.Fatalf("AcquireWriter after Close: err = %v, want ErrClosed", err)
	}
}

// concurrentRounds: in each round every goroutine tries to acquire the same
// thread at once; exactly one wins, appends on the head and releases.
func concurrentRounds(t *testing.T, clock *Clock, stores []checkpoints.Store) {
	const workers, rounds = 6, 15
	ctx := context.Background()
	head := ""
	for r := 0; r < rounds; r++ {
		var (
			start   = make(chan struct{})
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []*checkpoints.Lease
			errs    []error
		)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(s checkpoints.Store) {
				defer wg.Done()
				<-start
				l, err := s.AcquireWriter(ctx, "race")
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				winners = append(winners, l)
			}(stores[w%len(stores)])
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1 (errors %v)", r, len(winners), errs)
		}
		for _, err := range errs {
			if !errors.Is(err, checkpoints.ErrWriterConflict) {
				t.Fatalf("round %d: loser err = %v, want WRITER_CONFLICT", r, err)
			}
		}
		l := winners[0]
		id := fmt.Sprintf("r%03d", r)
		if _, err := stores[r%len(stores)].Append(ctx, checkpoints.AppendInput{Checkpoint: checkpoint(id, "race", head), ExpectedHead: head, Writer: l.Writer}); err != nil {
			t.Fatalf("round %d: winner append: %v", r, err)
		}
		head = id
		if err := l.Release(ctx); err != nil {
			t.Fatalf("round %d: release: %v", r, err)
		}
		clock.Advance(time.Millisecond)
	}
	checkChain(t, stores[0], "race", rounds)
}

// concurrentAppenders: workers race to add checkpoints, each retrying until
// it holds the lease; no append may be lost or duplicated.
func concurrentAppenders(t *testing.T, stores []checkpoints.Store) {
	const workers, each = 4, 8
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int, s checkpoints.Store) {
			defer wg.Done()
			for i := 0; i < each; {
				if err := ctx.Err(); err != nil {
					errc <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
				l, err := s.AcquireWriter(ctx, "busy")
				if errors.Is(err, checkpoints.ErrWriterConflict) {
					time.Sleep(time.Duration(w+1) * 100 * time.Microsecond) // back off; the holder is mid-append
					continue
				}
				if err != nil {
					errc <- fmt.Errorf("worker %d acquire: %w", w, err)
					return
				}
				head, err := s.Head(ctx, "busy")
				if err == nil {
					_, err = s.Append(ctx, checkpoints.AppendInput{Checkpoint: checkpoint(fmt.Sprintf("w%d-%d", w, i), "busy", head), ExpectedHead: head, Writer: l.Writer})
				}
				if rerr := l.Release(ctx); err == nil {
					err = rerr
				}
				if err != nil {
					errc <- fmt.Errorf("worker %d append %d: %w", w, i, err)
					return
				}
				i++
			}
		}(w, stores[w%len(stores)])
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	checkChain(t, stores[len(stores)-1], "busy", workers*each)
}

// checkChain walks the thread from its head through parents and checks it
// holds n distinct checkpoints that List returns in chain order.
func checkChain(t *testing.T, s checkpoints.Store, thread string, n int) {
	t.Helper()
	ctx := context.Background()
	list, err := s.List(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n {
		t.Fatalf("List has %d checkpoints, want %d", len(list), n)
	}
	byID := map[string]*checkpoints.Checkpoint{}
	for _, c := range list {
		byID[c.ID] = c
	}
	if len(byID) != n {
		t.Fatalf("List has %d distinct ids, want %d", len(byID), n)
	}
	head, err := s.Head(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	var chain []string
	for id := head; id != ""; id = byID[id].ParentID {
		if byID[id] == nil {
			t.Fatalf("chain reaches %q, which List does not return", id)
		}
		chain = append(chain, id)
		if len(chain) > n {
			t.Fatal("cycle in the parent chain")
		}
	}
	if len(chain) != n {
		t.Fatalf("chain from head has %d checkpoints, want %d", len(chain), n)
	}
	for i, c := range list {
		if c.ID != chain[n-1-i] {
			t.Fatalf("List[%d] = %s, want %s (chain order)", i, c.ID, chain[n-1-i])
		}
	}
}

func testDeleteCheckpoint(t *testing.T, f Factory) {
	e := newEnv(t, f)
	l := e.acquire("t1")
	e.append(l, checkpoint("c1", "t1", "", "k1"))
	e.append(l, checkpoint("c2", "t1", "c1", "k2"))
	e.append(l, checkpoint("c3", "t1", "c2", "k3"))
	lo := e.acquire("t2")
	e.append(lo, checkpoint("o1", "t2", "", "k1"))
	del := func(id string, w checkpoints.Writer) error {
		return e.s.DeleteCheckpoint(e.ctx, checkpoints.DeleteHeadInput{ThreadID: "t1", CheckpointID: id, Writer: w})
	}
	wantCode(t, "DeleteCheckpoint(unknown)", del("zz", l.Writer), checkpoints.ErrCheckpointNotFound)
	wantCode(t, "DeleteCheckpoint(other thread's)", del("o1", l.Writer), checkpoints.ErrCheckpointNotFound)
	wantCode(t, "DeleteCheckpoint by another thread's writer", del("c2", lo.Writer), checkpoints.ErrWriterLost)

	// A middle checkpoint: its child takes its parent.
	if err := del("c2", l.Writer); err != nil {
		t.Fatalf("DeleteCheckpoint(c2): %v", err)
	}
	list, _ := e.s.List(e.ctx, "t1")
	if got := ids(list); got != "c1,c3" {
		t.Fatalf("List = %s, want c1,c3", got)
	}
	c3, err := e.s.Get(e.ctx, "c3")
	if err != nil {
		t.Fatal(err)
	}
	if c3.ParentID != "c1" {
		t.Fatalf("c3 parent = %q, want c1", c3.ParentID)
	}
	if h := e.head("t1"); h != "c3" {
		t.Fatalf("head = %q, want c3", h)
	}
	refs, _ := e.s.ListBlobReferences(e.ctx)
	if got, want := refsString(refs), "k1=2,k3=1"; got != want {
		t.Fatalf("refs = %s, want %s", got, want)
	}
	// The root: its child becomes a root.
	if err := del("c1", l.Writer); err != nil {
		t.Fatal(err)
	}
	if c3, _ := e.s.Get(e.ctx, "c3"); c3 == nil || c3.ParentID != "" {
		t.Fatalf("c3 after deleting the root = %+v, want no parent", c3)
	}
	// The head: the head moves to its parent (none left).
	if err := del("c3", l.Writer); err != nil {
		t.Fatal(err)
	}
	if h := e.head("t1"); h != "" {
		t.Fatalf("head = %q, want none", h)
	}
	e.append(l, checkpoint("c4", "t1", ""))
	if h := e.head("t2"); h != "o1" {
		t.Fatalf("other thread head = %q, want o1", h)
	}
}
