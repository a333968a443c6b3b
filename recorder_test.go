package alineo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/testenv"
)

// The recorder's stages, each through a fake execd and a store that fails or
// holds back chosen writes: open, record (grouping), deliver, finish.

// recorderEnv is a sandbox on f whose ledger store calls hook (nil: none)
// before each entry it stores.
func recorderEnv(t *testing.T, f *fakeServer, hook func(e events.Entry) error) (*Client, *Sandbox) {
	t.Helper()
	c := newFakeClient(t, f, &failingStore{Store: memory.New(), fail: hook})
	sb, err := c.Sandbox(context.Background(), SandboxOptions{Image: "ubuntu"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return c, sb
}

// outputRows returns the exec.output rows of step as "type:text" strings.
func outputRows(t *testing.T, c *Client, sb *Sandbox, step int) []string {
	t.Helper()
	var out []string
	for _, e := range rows(t, c, sb) {
		if e.Event != events.ExecOutput || e.StepIndex != step {
			continue
		}
		var p events.ExecOutputPayload
		if err := e.Decode(&p); err != nil {
			t.Fatal(err)
		}
		out = append(out, string(p.Type)+":"+string(p.Bytes()))
	}
	return out
}

// hasEvent reports whether the ledger holds ev for step.
func hasEvent(t *testing.T, c *Client, sb *Sandbox, ev events.Event, step int) bool {
	t.Helper()
	for _, e := range rows(t, c, sb) {
		if e.Event == ev && e.StepIndex == step {
			return true
		}
	}
	return false
}

func wantSandboxError(t *testing.T, err error, op string, cause error) {
	t.Helper()
	var se *SandboxError
	if !errors.As(err, &se) || se.Op != op || !errors.Is(err, cause) {
		t.Fatalf("err = %v, want a *SandboxError (Op %q) wrapping %v", err, op, cause)
	}
}

// open: exec.started fails to be written. The request is never sent, nothing
// is recorded, and the exec fails with the write's error.
func TestRecorderOpenStartedWriteFails(t *testing.T) {
	f := newFakeServer(t)
	boom := errors.New("boom")
	c, sb := recorderEnv(t, f, func(e events.Entry) error {
		if e.Event == events.ExecStarted {
			return boom
		}
		return nil
	})
	ex := sb.Exec(context.Background(), "echo hi")
	res, err := ex.Wait()
	wantSandboxError(t, err, "record exec 1 started", boom)
	if res.Stdout != "" || res.ExitCode != -1 {
		t.Errorf("result = %+v, want no output and exit -1", res)
	}
	if got := f.sent(); len(got) != 0 {
		t.Errorf("the server received %q, want nothing: the intent was never recorded", got)
	}
	if got := outputRows(t, c, sb, 1); len(got) != 0 || hasEvent(t, c, sb, events.ExecCompleted, 1) {
		t.Fatalf("ledger has output %q or exec.completed of a call whose exec.started failed", got)
	}
}

// open: the request is sent only once exec.started is committed. The
// store's append of exec.started is held until released; the server notes,
// as each request arrives, whether the ledger holds its exec.started. A
// request sent while the commit is in flight (as it was, overlapping the
// two) arrives while the append is held: the append is released at that
// arrival, or after a grace period in which none came, so the test ends
// either way.
func TestRecorderOpenWaitsForStartedCommit(t *testing.T) {
	f := newFakeServer(t)
	store := &failingStore{Store: memory.New()}
	var sb *Sandbox
	arrived := make(chan bool, 4) // per request: whether its exec.started was committed
	f.arrived = func(string, string) {
		es, err := store.Store.ReadAll(context.Background(), sb.Name(), sb.ID())
		if err != nil {
			t.Error(err)
		}
		committed := false
		for _, e := range es {
			committed = committed || e.Event == events.ExecStarted && e.StepIndex == 1
		}
		arrived <- committed
	}
	held := make(chan struct{})
	store.fail = func(e events.Entry) error {
		if e.Event != events.ExecStarted {
			return nil
		}
		close(held)
		select {
		case c := <-arrived: // the request came while held
			arrived <- c
		case <-time.After(300 * time.Millisecond):
		}
		return nil
	}
	c := newFakeClient(t, f, store)
	sb, err := c.Sandbox(context.Background(), SandboxOptions{Image: "ubuntu"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	ex := sb.Exec(context.Background(), "echo hi")
	<-held
	res, err := ex.Wait()
	if err != nil || res.Stdout != "hi\n" {
		t.Fatalf("Wait = %+v, %v; want stdout hi", res, err)
	}
	if got := f.sent(); len(got) != 1 {
		t.Fatalf("the server received %q, want one command", got)
	}
	if committed := <-arrived; !committed {
		t.Fatal("the request reached the server before exec.started was committed")
	}
}

// finish: the exec ends without cutting its connection: the rest of the
// response (here, the server returns 50 ms after the terminal event) is
// drained and the connection goes back to the pool for the next exec, as
// the raw client's does; cancelling the request as the exec ended closed it.
// So does a caller's context cancelled as soon as Wait returns (a deferred
// cancel): the request no longer follows it once the stream has ended.
func TestRecorderKeepsConnection(t *testing.T) {
	t.Run("background", func(t *testing.T) { testKeepsConnection(t, false) })
	t.Run("cancelled after Wait", func(t *testing.T) { testKeepsConnection(t, true) })
}

func testKeepsConnection(t *testing.T, cancelAfter bool) {
	f := newFakeServer(t)
	f.script = func(w http.ResponseWriter, fl http.Flusher, cmd string) {
		defaultScript(w, fl, cmd)
		time.Sleep(50 * time.Millisecond)
	}
	remote := make(chan string, 1)
	f.arrived = func(_, addr string) { remote <- addr }
	_, sb := recorderEnv(t, f, nil)
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if cancelAfter {
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
	}
	if _, err := sb.Exec(ctx, "echo hi").Wait(); err != nil {
		t.Fatal(err)
	}
	cancel()
	addr := <-remote
	testenv.Eventually(t, 5*time.Second, func() error {
		if s := f.connState(addr); s != http.StateIdle && s != http.StateClosed {
			return fmt.Errorf("connection %s: %v", addr, s)
		}
		return nil
	})
	if s := f.connState(addr); s != http.StateIdle {
		t.Fatalf("the exec's connection is %v once its response ended, want idle (kept for the next request)", s)
	}
}

// open: execd refuses the command with an API error: a *SandboxError, not a
// connection error.
func TestRecorderOpenRefused(t *testing.T) {
	f := newFakeServer(t)
	f.script = func(w http.ResponseWriter, fl http.Flusher, cmd string) {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"code": "GENERAL::UNKNOWN_ERROR", "message": "no"})
	}
	_, sb := recorderEnv(t, f, nil)
	_, err := sb.Exec(context.Background(), "echo hi").Wait()
	var apiErr *opensandbox.APIError
	var ece *ExecConnectionError
	if !errors.As(err, &apiErr) || errors.As(err, &ece) {
		t.Fatalf("err = %v, want a *SandboxError wrapping *opensandbox.APIError", err)
	}
	wantSandboxError(t, err, "exec 1", apiErr)
}

// open: the connection drops before the stream starts: an
// *ExecConnectionError.
func TestRecorderOpenConnectionLost(t *testing.T) {
	f := newFakeServer(t)
	f.script = func(w http.ResponseWriter, fl http.Flusher, cmd string) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
	}
	c, sb := recorderEnv(t, f, nil)
	_, err := sb.Exec(context.Background(), "echo hi").Wait()
	var ece *ExecConnectionError
	if !errors.As(err, &ece) || ece.Step != 1 || ece.SandboxID != sb.ID() {
		t.Fatalf("err = %v, want an *ExecConnectionError for step 1", err)
	}
	if !hasEvent(t, c, sb, events.ExecStarted, 1) || hasEvent(t, c, sb, events.ExecCompleted, 1) {
		t.Fatalf("ledger:\n%s\nwant exec.started 1 and no exec.completed", describe(rows(t, c, sb)))
	}
}

// record: while the ledger is busy, the lines that arrive are merged into
// fewer rows; rows hold whole lines of one stream, and the chunks readers get
// are the rows, one to one and in order.
func TestRecorderGroupsWhileLedgerBusy(t *testing.T) {
	const lines = 60
	f := newFakeServer(t)
	release := make(chan struct{})
	f.script = func(w http.ResponseWriter, fl http.Flusher, cmd string) {
		event(w, fl, map[string]any{"type": "init", "text": "cmd-1"})
		for i := range lines {
			kind := "stdout"
			if i%20 == 19 {
				kind = "stderr"
			}
			event(w, fl, map[string]any{"type": kind, "text": "line " + strconv.Itoa(i)})
		}
		time.Sleep(50 * time.Millisecond) // the client reads what was sent
		close(release)
		event(w, fl, map[string]any{"type": "execution_complete", "execution_time": 1})
	}
	var once sync.Once
	c, sb := recorderEnv(t, f, func(e events.Entry) error {
		if e.Event == events.ExecOutput {
			once.Do(func() { <-release }) // the first output write is slow
		}
		return nil
	})
	ex := sb.Exec(context.Background(), "many lines")
	var chunks []string
	for _, s := range []events.Stream{events.Stdout, events.Stderr} {
		for chunk, err := range ex.stream(s) {
			if err != nil {
				t.Fatal(err)
			}
			chunks = append(chunks, string(s)+":"+string(chunk))
		}
	}
	res, err := ex.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v; want exit 0", res, err)
	}
	var wantOut, wantErr strings.Builder
	for i := range lines {
		if i%20 == 19 {
			wantErr.WriteString("line " + strconv.Itoa(i) + "\n")
		} else {
			wantOut.WriteString("line " + strconv.Itoa(i) + "\n")
		}
	}
	if res.Stdout != wantOut.String() || res.Stderr != wantErr.String() {
		t.Fatalf("Wait = %q, %q; want every line of each stream in order", res.Stdout, res.Stderr)
	}
	got := outputRows(t, c, sb, 1)
	if len(got) > lines/2 {
		t.Errorf("%d exec.output rows for %d lines, want the lines grouped while the ledger was busy", len(got), lines)
	}
	// Rows in stream order: the chunks of stdout, then of stderr.
	var byStream []string
	for _, s := range []string{"stdout:", "stderr:"} {
		for _, r := range got {
			if strings.HasPrefix(r, s) {
				byStream = append(byStream, r)
			}
		}
	}
	if strings.Join(byStream, "|") != strings.Join(chunks, "|") {
		t.Fatalf("chunks:\n%q\nwant the rows, one to one:\n%q", chunks, byStream)
	}
	for _, r := range got {
		if !strings.HasSuffix(r, "\n") {
			t.Errorf("row %q does not end a line", r)
		}
	}
}

