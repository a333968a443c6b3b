package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/alineo-labs/alineo/events"
)

// TestAppendPagesPerExec: recording an exec writes few pages per commit, on average:
// exec.started is its row and its two index entries (3 pages); the last
// output and exec.completed, committed together, their row(s), index entries
// and the session's exec count, which touches no details index (4 pages; the
// full upsert rewrote the row in five indexes: 9). The hash chain adds no
// page: the heads are the rows' own hash column. Counted as WAL frames, on
// a fresh file before the first checkpoint.
func TestAppendPagesPerExec(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	s, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Append(ctx, events.New(1, "n", "S", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{RunID: "r"})); err != nil {
		t.Fatal(err)
	}
	var pageSize int64
	w, _, _ := s.dbs(ctx)
	if err := w.QueryRowContext(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	frames := func() int64 {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size() / (pageSize + 24)
	}
	const execs = 40
	var started, completed int64
	for i := 1; i <= execs; i++ {
		f0 := frames()
		if err := s.Append(ctx, events.New(int64(i), "n", "S", i, events.ExecStarted,
			events.ExecStartedPayload{Seq: i, Kind: events.KindCommand, Cmd: "echo hi " + strconv.Itoa(i)})); err != nil {
			t.Fatal(err)
		}
		f1 := frames()
		if err := s.AppendBatch(ctx, []events.Entry{
			events.New(int64(i), "n", "S", i, events.ExecOutput, events.NewOutput(i, events.Stdout, []byte("hi\n"))),
			events.New(int64(i), "n", "S", i, events.ExecCompleted, events.ExecCompletedPayload{Seq: i}),
		}); err != nil {
			t.Fatal(err)
		}
		f2 := frames()
		started, completed = started+f1-f0, completed+f2-f1
	}
	// On average: a commit that splits a B-tree page writes a page or two more.
	if s, c := float64(started)/execs, float64(completed)/execs; s > 3.5 || c > 4.5 {
		t.Errorf("pages per commit: exec.started %.1f, output+completed %.1f; want about 3 and 4", s, c)
	} else {
		t.Logf("pages per commit: exec.started %.1f, output+completed %.1f", s, c)
	}
	d, err := s.GetSandboxDetails(ctx, "n", "S")
	if err != nil || d == nil || d.ExecCount != execs || d.Status != "running" || d.StartedAt != 1 {
		t.Fatalf("details = %+v, %v; want %d execs, running, started at 1", d, err, execs)
	}
	// A completion of a session with no summary row yet creates it.
	if err := s.Append(ctx, events.New(5, "n", "T", 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1})); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, events.New(4, "n", "T", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{RunID: "r"})); err != nil {
		t.Fatal(err)
	}
	if d, err := s.GetSandboxDetails(ctx, "n", "T"); err != nil || d == nil || d.ExecCount != 1 || d.StartedAt != 4 {
		t.Fatalf("details of T = %+v, %v; want 1 exec, started at 4", d, err)
	}
}
