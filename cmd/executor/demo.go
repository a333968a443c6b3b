package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/api"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/cli"
	"github.com/alineo-labs/alineo/jobs"
)

// demoJob is examples/takeover.json with a longer step after the checkpoint,
// so there is time to kill its executor there.
const demoJob = `{
  "name": "takeover-demo",
  "image": "host",
  "resources": {"cpu": "1", "memory": "256Mi"},
  "env": {"GREETING": "hello"},
  "steps": [
    {"writeFile": {"path": "/root/job/build.sh", "content": "#!/bin/sh\necho \"$GREETING from build\"\n"}},
    {"exec": {"command": "sh /root/job/build.sh"}},
    {"exec": {"command": "echo compiling; sleep 1; echo compiled > /root/job/artifact"}},
    {"checkpoint": {"tag": "after-build"}},
    {"exec": {"command": "echo testing; sleep 4; echo tested"}},
    {"exec": {"command": "cat /root/job/artifact"}},
    {"exec": {"command": "test -f /root/job/missing", "strict": false}}
  ]
}`

// workerCommand builds the command of a demo executor process: this binary's
// "work". Tests replace it (the test binary is not the executor).
var workerCommand = func(args []string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe, append([]string{"work"}, args...)...)
}

type demoWorker struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func startDemoWorker(name, natsURL, sandboxURL string, ackWait time.Duration, stdout io.Writer) (*demoWorker, error) {
	// The NATS URL carries the embedded server's token: it goes in the
	// environment, which other host users cannot read, not on the command line.
	cmd := workerCommand([]string{"--id", name, "--ack-wait", ackWait.String(), "--sandbox", sandboxURL})
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "NATS_URL="+natsURL, "OPEN_SANDBOX_URL="+sandboxURL)
	pw := prefixWriter(stdout, fmt.Sprintf("  %s │ ", name))
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	w := &demoWorker{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(w.done) }()
	return w, nil
}