// record: a group's linger runs from its first event, not from the start of
// the stream, although the linger timer is armed as the response's headers
// come: output within outputLinger of the group's first event joins it even
// when the stream began more than outputLinger before that; and the group is
// written once its own linger ends, before the command does.
func TestRecorderLingerFromFirstEvent(t *testing.T) {
	defer func(d time.Duration) { outputLinger = d }(outputLinger)
	outputLinger = 300 * time.Millisecond
	f := newFakeServer(t)
	running, end := make(chan struct{}), make(chan struct{})
	f.script = func(w http.ResponseWriter, fl http.Flusher, cmd string) {
		event(w, fl, map[string]any{"type": "init", "text": "cmd-1"}) // the headers go with it
		time.Sleep(200 * time.Millisecond)
		event(w, fl, map[string]any{"type": "stdout", "text": "a"})
		time.Sleep(150 * time.Millisecond) // the stream's first 300 ms are over, the group's are not
		event(w, fl, map[string]any{"type": "stdout", "text": "b"})
		time.Sleep(600 * time.Millisecond) // the group's linger ends meanwhile
		close(running)
		<-end
		event(w, fl, map[string]any{"type": "execution_complete", "execution_time": 1})
	}
	c, sb := recorderEnv(t, f, nil)
	ex := sb.Exec(context.Background(), "x")
	<-running
	got := outputRows(t, c, sb, 1)
	close(end)
	if _, err := ex.Wait(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"stdout:a\nb\n"}; !slices.Equal(got, want) {
		t.Fatalf("exec.output rows before the command ended: %q, want %q: one group, written at the end of its own linger", got, want)
	}
}

