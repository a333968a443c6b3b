package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/sqlite"
)

const (
	childDBEnv   = "ALINEO_CKPT_CHILD_DB"
	childNameEnv = "ALINEO_CKPT_CHILD_NAME"
	perChild     = 10
)

// TestChildAppender is the body of one child process of TestMultiProcess; it
// does nothing when run directly.
func TestChildAppender(t *testing.T) {
	path, name := os.Getenv(childDBEnv), os.Getenv(childNameEnv)
	if path == "" {
		t.Skip("child process of TestMultiProcess only")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := sqlite.Open(ctx, path, checkpoints.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < perChild; {
		l, err := s.AcquireWriter(ctx, "shared")
		if errors.Is(err, checkpoints.ErrWriterConflict) {
			time.Sleep(time.Millisecond) // another process holds the lease for one append
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		head, err := s.Head(ctx, "shared")
		if err != nil {
			t.Fatal(err)
		}
		c := &checkpoints.Checkpoint{ID: name + "-" + strconv.Itoa(i), ThreadID: "shared", ParentID: head, Reason: checkpoints.ReasonAutomatic}
		if _, err := s.Append(ctx, checkpoints.AppendInput{Checkpoint: c, ExpectedHead: head, Writer: l.Writer}); err != nil {
			t.Fatalf("append %s: %v", c.ID, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		i++
	}
}

// TestMultiProcess runs three processes appending to one thread in one file:
// every append lands once, in one chain.
func TestMultiProcess(t *testing.T) {
	if os.Getenv(childDBEnv) != "" {
		t.Skip("in a child")
	}
	path := filepath.Join(t.TempDir(), "shared.db")
	s := open(t, path, checkpoints.Options{})
	const children = 3
	var cmds []*exec.Cmd
	for i := 0; i < children; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildAppender$", "-test.count=1")
		cmd.Env = append(os.Environ(), childDBEnv+"="+path, fmt.Sprintf("%s=p%d", childNameEnv, i))
		out := &prefixWriter{t: t, name: fmt.Sprintf("child %d", i)}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
	}
	ctx := context.Background()
	list, err := s.List(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(list), children*perChild; got != want {
		t.Fatalf("thread has %d checkpoints, want %d", got, want)
	}
	seen := map[string]bool{}
	for i, c := range list {
		want := ""
		if i > 0 {
			want = list[i-1].ID
		}
		if c.ParentID != want || seen[c.ID] {
			t.Fatalf("checkpoint %d (%s): parent %q, want %q (seen before: %v)", i, c.ID, c.ParentID, want, seen[c.ID])
		}
		seen[c.ID] = true
	}
	if h, _ := s.Head(ctx, "shared"); h != list[len(list)-1].ID {
		t.Fatalf("head = %s, want %s", h, list[len(list)-1].ID)
	}
}

type prefixWriter struct {
	t    *testing.T
	name string
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s: %s", w.name, p)
	return len(p), nil
}
