package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/testenv"
)

// childArgs is the variable that makes the test binary run the executor's
// run function instead of the tests, so a worker is a real process that a
// test can SIGKILL or SIGTERM.
const childArgs = "ALINEO_EXECUTOR_TEST_ARGS"

func TestMain(m *testing.M) {
	if a := os.Getenv(childArgs); a != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, strings.Split(a, "\x1f"), os.Getenv, os.Stdout)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "executor:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// worker is an executor `work` process.
type worker struct {
	cmd  *exec.Cmd
	out  *testutil.SyncBuffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit error, once done is closed
}

func startWorker(t *testing.T, natsURL, sandboxURL string, args ...string) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgs+"="+strings.Join(append([]string{"work"}, args...), "\x1f"),
		"NATS_URL="+natsURL, "OPEN_SANDBOX_URL="+sandboxURL)
	w := &worker{cmd: cmd, out: &testutil.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = w.out, w.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.err = cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-w.done
		if t.Failed() {
			t.Logf("worker %v output:\n%s", args, w.out)
		}
	})
	return w
}

type fleetEnv struct {
	natsURL, sandboxURL string
	bus                 *bus.Bus
	queue               *jobs.Queue
}

func newFleetEnv(t *testing.T, ackWait time.Duration) *fleetEnv {
	t.Helper()
	f := &fleetEnv{natsURL: testenv.NATS(t), sandboxURL: testenv.Sandboxd(t)}
	b, err := bus.Open(context.Background(), bus.Config{URL: f.natsURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	f.bus = b
	f.queue, err = jobs.OpenQueue(context.Background(), b.JetStream(), jobs.QueueConfig{AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fleetEnv) submit(t *testing.T, doc string) string {
	t.Helper()
	return f.submitAs(t, doc, "")
}

// submitAs submits doc on behalf of by (jobs.Queue.SubmitAs).
func (f *fleetEnv) submitAs(t *testing.T, doc, by string) string {
	t.Helper()
	spec, err := jobs.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	st, err := f.queue.SubmitAs(context.Background(), spec, by)
	if err != nil {
		t.Fatal(err)
	}
	return st.ID
}

func (f *fleetEnv) waitStatus(t *testing.T, id string, timeout time.Duration, ok func(jobs.Status) error) jobs.Status {
	t.Helper()
	var st jobs.Status
	testenv.Eventually(t, timeout, func() error {
		var err error
		if st, err = f.queue.Status(context.Background(), id); err != nil {
			return err
		}
		return ok(st)
	})
	return st
}

// wantTakenOver checks that the dead attempt's session (name, id) ends with
// sandbox.closed recorded by the new owner, and that the server no longer
// runs its sandbox.
func (f *fleetEnv) wantTakenOver(t *testing.T, name, id, by string) {
	t.Helper()
	l, err := bus.NewLedger(f.bus, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	es, err := l.ReadAll(context.Background(), name, id)
	if err != nil || len(es) == 0 {
		t.Fatalf("session %s/%s: %d entries, %v", name, id, len(es), err)
	}
	last := es[len(es)-1]
	var p events.SandboxClosedPayload
	if last.Event != events.SandboxClosed || last.Decode(&p) != nil || p.Reason != events.ClosedTakenOver || p.By != by {
		t.Errorf("session %s/%s ends with %s %s, want sandbox.closed taken over by %s", name, id, last.Event, last.Payload, by)
	}
	resp, err := http.Get(f.sandboxURL + "/v1/sandboxes/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb struct {
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&sb)
	if resp.StatusCode == http.StatusOK && sb.Status.State == "Running" {
		t.Errorf("sandbox %s still Running on the server after the takeover", id)
	}
}

// execStarts counts the exec.started entries of the whole ledger by command.
// It reads from sequence 1 until no entry arrives for 300 ms.
func (f *fleetEnv) execStarts(t *testing.T) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seq, err := f.bus.Subscribe(ctx, bus.Filter{FromSeq: 1, Events: []events.Event{events.ExecStarted}})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan events.Entry, 64)
	go func() {
		defer close(ch)
		for e, err := range seq {
			if err != nil {
				return
			}
			select {
			case ch <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	counts := map[string]int{}
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return counts
			}
			var p events.ExecStartedPayload
			if err := e.Decode(&p); err != nil {
				t.Fatal(err)
			}
			counts[p.Text()]++
		case <-time.After(300 * time.Millisecond):
			return counts
		}
	}
}

// lines returns the output lines of w that contain s.
func lines(w *worker, s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(w.out.String()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			out = append(out, sc.Text())
		}
	}
	return out
}

const takeoverJob = `{"name":"takeover","image":"host","steps":[
	{"exec":{"command":"echo one"}},
	{"exec":{"command":"echo two > /root/two"}},
	{"checkpoint":{"tag":"mid"}},
	{"exec":{"command":"sleep 4; echo three"}},
	{"exec":{"command":"cat /root/two"}}]}`

// actors returns the actor of each entry of session (name, id), in order.
func (f *fleetEnv) actors(t *testing.T, name, id string) []string {
	t.Helper()
	l, err := bus.NewLedger(f.bus, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	es, err := l.ReadAll(context.Background(), name, id)
	if err != nil || len(es) == 0 {
		t.Fatalf("session %s/%s: %d entries, %v", name, id, len(es), err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Actor
	}
	return out
}

// TestTakeoverAfterSIGKILL: a worker process is killed mid-job, after the
// checkpoint; another worker takes the job over and completes it; every step
// before the checkpoint ran live exactly once (counted from the ledger). The
// job's entries name its submitter through the worker that wrote them, the
// taking-over worker's included: the submitter is kept across the takeover.
func TestTakeoverAfterSIGKILL(t *testing.T) {
	f := newFleetEnv(t, 2*time.Second)
	id := f.submitAs(t, takeoverJob, "alice")
	w1 := startWorker(t, f.natsURL, f.sandboxURL, "--id", "w1", "--ack-wait", "2s")
	killed := f.waitStatus(t, id, 30*time.Second, func(st jobs.Status) error {
		if st.Checkpoint == nil || st.Done < 3 {
			return fmt.Errorf("not past the checkpoint yet: %+v", st)
		}
		return nil
	})
	// Kill it while step 4 (the sleep) runs.
	testenv.Eventually(t, 10*time.Second, func() error {
		if f.execStarts(t)["sleep 4; echo three"] == 0 {
			return fmt.Errorf("step 4 not started")
		}
		return nil
	})
	if err := w1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w1.done
	w2 := startWorker(t, f.natsURL, f.sandboxURL, "--id", "w2", "--ack-wait", "2s")
	st := f.waitStatus(t, id, 40*time.Second, func(st jobs.Status) error {
		if st.State != jobs.StateSucceeded {
			return fmt.Errorf("job %s: %s", st.State, st.Error)
		}
		return nil
	})
	if st.Worker != "w2" || st.Attempt != 2 {
		t.Errorf("status = %+v, want attempt 2 by w2", st)
	}
	f.wantTakenOver(t, killed.SandboxName, killed.SandboxID, "w2")
	counts := f.execStarts(t)
	for cmd, want := range map[string]int{"echo one": 1, "echo two > /root/two": 1, "sleep 4; echo three": 2, "cat /root/two": 1} {
		if got := counts[cmd]; got != want {
			t.Errorf("%q started live %d times, want %d (all: %v)", cmd, got, want, counts)
		}
	}
	if got := len(lines(w2, "replayed")); got != 2 {
		t.Errorf("w2 replayed %d steps, want 2:\n%s", got, w2.out)
	}
	if st.Submitter != "alice" {
		t.Errorf("submitter = %q, want alice", st.Submitter)
	}
	// The killed attempt's session: alice through w1, then w2's own
	// sandbox.closed ending it.
	dead := f.actors(t, killed.SandboxName, killed.SandboxID)
	for i, a := range dead[:len(dead)-1] {
		if a != "alice via w1" {
			t.Errorf("killed session entry %d: actor %q, want \"alice via w1\" (all: %q)", i, a, dead)
		}
	}
	if got := dead[len(dead)-1]; got != "w2" {
		t.Errorf("killed session's takeover sandbox.closed: actor %q, want w2", got)
	}
	for i, a := range f.actors(t, st.SandboxName, st.SandboxID) {
		if a != "alice via w2" {
			t.Errorf("resumed session entry %d: actor %q, want \"alice via w2\"", i, a)
		}
	}
}

// TestSIGTERMDrains: SIGTERM mid-step lets the step finish, checkpoints,
// hands the job back; the next worker resumes there: no step is lost or
// repeated.
func TestSIGTERMDrains(t *testing.T) {
	f := newFleetEnv(t, 5*time.Second)
	id := f.submit(t, `{"name":"drain","image":"host","steps":[
		{"exec":{"command":"echo a"}},
		{"exec":{"command":"sleep 3; echo b"}},
		{"exec":{"command":"echo c"}},
		{"exec":{"command":"echo d"}}]}`)
	w1 := startWorker(t, f.natsURL, f.sandboxURL, "--id", "w1", "--ack-wait", "5s")
	testenv.Eventually(t, 30*time.Second, func() error {
		if f.execStarts(t)["sleep 3; echo b"] == 0 {
			return fmt.Errorf("step 2 not started")
		}
		return nil
	})
	if err := w1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w1.done:
		if w1.err != nil {
			t.Fatalf("w1 exited with %v", w1.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("w1 did not drain")
	}
	st, err := f.queue.Status(context.Background(), id)
	if err != nil || st.State != jobs.StateRequeued || st.Checkpoint == nil || st.Checkpoint.Next != 2 {
		t.Fatalf("after drain: %+v, %v; want requeued with a checkpoint before step 3", st, err)
	}
	startWorker(t, f.natsURL, f.sandboxURL, "--id", "w2", "--ack-wait", "5s")
	f.waitStatus(t, id, 30*time.Second, func(st jobs.Status) error {
		if st.State != jobs.StateSucceeded {
			return fmt.Errorf("job %s", st.State)
		}
		return nil
	})
	counts := f.execStarts(t)
	for _, cmd := range []string{"echo a", "sleep 3; echo b", "echo c", "echo d"} {
		if got := counts[cmd]; got != 1 {
			t.Errorf("%q started live %d times, want exactly 1 (all: %v)", cmd, got, counts)
		}
	}
}

// TestTakeoverWithoutCheckpoint: a job without a checkpoint whose worker is
// killed is redelivered after its lease expires and run again from the
// start by another worker; the dead attempt's sandbox is fenced first.
func TestTakeoverWithoutCheckpoint(t *testing.T) {
	f := newFleetEnv(t, 2*time.Second)
	id := f.submit(t, `{"name":"restart","image":"host","steps":[
		{"exec":{"command":"echo first"}},
		{"exec":{"command":"sleep 3; echo second"}},
		{"exec":{"command":"echo third"}}]}`)
	w1 := startWorker(t, f.natsURL, f.sandboxURL, "--id", "w1", "--ack-wait", "2s")
	var first jobs.Status
	testenv.Eventually(t, 30*time.Second, func() error {
		if f.execStarts(t)["sleep 3; echo second"] == 0 {
			return fmt.Errorf("step 2 not started")
		}
		var err error
		first, err = f.queue.Status(context.Background(), id)
		return err
	})
	if err := w1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w1.done
	startWorker(t, f.natsURL, f.sandboxURL, "--id", "w2", "--ack-wait", "2s")
	st := f.waitStatus(t, id, 30*time.Second, func(st jobs.Status) error {
		if st.State != jobs.StateSucceeded {
			return fmt.Errorf("job %s: %s", st.State, st.Error)
		}
		return nil
	})
	if st.Worker != "w2" || st.Attempt != 2 || st.SandboxID == first.SandboxID {
		t.Errorf("status = %+v, want attempt 2 by w2 in a new sandbox (first was %s)", st, first.SandboxID)
	}
	f.wantTakenOver(t, first.SandboxName, first.SandboxID, "w2")
	counts := f.execStarts(t)
	if counts["echo first"] != 2 || counts["echo third"] != 1 {
		t.Errorf("exec starts = %v, want the first step twice (no checkpoint) and the last once", counts)
	}
	// The dead attempt's ledger is fenced: its writer can no longer append.
	l, err := bus.NewLedger(f.bus, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	last, err := f.bus.LastMsg(context.Background(), f.bus.Config().FencePrefix+"."+first.SandboxID)
	if err != nil {
		t.Fatalf("fence of %s: %v", first.SandboxID, err)
	}
	if last.Sequence == 0 {
		t.Errorf("no fence message for the dead attempt's sandbox")
	}
}

// TestDemo runs the takeover demo end to end (its executors are
// re-executions of the test binary).
func TestDemo(t *testing.T) {
	prev := workerCommand
	workerCommand = func(args []string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childArgs+"="+strings.Join(append([]string{"work"}, args...), "\x1f"))
		return cmd
	}
	// On a terminal the dashboard stays up until Enter.
	prevInteractive, prevStdin := interactive, stdin
	enterR, enterW := io.Pipe()
	interactive, stdin = func() bool { return true }, enterR
	t.Cleanup(func() { workerCommand, interactive, stdin = prev, prevInteractive, prevStdin })
	env := map[string]string{"OPEN_SANDBOX_URL": testenv.Sandboxd(t)}
	out := &testutil.SyncBuffer{}
	dir := t.TempDir()
	errc := make(chan error, 1)
	go func() {
		errc <- run(context.Background(), []string{"demo", "--dir", dir}, func(k string) string { return env[k] }, out)
	}()
	var dashboard string
	testenv.Eventually(t, 3*time.Minute, func() error {
		m := regexp.MustCompile(`dashboard: (http://\S+/) `).FindStringSubmatch(out.String())
		if m == nil || !strings.Contains(out.String(), "press Enter") {
			select {
			case err := <-errc:
				t.Fatalf("demo ended before holding the dashboard: %v\n%s", err, out)
			default:
			}
			return fmt.Errorf("dashboard not held yet")
		}
		dashboard = m[1]
		return nil
	})
	resp, err := http.Get(dashboard)
	if err != nil {
		t.Fatalf("dashboard while held: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("dashboard while held: %d", resp.StatusCode)
	}
	fmt.Fprintln(enterW, "")
	if err := <-errc; err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{"SIGKILL executor-A", "succeeded on attempt 2 by executor-B", "replayed",
		`"sh /root/job/build.sh"`, "go run ./cmd/api --nats-dir " + filepath.Join(dir, "nats") + " --sqlite " + filepath.Join(dir, "alineo.db")} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "live ") && strings.Contains(l, "time(s)") && !strings.HasSuffix(l, "live 1 time(s)") {
			t.Errorf("a step before the checkpoint did not run live exactly once: %s", l)
		}
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", out)
	}
}
