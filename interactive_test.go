package alineo_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
)

// termOutput collects an interactive exec's stdout as it is recorded.
type termOutput struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	more chan struct{}
	done chan error
}

func watch(it *alineo.Interactive) *termOutput {
	o := &termOutput{more: make(chan struct{}, 1), done: make(chan error, 1)}
	go func() {
		for c, err := range it.Stdout() {
			if err != nil {
				o.done <- err
				return
			}
			o.mu.Lock()
			o.buf.Write(c)
			o.mu.Unlock()
			select {
			case o.more <- struct{}{}:
			default:
			}
		}
		o.done <- nil
	}()
	return o
}

// until waits until the output so far holds want.
func (o *termOutput) until(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		o.mu.Lock()
		have := o.buf.String()
		o.mu.Unlock()
		if strings.Contains(have, want) {
			return
		}
		select {
		case <-o.more:
		case err := <-o.done:
			o.done <- err
			o.mu.Lock()
			have = o.buf.String()
			o.mu.Unlock()
			if !strings.Contains(have, want) {
				t.Fatalf("output ended (%v) without %q: %q", err, want, have)
			}
			return
		case <-deadline:
			t.Fatalf("no %q in time: %q", want, have)
		}
	}
}

func write(t *testing.T, it *alineo.Interactive, s string) {
	t.Helper()
	if n, err := it.WriteString(s); err != nil || n != len(s) {
		t.Fatalf("write %q = %d, %v", s, n, err)
	}
}

// stepRows returns the rows of step in es, and the texts of its stdin and
// stdout chunks.
func stepRows(es []events.Entry, step int) (rows []events.Entry, stdin []string, stdout string) {
	for _, en := range es {
		if en.StepIndex != step {
			continue
		}
		rows = append(rows, en)
		if en.Event == events.ExecOutput {
			var p events.ExecOutputPayload
			_ = en.Decode(&p)
			switch p.Type {
			case events.Stdin:
				stdin = append(stdin, string(p.Bytes()))
			case events.Stdout:
				stdout += string(p.Bytes())
			}
		}
	}
	return rows, stdin, stdout
}

func TestInteractiveExec(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "term"})
		it := sb.ExecInteractive(ctx, "bash", alineo.InteractiveOptions{Cwd: "/tmp", Env: map[string]string{"GREETING": "it's"}})
		out := watch(it)
		write(t, it, "echo \"$GREETING\"-$((6*7)); pwd\n")
		out.until(t, "it's-42\r\n/tmp\r\n")
		if err := it.Resize(ctx, 100, 30); err != nil {
			t.Fatal(err)
		}
		write(t, it, "stty size\n")
		out.until(t, "30 100")
		write(t, it, "exit 4\n")
		res, err := it.Wait()
		var ce *alineo.CommandError
		if !errors.As(err, &ce) || ce.ExitCode != 4 || res.ExitCode != 4 {
			t.Fatalf("Wait = %+v, %v; want a *CommandError of exit 4", res, err)
		}
		if res.Stderr != "" || !strings.Contains(res.Stdout, "it's-42") {
			t.Fatalf("result = %+v", res)
		}
		if _, err := it.WriteString("late\n"); !errors.Is(err, alineo.ErrExecDone) {
			t.Fatalf("write after exit = %v, want ErrExecDone", err)
		}
		if err := it.Signal(ctx, "SIGINT"); !errors.Is(err, alineo.ErrExecDone) {
			t.Fatalf("signal after exit = %v, want ErrExecDone", err)
		}

		rows, stdin, stdout := stepRows(e.rows(t, sb), it.Step())
		var sp events.ExecStartedPayload
		if err := rows[0].Decode(&sp); err != nil || rows[0].Event != events.ExecStarted {
			t.Fatalf("first row %+v, %v", rows[0], err)
		}
		if !sp.Interactive || sp.Cmd != "bash" || sp.Cwd != "/tmp" || sp.Env["GREETING"] != "it's" || sp.Seq != 1 {
			t.Fatalf("exec.started = %+v", sp)
		}
		if want := []string{"echo \"$GREETING\"-$((6*7)); pwd\n", "stty size\n", "exit 4\n"}; strings.Join(stdin, "|") != strings.Join(want, "|") {
			t.Fatalf("recorded stdin = %q, want %q", stdin, want)
		}
		if stdout != res.Stdout {
			t.Fatalf("recorded stdout %q != result %q", stdout, res.Stdout)
		}
		last := rows[len(rows)-1]
		var cp events.ExecCompletedPayload
		if last.Event != events.ExecCompleted || last.Decode(&cp) != nil || cp.ExitCode != 4 {
			t.Fatalf("last row = %+v", last)
		}
	})
}

