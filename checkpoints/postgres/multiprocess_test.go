package postgres_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/postgres"
	"github.com/alineo-labs/alineo/testenv"
)

// The races across processes run the test binary again as agents: each
// agent opens its own Store on the shared database and runs the commands
// the parent writes on its stdin, one per line, answering each on stdout
// with a line that starts with replyPrefix.
const (
	agentDSNEnv   = "ALINEO_PGCKPT_AGENT_DSN"
	agentLeaseEnv = "ALINEO_PGCKPT_AGENT_LEASE"
	replyPrefix   = "@@ "
)

// TestAgent is the body of an agent process; it does nothing when run directly.
func TestAgent(t *testing.T) {
	dsn := os.Getenv(agentDSNEnv)
	if dsn == "" {
		t.Skip("agent process of the multi-process tests only")
	}
	lease, err := time.ParseDuration(os.Getenv(agentLeaseEnv))
	if err != nil {
		t.Fatalf("%s: %v", agentLeaseEnv, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := postgres.Open(ctx, dsn, checkpoints.Options{LeaseDuration: lease})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := &agent{s: s}
	defer a.stopLoop()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		reply := a.run(ctx, strings.Fields(in.Text()))
		fmt.Printf("%s%s\n", replyPrefix, reply)
		if reply == "bye" {
			return
		}
	}
}

// agent is the state of one agent process.
type agent struct {
	s      *postgres.Store
	lease  *checkpoints.Lease
	writer checkpoints.Writer
	staged []string

	// the background loop of "loop", if one runs
	loopStop chan struct{}
	loopDone chan string
}

// code names err by its contract code, or OTHER.
func code(err error) string {
	var ce *checkpoints.Error
	if errors.As(err, &ce) {
		return string(ce.Code)
	}
	return "OTHER:" + strings.ReplaceAll(err.Error(), "\n", " ")
}

func (a *agent) run(ctx context.Context, args []string) string {
	if len(args) == 0 {
		return "err empty command"
	}
	switch args[0] {
	case "quit":
		return "bye"
	case "prepare": // stage a command; "go" runs it
		a.staged = args[1:]
		return "ready"
	case "go":
		return a.run(ctx, a.staged)
	case "acquire": // acquire THREAD
		l, err := a.s.AcquireWriter(ctx, args[1])
		if err != nil {
			return "err " + code(err)
		}
		a.lease, a.writer = l, l.Writer
		return fmt.Sprintf("ok %d %s", l.Fence, l.OwnerToken)
	case "writer": // writer THREAD TOKEN FENCE: write as that lease holder
		fence, _ := strconv.ParseInt(args[3], 10, 64)
		a.writer = checkpoints.Writer{ThreadID: args[1], OwnerToken: args[2], Fence: fence}
		return "ok"
	case "append": // append THREAD ID [EXPECTED-HEAD]
		head := ""
		if len(args) > 3 {
			head = args[3]
		}
		return result(a.append(ctx, args[1], args[2], head))
	case "renew":
		_, err := a.lease.Renew(ctx)
		return result(err)
	case "release":
		return result(a.lease.Release(ctx))
	case "loop": // loop THREAD: append every few ms, renewing the lease, until lost
		a.loop(ctx, args[1])
		return "ok"
	case "loopresult":
		return <-a.loopDone
	}
	return "err unknown command " + args[0]
}

func result(err error) string {
	if err != nil {
		return "err " + code(err)
	}
	return "ok"
}

func (a *agent) append(ctx context.Context, thread, id, head string) error {
	c := &checkpoints.Checkpoint{ID: id, ThreadID: thread, ParentID: head, Reason: checkpoints.ReasonAutomatic}
	_, err := a.s.Append(ctx, checkpoints.AppendInput{Checkpoint: c, ExpectedHead: head, Writer: a.writer})
	return err
}

// loop appends a<n> on thread's head every 10ms while renewing the lease
// every RenewAfter, as a snapshot manager does, until an append fails. Its
// result ("lost N CODE": N appends, then the code of the refusal) is read by
// "loopresult". An append that fails without a contract code (the server
// ended a session that stayed in a transaction while this process was
// stopped) is tried again once.
func (a *agent) loop(ctx context.Context, thread string) {
	a.loopStop, a.loopDone = make(chan struct{}), make(chan string, 1)
	l := a.lease
	go func() {
		t := time.NewTicker(l.RenewAfter)
		defer t.Stop()
		for {
			select {
			case <-a.loopStop:
				return
			case <-t.C:
				if _, err := l.Renew(ctx); err != nil {
					return
				}
			}
		}
	}()
	go func() {
		head, n := "", 0
		for {
			id := fmt.Sprintf("a%04d", n)
			err := a.append(ctx, thread, id, head)
			if err != nil && strings.HasPrefix(code(err), "OTHER") {
				err = a.append(ctx, thread, id, head)
			}
			if err != nil {
				a.loopDone <- fmt.Sprintf("lost %d %s", n, code(err))
				return
			}
			head, n = id, n+1
			time.Sleep(10 * time.Millisecond) // the pace of a busy writer, not a wait for a condition
		}
	}()
}

func (a *agent) stopLoop() {
	if a.loopStop != nil {
		close(a.loopStop)
	}
}

// proc is the parent's handle on an agent process.
type proc struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies chan string
}