// deliver: an output row in the middle of the stream fails to be written: the
// exec fails with the write's error, its later rows and exec.completed are not
// written, and readers get nothing of it.
func TestRecorderOutputWriteFailsMidStream(t *testing.T) {
	f := newFakeServer(t)
	f.script = func(w http.ResponseWriter, fl http.Flusher, cmd string) {
		event(w, fl, map[string]any{"type": "init", "text": "cmd-1"})
		event(w, fl, map[string]any{"type": "stdout", "text": "first"})
		time.Sleep(20 * time.Millisecond) // longer than outputLinger: first is a group of its own
		for i := range 5 {
			event(w, fl, map[string]any{"type": "stdout", "text": "more " + strconv.Itoa(i)})
		}
		event(w, fl, map[string]any{"type": "execution_complete", "execution_time": 1})
	}
	boom := errors.New("boom")
	c, sb := recorderEnv(t, f, func(e events.Entry) error {
		if e.Event == events.ExecOutput && strings.Contains(string(e.Payload), "first") {
			return boom
		}
		return nil
	})
	ex := sb.Exec(context.Background(), "x")
	res, err := ex.Wait()
	wantSandboxError(t, err, "record exec 1 output", boom)
	if res.Stdout != "" || ex.ExitCode() != -1 {
		t.Errorf("result = %+v, exit %d; want no output and exit -1", res, ex.ExitCode())
	}
	if got := outputRows(t, c, sb, 1); len(got) != 0 || hasEvent(t, c, sb, events.ExecCompleted, 1) {
		t.Fatalf("ledger has output %q or exec.completed after a failed output row", got)
	}
}