func TestInteractiveResumeReruns(t *testing.T) {
	var cc commandCounter
	e := newEnv(t, memory.New(), cc.options)
	ctx := testCtx(t)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "shell-state"})
	// Step 1 completes before the checkpoint: replayed on resume.
	done := sb.ExecInteractive(ctx, "echo replayed-$((1+1))")
	if res, err := done.Wait(); err != nil || !strings.Contains(res.Stdout, "replayed-2") {
		t.Fatalf("step 1 = %+v, %v", res, err)
	}
	// Step 2 is still running at the checkpoint: started again on resume.
	term := sb.ExecInteractive(ctx, "bash", alineo.InteractiveOptions{Cwd: "/"})
	out := watch(term)
	write(t, term, "cd /tmp && export SECRET=s3 && echo made > f\n")
	write(t, term, "echo step-$((1+0))\n")
	out.until(t, "step-1\r\n")
	if _, err := sb.Checkpoint(ctx, "mid"); err != nil {
		t.Fatal(err)
	}
	write(t, term, "export AFTER=x\n") // after the checkpoint: not sent again
	// The process dies here: sb is never used again.

	r, err := e.client.Resume(ctx, sb.ID(), alineo.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, r)
	again := r.ExecInteractive(ctx, "echo replayed-$((1+1))")
	res, err := again.Wait()
	if err != nil || !strings.Contains(res.Stdout, "replayed-2") {
		t.Fatalf("replayed step 1 = %+v, %v", res, err)
	}
	if n, err := again.WriteString("ignored\n"); err != nil || n != 8 {
		t.Fatalf("write to a replayed exec = %d, %v; want it taken", n, err)
	}
	term2 := r.ExecInteractive(ctx, "bash", alineo.InteractiveOptions{Cwd: "/"})
	out2 := watch(term2)
	write(t, term2, "echo \"$SECRET-$(pwd)-$(cat f)-${AFTER:-unset}-$((2+3))\"\n")
	out2.until(t, "s3-/tmp-made-unset-5\r\n")
	write(t, term2, "exit\n")
	if res, err := term2.Wait(); err != nil || res.ExitCode != 0 {
		t.Fatalf("re-run shell = %+v, %v", res, err)
	}
	if n := cc.n.Load(); n != 0 {
		t.Fatalf("%d commands went to execd's /command or /code, want 0", n)
	}

	es := e.rows(t, r)
	if rows, _, _ := stepRows(es, 1); len(rows) != 0 {
		t.Fatalf("the replayed step wrote %d rows:\n%s", len(rows), summary(rows))
	}
	rows, stdin, _ := stepRows(es, 2)
	var sp events.ExecStartedPayload
	if rows[0].Event != events.ExecStarted || rows[0].Decode(&sp) != nil || !sp.Interactive || sp.Cwd != "/" {
		t.Fatalf("re-run exec.started = %+v", rows[0])
	}
	want := []string{"cd /tmp && export SECRET=s3 && echo made > f\n", "echo step-$((1+0))\n",
		"echo \"$SECRET-$(pwd)-$(cat f)-${AFTER:-unset}-$((2+3))\"\n", "exit\n"}
	if strings.Join(stdin, "|") != strings.Join(want, "|") {
		t.Fatalf("re-run recorded stdin %q, want the replayed chunks then the new ones %q", stdin, want)
	}
}