func (w *demoWorker) stop(sig syscall.Signal) {
	_ = w.cmd.Process.Signal(sig)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// awaitCompleted waits until the read model shows every session of ids
// completed.
func awaitCompleted(ctx context.Context, rm adapters.ReadModel, name string, ids ...string) error {
	for _, id := range ids {
		for {
			d, err := rm.GetSandboxDetails(ctx, name, id)
			if err == nil && d != nil && d.Status == adapters.StatusCompleted {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("read model: session %s not completed: %w", id, errors.Join(err, ctx.Err()))
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// demo shows a takeover on embedded defaults: NATS, sandboxd, a projector and
// the API in this process; two executor processes; the first is killed with
// SIGKILL after the job's checkpoint, the second takes the job over.
func demo(ctx context.Context, c *config, getenv func(string) string, stdout io.Writer, log *slog.Logger) (err error) {
	// The demo's data outlives it (the dashboard can be reopened on it), and
	// each run starts afresh: only what the demo itself writes is removed.
	dir := c.demoDir
	for _, p := range []string{"nats", "alineo.db", "alineo.db-wal", "alineo.db-shm"} {
		if err := os.RemoveAll(filepath.Join(dir, p)); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if c.nats == "" {
		c.natsDir = filepath.Join(dir, "nats")
	}
	if c.sqlite == cli.DefaultSQLite {
		c.sqlite = filepath.Join(dir, "alineo.db")
	}
	say := func(format string, args ...any) { fmt.Fprintf(stdout, "==> "+format+"\n", args...) }

	f, err := openFleet(ctx, c, getenv, log)
	if err != nil {
		return err
	}
	defer f.close()
	pctx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	pr, err := startProjector(pctx, c, f.bus, getenv, log)
	if err != nil {
		return err
	}
	defer pr.store.Close()
	const ackWait = 3 * time.Second
	q, err := jobs.OpenQueue(ctx, f.bus.JetStream(), jobs.QueueConfig{AckWait: ackWait, MaxDeliver: c.maxDeliver})
	if err != nil {
		return err
	}
	srv, err := api.New(api.Config{Store: pr.store, Bus: f.bus, Queue: q, Logger: log})
	if err != nil {
		return err
	}
	apiAddr, _, err := cli.Serve(pctx, c.apiListen, srv)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	natsURL := f.bus.LocalURL() // the embedded server's, with its token
	if natsURL == "" {
		natsURL = c.nats
	}
	say("embedded NATS %s, sandboxd %s, read model %s, API http://%s", f.bus.ClientURL(), f.sandboxURL, pr.desc, apiAddr)

	spec, err := jobs.Parse([]byte(demoJob))
	if err != nil {
		return err
	}
	first, final, err := takeover(ctx, q, spec, natsURL, f.sandboxURL, ackWait, stdout, say)
	if err != nil {
		return err
	}
	say("job %s succeeded on attempt %d by %s, resumed in sandbox %s", final.ID, final.Attempt, final.Worker, final.SandboxID)

	// The timeline, from the read model.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := f.ledger.Flush(wctx); err != nil {
		return err
	}
	// Until both sessions' sandbox.closed are projected: the killed one's was
	// recorded by executor-B when it took the job over.
	if err := awaitCompleted(wctx, pr.store, spec.Name, first.SandboxID, final.SandboxID); err != nil {
		return err
	}
	say("timeline (%s):", pr.desc)
	live := map[string]int{}
	for _, id := range []string{first.SandboxID, final.SandboxID} {
		es, err := pr.store.ReadAll(wctx, spec.Name, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "  session %s / %s\n", spec.Name, id)
		for _, e := range es {
			fmt.Fprintf(stdout, "    #%-4d %s  step %-2d %-27s %s\n", e.Seq, time.UnixMilli(e.Ts).UTC().Format("15:04:05.000"), e.StepIndex, e.Event, oneLineSummary(e))
			if e.Event == events.ExecStarted {
				var p events.ExecStartedPayload
				if e.Decode(&p) == nil {
					live[p.Text()]++
				}
			}
		}
	}
	say("steps before the checkpoint ran live exactly once:")
	for _, st := range spec.Steps[:3] {
		if st.Exec != nil {
			fmt.Fprintf(stdout, "    %-60q live %d time(s)\n", st.Exec.Command, live[st.Exec.Command])
		}
	}
	reopen := reopenCommand(c)
	switch {
	case c.hold > 0:
		say("dashboard: http://%s/  (this sandbox: http://%s/ui/sandboxes/%s/%s)", apiAddr, apiAddr, spec.Name, final.SandboxID)
		say("serving the dashboard for %s (Ctrl-C to stop)", c.hold)
		select {
		case <-ctx.Done():
		case <-time.After(c.hold):
		}
	case interactive():
		say("dashboard: http://%s/  (this sandbox: http://%s/ui/sandboxes/%s/%s)", apiAddr, apiAddr, spec.Name, final.SandboxID)
		say("the dashboard is up until you press Enter or Ctrl-C")
		waitEnter(ctx, stdin)
	}
	say("the dashboard stopped with the demo; to reopen it on the demo's data:\n    %s", reopen)
	return nil
}

// interactive reports whether the demo runs on a terminal (stdin and stdout),
// where it keeps the dashboard up until Enter. Tests replace it.
var interactive = func() bool { return isTerminal(os.Stdin) && isTerminal(os.Stdout) }

// stdin is where the demo reads Enter from. Tests replace it.
var stdin io.Reader = os.Stdin

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// waitEnter returns once a line (or EOF) is read from r, or ctx is done.
func waitEnter(ctx context.Context, r io.Reader) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		for {
			n, err := r.Read(b[:])
			if err != nil || (n == 1 && b[0] == '\n') {
				return
			}
		}
	}()
	select {
	case <-ctx.Done():
	case <-done:
	}
}

// reopenCommand is the command that serves the dashboard on the demo's data.
func reopenCommand(c *config) string {
	args := []string{"go run ./cmd/api"}
	if c.nats != "" {
		args = append(args, "--nats", c.nats)
	} else {
		args = append(args, "--nats-dir", c.natsDir)
	}
	if c.postgres != "" {
		args = append(args, "--postgres", "'"+c.postgres+"'")
	} else {
		args = append(args, "--sqlite", c.sqlite)
	}
	return strings.Join(args, " ")
}

// takeover submits spec to q, starts executor-A, kills it with SIGKILL inside
// step 5 once it is past the checkpoint, and starts executor-B, which takes the
// job over. It returns the job's status when A was killed and its final status
// (succeeded); both executors are stopped when it returns.
func takeover(ctx context.Context, q *jobs.Queue, spec jobs.Spec, natsURL, sandboxURL string, ackWait time.Duration,
	stdout io.Writer, say func(format string, args ...any)) (first, final jobs.Status, err error) {
	st, err := q.Submit(ctx, spec)
	if err != nil {
		return first, final, err
	}
	say("submitted job %s (%s, %d steps, checkpoint after step 4) to %s", st.ID, spec.Name, len(spec.Steps), q.Config().Stream)

	a, err := startDemoWorker("executor-A", natsURL, sandboxURL, ackWait, stdout)
	if err != nil {
		return first, final, err
	}
	defer a.stop(syscall.SIGKILL)
	// Wait until A is past the checkpoint and inside step 5, then kill it.
	first, err = waitJob(ctx, q, st.ID, 60*time.Second, func(s jobs.Status) bool { return s.Checkpoint != nil && s.Done >= 4 })
	if err != nil {
		return first, final, fmt.Errorf("waiting for executor-A to pass the checkpoint: %w", err)
	}
	time.Sleep(500 * time.Millisecond) // let step 5 start: "testing" shows in the timeline
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	say("SIGKILL executor-A (pid %d) during step 5 of %d; sandbox %s left behind, job lease expires in %s",
		a.cmd.Process.Pid, len(spec.Steps), first.SandboxID, ackWait)

	b, err := startDemoWorker("executor-B", natsURL, sandboxURL, ackWait, stdout)
	if err != nil {
		return first, final, err
	}
	defer b.stop(syscall.SIGTERM)
	final, err = waitJob(ctx, q, st.ID, 90*time.Second, func(s jobs.Status) bool { return s.State.Terminal() })
	if err != nil {
		return first, final, fmt.Errorf("waiting for executor-B: %w", err)
	}
	if final.State != jobs.StateSucceeded {
		return first, final, fmt.Errorf("job %s %s: %s", final.ID, final.State, final.Error)
	}
	b.stop(syscall.SIGTERM)
	return first, final, nil
}

func waitJob(ctx context.Context, q *jobs.Queue, id string, timeout time.Duration, ok func(jobs.Status) bool) (jobs.Status, error) {
	deadline := time.Now().Add(timeout)
	for {
		st, err := q.Status(ctx, id)
		if err == nil && ok(st) {
			return st, nil
		}
		if err == nil && st.State.Terminal() {
			return st, fmt.Errorf("job %s %s: %s", id, st.State, st.Error)
		}
		if time.Now().After(deadline) {
			return st, errors.Join(fmt.Errorf("job %s still %s after %s", id, st.State, timeout), err)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func oneLineSummary(e events.Entry) string {
	s := strings.Join(strings.Fields(string(e.Payload)), " ")
	if len(s) > 90 {
		s = s[:87] + "..."
	}
	return s
}
