package alineo_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// The child process of TestCrashResume reads these.
const (
	crashURLEnv = "ALINEO_CRASH_SANDBOXD"
	crashDBEnv  = "ALINEO_CRASH_DB"
	crashIDEnv  = "ALINEO_CRASH_ID_FILE"
)

// crashJob is a job with a checkpoint: two steps, a checkpoint, then a long
// step that takes sleep seconds.
func crashJob(ctx context.Context, sb *alineo.Sandbox, sleep string) (string, error) {
	steps := []string{
		"mkdir -p /job && echo dep > /job/dep && echo installed",
		"echo build > /job/build && echo built",
	}
	for _, s := range steps {
		if _, err := sb.Exec(ctx, s).Wait(); err != nil {
			return "", err
		}
	}
	if _, err := sb.Checkpoint(ctx, "ready"); err != nil {
		return "", err
	}
	res, err := sb.Exec(ctx, "cat /job/dep /job/build && sleep "+sleep+" && echo finished").Wait()
	return res.Stdout, err
}

// TestCrashChild is the process TestCrashResume kills; it is skipped otherwise.
func TestCrashChild(t *testing.T) {
	url := os.Getenv(crashURLEnv)
	if url == "" {
		t.Skip("the child process of TestCrashResume")
	}
	store, err := sqlite.Open(os.Getenv(crashDBEnv), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := alineo.New(alineo.Options{BaseURL: url, Adapter: store})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: "crash-job"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv(crashIDEnv), []byte(sb.ID()), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = crashJob(ctx, sb, "60")
	t.Fatalf("the job ended (%v); it should have been killed", err)
}

// TestCrashResume runs a job in a child process, kills it with SIGKILL in the
// middle of the step after the checkpoint, and completes the job by resuming
// in this process. Each step before the checkpoint ran live exactly once.
func TestCrashResume(t *testing.T) {
	url := testenv.Sandboxd(t)
	db := testenv.SQLitePath(t)
	idFile := filepath.Join(t.TempDir(), "id")
	ctx := testCtx(t)

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashURLEnv+"="+url, crashDBEnv+"="+db, crashIDEnv+"="+idFile)
	var childOut strings.Builder
	cmd.Stdout, cmd.Stderr = &childOut, &childOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	var id string
	testenv.Eventually(t, 20*time.Second, func() error {
		select {
		case err := <-exited:
			killed = true
			t.Fatalf("the child exited early (%v):\n%s", err, childOut.String())
		default:
		}
		b, err := os.ReadFile(idFile)
		if err != nil || len(b) == 0 {
			return fmt.Errorf("no sandbox id yet")
		}
		id = string(b)
		return nil
	})
	store, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// Kill it once step 3 has started (it then sleeps for a minute).
	testenv.Eventually(t, 20*time.Second, func() error {
		es, err := store.ReadAll(ctx, "crash-job", id)
		if err != nil {
			return err
		}
		for _, e := range es {
			if e.Event == events.ExecStarted && e.StepIndex == 3 {
				return nil
			}
		}
		return errors.New("step 3 has not started")
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	killed = true

	c, err := alineo.New(alineo.Options{BaseURL: url, Adapter: store})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Resume(ctx, id, alineo.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	got, err := crashJob(ctx, r, "0")
	if err != nil || got != "dep\nbuild\nfinished\n" {
		t.Fatalf("resumed job = %q, %v; want both files and finished", got, err)
	}

	// Every session of the job, together: steps 1 and 2 completed once (in the
	// killed process), step 3 once (after the resume).
	completed := map[int]int{}
	all, err := c.Sandboxes().ListByName(ctx, "crash-job", alineo.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Fatalf("%d sessions named crash-job, want 2", len(all))
	}
	for _, d := range all {
		es, err := store.ReadAll(ctx, d.Name, d.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.Event == events.ExecCompleted {
				completed[e.StepIndex]++
				if e.StepIndex < 3 && d.SandboxID != id {
					t.Errorf("step %d ran live again in the resumed sandbox", e.StepIndex)
				}
			}
		}
	}
	for step := 1; step <= 3; step++ {
		if completed[step] != 1 {
			t.Errorf("step %d completed %d times in the ledger, want 1", step, completed[step])
		}
	}
}