func TestInteractiveReplayDivergesAndResumeFromReRun(t *testing.T) {
	e := newEnv(t, memory.New())
	ctx := testCtx(t)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "diverge"})
	out(t, ctx, sb, "echo plain")
	term := sb.ExecInteractive(ctx, "bash")
	o := watch(term)
	write(t, term, "export A=1; echo a-$((0+1))\n")
	o.until(t, "a-1\r\n")
	if _, err := sb.Checkpoint(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	r, err := e.client.Resume(ctx, sb.ID(), alineo.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, r)
	// Step 1 was a plain exec: an interactive call there diverges.
	if _, err := r.ExecInteractive(ctx, "echo plain").Wait(); !errors.Is(err, alineo.ErrReplayDiverged) {
		t.Fatalf("interactive over a plain exec = %v, want ErrReplayDiverged", err)
	}
	// Step 2 is pending: another command there diverges too.
	if _, err := r.ExecInteractive(ctx, "sh").Wait(); !errors.Is(err, alineo.ErrReplayDiverged) {
		t.Fatalf("another command over a pending one = %v, want ErrReplayDiverged", err)
	}

	// A re-run that is itself checkpointed and resumed brings back both
	// sessions' input: the re-run recorded the stdin it sent again.
	r2 := e.resumeAgain(t, ctx, sb, r)
	t3 := r2.ExecInteractive(ctx, "bash")
	o3 := watch(t3)
	write(t, t3, "echo \"$A$B\"-$((4+4))\n")
	o3.until(t, "12-8\r\n")
	if err := t3.Close(ctx); err == nil {
		t.Fatal("Close of a running shell = nil, want the strict exit -1")
	}
	if got := t3.ExitCode(); got != -1 {
		t.Fatalf("exit code after Close = %d, want -1", got)
	}
}

// resumeAgain resumes sb's session (the first handle, r, already failed its
// steps): a fresh resume re-runs step 2, adds input, checkpoints, and that
// session is resumed in turn.
func (e *env) resumeAgain(t *testing.T, ctx context.Context, sb, _ *alineo.Sandbox) *alineo.Sandbox {
	t.Helper()
	r, err := e.client.Resume(ctx, sb.ID(), alineo.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, r)
	out(t, ctx, r, "echo plain") // replayed
	term := r.ExecInteractive(ctx, "bash")
	o := watch(term)
	write(t, term, "export B=2; echo b-$((1+1))\n")
	o.until(t, "b-2\r\n")
	if _, err := r.Checkpoint(ctx, "c2"); err != nil {
		t.Fatal(err)
	}
	r2, err := e.client.Resume(ctx, r.ID(), alineo.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, r2)
	out(t, ctx, r2, "echo plain")
	return r2
}

func TestInteractiveBadInputAndClose(t *testing.T) {
	e := newEnv(t, memory.New())
	ctx := testCtx(t)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "bad"})
	for name, it := range map[string]*alineo.Interactive{
		"empty":    sb.ExecInteractive(ctx, ""),
		"nul":      sb.ExecInteractive(ctx, "a\x00b"),
		"env name": sb.ExecInteractive(ctx, "bash", alineo.InteractiveOptions{Env: map[string]string{"1X": "y"}}),
		"two opts": sb.ExecInteractive(ctx, "bash", alineo.InteractiveOptions{}, alineo.InteractiveOptions{}),
	} {
		var oe *alineo.OptionError
		if _, err := it.Wait(); !errors.As(err, &oe) {
			t.Errorf("%s: Wait = %v, want an *OptionError", name, err)
		}
		if _, err := it.WriteString("x"); !errors.As(err, &oe) {
			t.Errorf("%s: Write = %v, want the *OptionError", name, err)
		}
	}
	missing := sb.ExecInteractive(ctx, "bash", alineo.InteractiveOptions{Cwd: "/no/such/dir"})
	var se *alineo.SandboxError
	if _, err := missing.Wait(); !errors.As(err, &se) {
		t.Fatalf("missing cwd = %v, want a *SandboxError", err)
	}

	it := sb.ExecInteractive(ctx, "bash", alineo.InteractiveOptions{Strict: new(false)})
	o := watch(it)
	write(t, it, "echo up-$((1+1))\n")
	o.until(t, "up-2\r\n")
	var oe *alineo.OptionError
	if err := it.Resize(ctx, 0, 10); !errors.As(err, &oe) {
		t.Fatalf("Resize(0, 10) = %v, want an *OptionError", err)
	}
	if err := it.Signal(ctx, "SIGFOO"); !errors.As(err, &oe) {
		t.Fatalf("Signal(SIGFOO) = %v, want an *OptionError", err)
	}
	if err := it.Close(ctx); err != nil {
		t.Fatalf("Close of a non-strict shell = %v", err)
	}
	if it.ExitCode() != -1 {
		t.Fatalf("exit code = %d, want -1", it.ExitCode())
	}

	// Closing the sandbox ends a running terminal without exec.completed.
	left := sb.ExecInteractive(ctx, "bash")
	lo := watch(left)
	write(t, left, "echo left-$((2+2))\n")
	lo.until(t, "left-4\r\n")
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var xe *alineo.ExecConnectionError
	if _, err := left.Wait(); !errors.As(err, &xe) || !errors.Is(err, alineo.ErrClosed) {
		t.Fatalf("terminal after sandbox Close = %v, want an *ExecConnectionError wrapping ErrClosed", err)
	}
	rows, _, _ := stepRows(e.rows(t, sb), left.Step())
	for _, r := range rows {
		if r.Event == events.ExecCompleted {
			t.Fatalf("a terminal cut off by Close recorded exec.completed:\n%s", summary(rows))
		}
	}
}