func startAgent(t *testing.T, name, dsn string, lease time.Duration) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAgent$", "-test.count=1")
	cmd.Env = append(os.Environ(), agentDSNEnv+"="+dsn, agentLeaseEnv+"="+lease.String())
	cmd.Stderr = &logWriter{t: t, name: name}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: name, cmd: cmd, stdin: stdin, replies: make(chan string, 16)}
	go func() {
		defer close(p.replies)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if r, ok := strings.CutPrefix(sc.Text(), replyPrefix); ok {
				p.replies <- r
			} else {
				t.Logf("%s: %s", name, sc.Text())
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = stdin.Close() // the agent ends at EOF
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil && !t.Failed() {
				t.Errorf("%s: %v", name, err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("%s did not exit", name)
		}
	})
	return p
}

// send writes one command without waiting for its reply.
func (p *proc) send(command string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, command+"\n"); err != nil {
		p.t.Fatalf("%s: send %q: %v", p.name, command, err)
	}
}

// reply waits for the next reply.
func (p *proc) reply() string {
	p.t.Helper()
	select {
	case r, ok := <-p.replies:
		if !ok {
			p.t.Fatalf("%s exited", p.name)
		}
		return r
	case <-time.After(60 * time.Second):
		p.t.Fatalf("%s: no reply in 60s", p.name)
	}
	return ""
}

// do sends command and returns its reply.
func (p *proc) do(command string) string {
	p.t.Helper()
	p.send(command)
	return p.reply()
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: %v: %v", p.name, sig, err)
	}
}

type logWriter struct {
	t    *testing.T
	name string
}

func (w *logWriter) Write(b []byte) (int, error) {
	w.t.Logf("%s: %s", w.name, b)
	return len(b), nil
}

func notAgent(t *testing.T) {
	if os.Getenv(agentDSNEnv) != "" {
		t.Skip("in an agent")
	}
}

