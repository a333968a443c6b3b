package alineo

import (
	"context"
	"errors"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

const (
	tsRunSbx = "cc2cc19c704991b1b274f4ebd402822b"
	tsRunID  = "b871fc32-b1b6-4866-ae9f-12b80d442659"
)

// tsStep is one exec of the TypeScript SDK's session.db as its own replay
// returns it: stdout and stderr are the recorded lines joined with "".
type tsStep struct {
	cmd            string
	stdout, stderr string
	exit           int
}

var tsSteps = []tsStep{
	{"cat /proc/sys/kernel/random/uuid", "a36dee61-cf71-4d8a-bbb5-bb25896d24c9", "", 0},
	{`printf 'a\nb\n'; echo err >&2`, "ab", "err", 0},
	{"for i in 1 2 3; do echo $i; done", "123", "", 0},
	{"echo out; echo oops >&2", "out", "oops", 0},
	{"exit 3", "", "", 3},
	{"echo x >> /tmp/count; wc -l < /tmp/count; exit 4", "1", "", 4},
	{"ls /tmp; cat /tmp/f2.txt", "countf2.txthello fileLINE2", "", 0},
}

// TestReplayCacheTypeScriptSession builds the replay cache from the
// TypeScript SDK's session.db: per step, the results its own replay gives.
func TestReplayCacheTypeScriptSession(t *testing.T) {
	store, err := sqlite.Open(testenv.Fixture(t, adaptertest.TypeScriptSession.File), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, tag := range []string{"", "t1"} {
		rp, err := buildResumePoint(t.Context(), store, "ts-run", tsRunSbx, tag)
		if err != nil {
			t.Fatal(err)
		}
		if rp.checkpoint.SnapshotID != "snap-fdfb6afbaaa8651acbcf249671593f66" || rp.runID != tsRunID ||
			rp.resources != (Resources{CPU: "500m", Memory: "512Mi"}) {
			t.Fatalf("resume point = %+v, %q, %+v", rp.checkpoint, rp.runID, rp.resources)
		}
		if got, want := rp.cache.Len(), len(tsSteps); got != want {
			t.Fatalf("cache holds %d steps, want %d (exec 8 ran after the checkpoint)", got, want)
		}
		for i, want := range tsSteps {
			res, err := rp.cache.steps[i+1].decode()
			if err != nil {
				t.Fatalf("step %d: %v", i+1, err)
			}
			var stdout, stderr []byte
			for _, c := range res.chunks {
				if c.stream == events.Stdout {
					stdout = append(stdout, c.data...)
				} else {
					stderr = append(stderr, c.data...)
				}
			}
			if res.text != want.cmd || string(stdout) != want.stdout || string(stderr) != want.stderr || res.exitCode != want.exit {
				t.Errorf("step %d = %q: %q, %q, exit %d; want %q: %q, %q, exit %d", i+1,
					res.text, stdout, stderr, res.exitCode, want.cmd, want.stdout, want.stderr, want.exit)
			}
			if res.fingerprint != events.Fingerprint(events.KindCommand, want.cmd) {
				t.Errorf("step %d fingerprint = %s, want the command's", i+1, res.fingerprint)
			}
		}
	}
}

// TestResumeTypeScriptSession lists the TypeScript SDK's sessions through the
// client and resumes its run: execs 1-7 replay as its own replay does (the
// strict rule is ours), nothing reaches the sandbox, exec 8 runs live, and the
// resumed session lists beside the TypeScript SDK's.
func TestResumeTypeScriptSession(t *testing.T) {
	ctx := context.Background()
	f := newFakeServer(t)
	store, err := sqlite.Open(testenv.Fixture(t, adaptertest.TypeScriptSession.File), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c, err := New(Options{BaseURL: f.URL, Adapter: store})
	if err != nil {
		t.Fatal(err)
	}
	all, err := c.Sandboxes().List(ctx, ListOptions{})
	if err != nil || len(all) != 2 || all[1].SandboxID != tsRunSbx || all[1].ExecCount != 8 {
		t.Fatalf("List = %+v, %v; want the TypeScript SDK's two sessions", all, err)
	}
	sb, err := c.Resume(ctx, tsRunSbx, ResumeOptions{})
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	for i, want := range tsSteps {
		res, err := sb.Exec(ctx, want.cmd, ExecOptions{Strict: new(false)}).Wait()
		if err != nil || res.Stdout != want.stdout || res.Stderr != want.stderr || res.ExitCode != want.exit {
			t.Errorf("exec %d = %+v, %v; want %q, %q, exit %d", i+1, res, err, want.stdout, want.stderr, want.exit)
		}
	}
	// Step 8 is live (the fake execd answers a command with its text, a line).
	if res, err := sb.Exec(ctx, tsSteps[0].cmd).Wait(); err != nil || res.Stdout != tsSteps[0].cmd+"\n" {
		t.Fatalf("live exec 8 = %+v, %v", res, err)
	}
	f.mu.Lock()
	cmds := append([]string(nil), f.commands...)
	f.mu.Unlock()
	if len(cmds) != 1 {
		t.Fatalf("commands sent to execd = %q, want only the live exec 8", cmds)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	all, err = c.Sandboxes().List(ctx, ListOptions{RunID: tsRunID})
	if err != nil || len(all) != 3 || all[0].SandboxID != sb.ID() || all[0].Name != "ts-run" ||
		all[0].Status != adapters.StatusCompleted || all[0].ExecCount != 1 {
		t.Fatalf("List(run) = %+v, %v; want the resumed session first, then the TypeScript SDK's two", all, err)
	}
	// Strict is ours: a replayed non-zero exit fails a strict call, as live.
	sb2, err := c.Resume(ctx, tsRunSbx, ResumeOptions{Name: "ts-run", Tag: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb2.Close(ctx)
	for _, want := range tsSteps[:4] {
		if _, err := sb2.Exec(ctx, want.cmd).Wait(); err != nil {
			t.Fatal(err)
		}
	}
	var ce *CommandError
	if _, err := sb2.Exec(ctx, "exit 3").Wait(); !errors.As(err, &ce) || ce.ExitCode != 3 {
		t.Fatalf("strict replay of exit 3 = %v, want a *CommandError with exit 3", err)
	}
}