// finish: exec.completed fails to be written: the exec fails with the write's
// error after its output was delivered, and has no exit code.
func TestRecorderCompletedWriteFails(t *testing.T) {
	f := newFakeServer(t)
	boom := errors.New("boom")
	c, sb := recorderEnv(t, f, func(e events.Entry) error {
		if e.Event == events.ExecCompleted {
			return boom
		}
		return nil
	})
	ex := sb.Exec(context.Background(), "echo hi")
	res, err := ex.Wait()
	wantSandboxError(t, err, "record exec 1 completed", boom)
	if res.Stdout != "hi\n" || ex.ExitCode() != -1 {
		t.Errorf("result = %+v, exit %d; want stdout \"hi\\n\" and exit -1", res, ex.ExitCode())
	}
	if got := outputRows(t, c, sb, 1); len(got) != 1 || got[0] != "stdout:hi\n" {
		t.Fatalf("exec.output rows = %q, want [stdout:hi\\n]", got)
	}
}

// finish: a stream that ends without a terminal event fails the exec with an
// *ExecConnectionError wrapping ErrStreamTruncated, after recording what came.
func TestRecorderTruncatedStream(t *testing.T) {
	f := newFakeServer(t)
	f.script = misbehave(func(w http.ResponseWriter, fl http.Flusher) {})
	c, sb := recorderEnv(t, f, nil)
	res, err := sb.Exec(context.Background(), "x").Wait()
	var ece *ExecConnectionError
	if !errors.As(err, &ece) || !errors.Is(err, opensandbox.ErrStreamTruncated) {
		t.Fatalf("err = %v, want an *ExecConnectionError wrapping ErrStreamTruncated", err)
	}
	if res.Stdout != "before\n" {
		t.Errorf("stdout = %q, want the line before the end", res.Stdout)
	}
	if got := outputRows(t, c, sb, 1); len(got) != 1 || hasEvent(t, c, sb, events.ExecCompleted, 1) {
		t.Fatalf("exec.output rows = %q and exec.completed %v, want one row and no exec.completed",
			got, hasEvent(t, c, sb, events.ExecCompleted, 1))
	}
}

// finish: a caller's cancellation mid-stream ends the exec with an
// *ExecConnectionError wrapping the cancellation's cause.
func TestRecorderCancelledWrapsCause(t *testing.T) {
	f := newFakeServer(t)
	stop := make(chan struct{})
	defer close(stop)
	f.script = misbehave(func(w http.ResponseWriter, fl http.Flusher) { <-stop })
	_, sb := recorderEnv(t, f, nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	ex := sb.Exec(ctx, "x")
	for _, err := range ex.Stdout() { // the first chunk is recorded
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	why := errors.New("caller gave up")
	cancel(why)
	_, err := ex.Wait()
	var ece *ExecConnectionError
	if !errors.As(err, &ece) || !errors.Is(err, why) {
		t.Fatalf("err = %v, want an *ExecConnectionError wrapping the cause", err)
	}
}