// chain checks that thread holds want, in order, each the parent of the next.
func chain(t *testing.T, s checkpoints.Store, thread string, want []string) {
	t.Helper()
	list, err := s.List(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, c := range list {
		got = append(got, c.ID)
		parent := ""
		if i > 0 {
			parent = list[i-1].ID
		}
		if c.ParentID != parent {
			t.Fatalf("%s: checkpoint %d (%s) has parent %q", thread, i, c.ID, c.ParentID)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%s = %v, want %v", thread, got, want)
	}
	if h, err := s.Head(context.Background(), thread); err != nil || h != want[len(want)-1] {
		t.Fatalf("head of %s = %q, %v; want %q", thread, h, err, want[len(want)-1])
	}
}

// TestProcessesRace runs two processes against each other: acquiring one
// thread's lease at the same moment (exactly one wins, the other gets
// WRITER_CONFLICT), and appending with the same lease on the same expected
// head (exactly one lands, the other gets STALE_HEAD).
func TestProcessesRace(t *testing.T) {
	notAgent(t)
	dsn := testenv.Postgres(t)
	s := open(t, dsn, checkpoints.Options{})
	procs := []*proc{startAgent(t, "agent0", dsn, time.Minute), startAgent(t, "agent1", dsn, time.Minute)}
	// race stages command in every process, then lets them go together.
	race := func(command func(i int) string) []string {
		for i, p := range procs {
			if r := p.do("prepare " + command(i)); r != "ready" {
				t.Fatalf("%s: prepare: %s", p.name, r)
			}
		}
		for _, p := range procs {
			p.send("go")
		}
		out := make([]string, len(procs))
		for i, p := range procs {
			out[i] = p.reply()
		}
		return out
	}
	winner := func(round int, replies []string, loss string) int {
		t.Helper()
		w := -1
		for i, r := range replies {
			switch {
			case strings.HasPrefix(r, "ok") && w < 0:
				w = i
			case r == "err "+loss:
			default:
				t.Fatalf("round %d: replies %q, want one ok and one %s", round, replies, loss)
			}
		}
		if w < 0 {
			t.Fatalf("round %d: replies %q, want one ok", round, replies)
		}
		return w
	}

	const rounds = 15
	lastFence := int64(0)
	for r := range rounds {
		replies := race(func(int) string { return "acquire leases" })
		w := winner(r, replies, string(checkpoints.CodeWriterConflict))
		fence, _ := strconv.ParseInt(strings.Fields(replies[w])[1], 10, 64)
		if fence <= lastFence {
			t.Fatalf("round %d: fence %d after %d", r, fence, lastFence)
		}
		lastFence = fence
		if got := procs[w].do("release"); got != "ok" {
			t.Fatalf("round %d: release: %s", r, got)
		}
	}

	l, err := s.AcquireWriter(t.Context(), "heads")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if got := p.do(fmt.Sprintf("writer heads %s %d", l.OwnerToken, l.Fence)); got != "ok" {
			t.Fatal(got)
		}
	}
	head, want := "", []string(nil)
	for r := range rounds {
		replies := race(func(i int) string { return fmt.Sprintf("append heads p%d-%02d %s", i, r, head) })
		w := winner(r, replies, string(checkpoints.CodeStaleHead))
		head = fmt.Sprintf("p%d-%02d", w, r)
		want = append(want, head)
	}
	chain(t, s, "heads", want)
}

// TestStoppedHolderIsFenced stops (SIGSTOP) a process that appends in a loop
// while renewing its lease, at whatever point it is. Its lease expires,
// another process takes the thread and appends; once the holder runs again
// (SIGCONT) its next append is refused with WRITER_LOST and nothing it wrote
// lands after the new writer's checkpoint.
func TestStoppedHolderIsFenced(t *testing.T) {
	notAgent(t)
	const lease = 1500 * time.Millisecond
	dsn := testenv.Postgres(t)
	s := open(t, dsn, checkpoints.Options{LeaseDuration: lease})
	holder := startAgent(t, "holder", dsn, lease)
	if r := holder.do("acquire t"); !strings.HasPrefix(r, "ok 1 ") {
		t.Fatalf("acquire: %s", r)
	}
	if r := holder.do("loop t"); r != "ok" {
		t.Fatalf("loop: %s", r)
	}
	// While the holder runs it keeps its lease past its duration: every
	// attempt to take it, for two lease durations, conflicts.
	for end := time.Now().Add(2 * lease); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err := s.AcquireWriter(t.Context(), "t"); !errors.Is(err, checkpoints.ErrWriterConflict) {
			t.Fatalf("AcquireWriter while the holder runs: err = %v, want WRITER_CONFLICT", err)
		}
	}
	holder.signal(syscall.SIGSTOP)
	stopped := time.Now()
	var l *checkpoints.Lease
	testenv.Eventually(t, 20*time.Second, func() error {
		var err error
		l, err = s.AcquireWriter(t.Context(), "t")
		return err
	})
	if took := time.Since(stopped); took < lease/2 {
		t.Fatalf("took the lease %v after the stop, before it could expire (%v)", took, lease)
	}
	if l.Fence != 2 {
		t.Fatalf("fence = %d, want 2", l.Fence)
	}
	list, err := s.List(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	head := list[len(list)-1].ID
	if _, err := s.Append(t.Context(), checkpoints.AppendInput{
		Checkpoint:   &checkpoints.Checkpoint{ID: "taken", ThreadID: "t", ParentID: head, Reason: checkpoints.ReasonNamed},
		ExpectedHead: head, Writer: l.Writer,
	}); err != nil {
		t.Fatalf("append after taking over: %v", err)
	}
	holder.signal(syscall.SIGCONT)
	r := holder.do("loopresult")
	var n int
	var got string
	if _, err := fmt.Sscanf(r, "lost %d %s", &n, &got); err != nil || got != string(checkpoints.CodeWriterLost) {
		t.Fatalf("holder after SIGCONT: %q, want lost N %s", r, checkpoints.CodeWriterLost)
	}
	if n < 2 {
		t.Fatalf("holder appended %d before it was stopped, want several", n)
	}
	want := make([]string, 0, n+1)
	for i := range n {
		want = append(want, fmt.Sprintf("a%04d", i))
	}
	chain(t, s, "t", append(want, "taken"))
	if got := holder.do("renew"); got != "err "+string(checkpoints.CodeWriterLost) {
		t.Fatalf("holder renew: %s, want WRITER_LOST", got)
	}
}

// TestLateAppendOfFencedWriter: a process whose lease expired while it was
// slow (no renewal) comes back after another process took the thread,
// appended and released it. Each of its late writes is refused with
// WRITER_LOST, whatever head it names, and nothing it sends lands.
func TestLateAppendOfFencedWriter(t *testing.T) {
	notAgent(t)
	const lease = time.Second
	dsn := testenv.Postgres(t)
	s := open(t, dsn, checkpoints.Options{LeaseDuration: lease})
	slow := startAgent(t, "slow", dsn, lease)
	if r := slow.do("acquire t"); !strings.HasPrefix(r, "ok 1 ") {
		t.Fatalf("acquire: %s", r)
	}
	var l *checkpoints.Lease
	testenv.Eventually(t, 20*time.Second, func() error {
		var err error
		l, err = s.AcquireWriter(t.Context(), "t")
		return err
	})
	if _, err := s.Append(t.Context(), checkpoints.AppendInput{
		Checkpoint: &checkpoints.Checkpoint{ID: "new", ThreadID: "t", Reason: checkpoints.ReasonNamed}, Writer: l.Writer,
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	lost := "err " + string(checkpoints.CodeWriterLost)
	for _, command := range []string{"append t late", "append t late new", "renew", "release"} {
		if got := slow.do(command); got != lost {
			t.Fatalf("slow writer %q: %s, want %s", command, got, lost)
		}
	}
	chain(t, s, "t", []string{"new"})
	l3, err := s.AcquireWriter(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if l3.Fence != 3 {
		t.Fatalf("fence after the late writes = %d, want 3", l3.Fence)
	}
	if got := slow.do("acquire t"); got != "err "+string(checkpoints.CodeWriterConflict) {
		t.Fatalf("slow writer acquire while another holds the lease: %s, want WRITER_CONFLICT", got)
	}
}