// TestInteractiveCutOffMidOutput: a cancelled context, or a sandbox Close,
// while a terminal prints without pause ends it with an
// *ExecConnectionError wrapping the cause, whichever part of recording a
// chunk the end cuts short.
func TestInteractiveCutOffMidOutput(t *testing.T) {
	e := newEnv(t, memory.New())
	ctx := testCtx(t)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "flood"})
	flood := func(ctx context.Context) *alineo.Interactive {
		it := sb.ExecInteractive(ctx, "bash")
		o := watch(it)
		write(t, it, "echo go-$((3+3)); yes flood | head -c 50000000\n")
		o.until(t, "go-6\r\n")
		return it
	}
	errStop := errors.New("stop")
	var xe *alineo.ExecConnectionError
	for i := range 10 {
		cctx, cancel := context.WithCancelCause(ctx)
		it := flood(cctx)
		cancel(errStop)
		if _, err := it.Wait(); !errors.As(err, &xe) || !errors.Is(err, errStop) {
			t.Fatalf("run %d: terminal after its context's cancel = %v, want an *ExecConnectionError wrapping the cause", i, err)
		}
	}
	it := flood(ctx)
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := it.Wait(); !errors.As(err, &xe) || !errors.Is(err, alineo.ErrClosed) {
		t.Fatalf("terminal after sandbox Close = %v, want an *ExecConnectionError wrapping ErrClosed", err)
	}
}

func TestInteractiveRedactsBoundValues(t *testing.T) {
	e := newEgressEnv(t, memory.New())
	ctx := testCtx(t)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "redact", CredentialProxy: true, NetworkPolicy: &alineo.NetworkPolicy{
		DefaultAction: alineo.EgressDeny,
		Egress:        []alineo.EgressRule{{Action: alineo.EgressAllow, Target: "allowed.test"}},
	}})
	secret := newSecret(t)
	if err := sb.Credentials().Set(ctx, "api", secret, alineo.CredentialBinding{Hosts: []string{"allowed.test"}, Type: alineo.CredentialBearer}, ""); err != nil {
		t.Fatal(err)
	}
	it := sb.ExecInteractive(ctx, "bash", alineo.InteractiveOptions{Env: map[string]string{"TOKEN": secret}})
	o := watch(it)
	write(t, it, "echo got-$((1+1)) $TOKEN "+secret+"\n")
	o.until(t, "got-2 [REDACTED:api] [REDACTED:api]\r\n")
	write(t, it, "exit\n")
	res, err := it.Wait()
	if err != nil || strings.Contains(res.Stdout, secret) {
		t.Fatalf("Wait = %q, %v; want no value in the output", res.Stdout, err)
	}
	_, stdin, _ := stepRows(e.rows(t, sb), it.Step())
	if got := strings.Join(stdin, ""); got != "echo got-$((1+1)) $TOKEN [REDACTED:api]\nexit\n" {
		t.Fatalf("recorded stdin = %q", got)
	}
	for _, en := range e.rows(t, sb) {
		if strings.Contains(string(en.Payload), secret) {
			t.Fatalf("%s %s holds the value", en.Event, en.Payload)
		}
	}
}
