package alineo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/testenv"
)

func TestNewRejectsBadOptions(t *testing.T) {
	store := memory.New()
	tests := []struct {
		name  string
		opts  Options
		field string
	}{
		{"nil adapter", Options{BaseURL: "http://localhost:8080"}, "Adapter"},
		{"empty base URL", Options{Adapter: store}, "BaseURL"},
		{"blank base URL", Options{BaseURL: "  ", Adapter: store}, "BaseURL"},
		{"relative base URL", Options{BaseURL: "localhost:8080", Adapter: store}, "BaseURL"},
		{"ftp base URL", Options{BaseURL: "ftp://x", Adapter: store}, "BaseURL"},
		{"negative cap", Options{BaseURL: "http://x", Adapter: store, MaxConcurrency: -1}, "MaxConcurrency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.opts)
			if c != nil || !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("New = %v, %v; want nil, ErrInvalidOptions", c, err)
			}
			var oe *OptionError
			if !errors.As(err, &oe) || oe.Field != tt.field {
				t.Fatalf("error %v, want an *OptionError on %s", err, tt.field)
			}
		})
	}
}

func TestSandboxRejectsBadOptions(t *testing.T) {
	f := newFakeServer(t)
	c := newFakeClient(t, f, nil)
	for _, o := range []SandboxOptions{
		{Image: "  "}, // empty is DefaultImage; blank is a mistake
		{Image: "x", Timeout: 30 * time.Second},
		{Image: "x", Timeout: -time.Second},
		{Image: "x", Timeout: 90500 * time.Millisecond},
		{Image: "x", RunID: " "},
		{Image: "x", Env: map[string]string{"A=B": "x"}},
		{Image: "x", Shell: "/bin/sh\x00"},
	} {
		if _, err := c.Sandbox(context.Background(), o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Sandbox(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
	if n := f.live(); n != 0 {
		t.Fatalf("%d sandboxes created for bad options", n)
	}
}

func newFakeClient(t *testing.T, f *fakeServer, store *failingStore) *Client {
	t.Helper()
	if store == nil {
		store = &failingStore{Store: memory.New()}
	}
	c, err := New(Options{BaseURL: f.URL, Adapter: store})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func rows(t *testing.T, c *Client, sb *Sandbox) []events.Entry {
	t.Helper()
	es, err := c.Sandboxes().Events(context.Background(), sb.Name(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// describe renders entries as "event step payload" lines for exact comparisons.
func describe(es []events.Entry) string {
	var b strings.Builder
	for _, e := range es {
		p := string(e.Payload)
		if e.Event == events.ExecStarted {
			var sp events.ExecStartedPayload
			_ = e.Decode(&sp)
			p = fmt.Sprintf("{Seq:%d Kind:%s Cmd:%s Code:%s Fingerprint:}", sp.Seq, sp.Kind, sp.Cmd, sp.Code)
		}
		fmt.Fprintf(&b, "%s %d %s\n", e.Event, e.StepIndex, p)
	}
	return b.String()
}

func TestFakeExecLedgerRows(t *testing.T) {
	f := newFakeServer(t)
	c := newFakeClient(t, f, nil)
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "ubuntu", RunID: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sb.Name(), "sandbox-"+sb.ID()[:8]; got != want {
		t.Errorf("name = %q, want %q", got, want)
	}
	res, err := sb.Exec(ctx, "echo hi").Wait()
	if err != nil || res.Stdout != "hi\n" || res.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v; want stdout \"hi\\n\", exit 0", res, err)
	}
	res, err = sb.Exec(ctx, "fail 3", ExecOptions{Strict: new(false)}).Wait()
	if err != nil || res.ExitCode != 3 || res.Stderr != "failing\n" {
		t.Fatalf("non-strict Wait = %+v, %v; want exit 3, nil", res, err)
	}
	_, err = sb.Exec(ctx, "fail 4").Wait()
	var ce *CommandError
	if !errors.As(err, &ce) || ce.ExitCode != 4 || ce.SandboxID != sb.ID() || ce.Command != "fail 4" || ce.Stderr != "failing\n" {
		t.Fatalf("strict Wait err = %#v, want *CommandError exit 4", err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := `sandbox.created -1 {"sandboxId":"` + sb.ID() + `","resources":{"cpu":"1","memory":"1Gi"},"image":"ubuntu","runId":"run-1"}
exec.started 1 {Seq:1 Kind:command Cmd:echo hi Code: Fingerprint:}
exec.output 1 {"seq":1,"type":"stdout","text":"hi\n"}
exec.completed 1 {"seq":1,"exitCode":0}
exec.started 2 {Seq:2 Kind:command Cmd:fail 3 Code: Fingerprint:}
exec.output 2 {"seq":2,"type":"stderr","text":"failing\n"}
exec.completed 2 {"seq":2,"exitCode":3}
exec.started 3 {Seq:3 Kind:command Cmd:fail 4 Code: Fingerprint:}
exec.output 3 {"seq":3,"type":"stderr","text":"failing\n"}
exec.completed 3 {"seq":3,"exitCode":4}
sandbox.closed -1 
`
	if got := describe(rows(t, c, sb)); got != want {
		t.Fatalf("ledger rows:\n%s\nwant:\n%s", got, want)
	}
	if n := f.live(); n != 0 {
		t.Fatalf("%d sandboxes left on the server after Close", n)
	}
}

// misbehave returns a script that starts a normal stream, sends one stdout
// line, then does bad.
func misbehave(bad func(w http.ResponseWriter, fl http.Flusher)) func(http.ResponseWriter, http.Flusher, string) {
	return func(w http.ResponseWriter, fl http.Flusher, cmd string) {
		event(w, fl, map[string]any{"type": "init", "text": "cmd-1"})
		event(w, fl, map[string]any{"type": "stdout", "text": "before"})
		bad(w, fl)
	}
}

func TestFakeBrokenStreams(t *testing.T) {
	tests := []struct {
		name   string
		bad    func(w http.ResponseWriter, fl http.Flusher)
		ctxTTL time.Duration
	}{
		{"garbage", func(w http.ResponseWriter, fl http.Flusher) {
			w.Write([]byte("\x00\xffnot json at all\n\n"))
			fl.Flush()
		}, 0},
		{"closes mid-stream", func(w http.ResponseWriter, fl http.Flusher) {}, 0},
		{"stalls", func(w http.ResponseWriter, fl http.Flusher) { time.Sleep(2 * time.Second) }, 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t)
			f.script = misbehave(tt.bad)
			c := newFakeClient(t, f, nil)
			ctx := context.Background()
			sb, err := c.Sandbox(ctx, SandboxOptions{Image: "ubuntu"})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close(ctx)
			ectx := ctx
			if tt.ctxTTL > 0 {
				var cancel context.CancelFunc
				ectx, cancel = context.WithTimeout(ctx, tt.ctxTTL)
				defer cancel()
			}
			res, err := sb.Exec(ectx, "x").Wait()
			var ece *ExecConnectionError
			if !errors.As(err, &ece) || ece.SandboxID != sb.ID() || !strings.Contains(err.Error(), sb.ID()) {
				t.Fatalf("Wait err = %v, want *ExecConnectionError naming %s", err, sb.ID())
			}
			if res.Stdout != "before\n" || res.ExitCode != -1 {
				t.Errorf("result = %+v, want the chunk before the failure and exit -1", res)
			}
			got := describe(rows(t, c, sb))
			want := "exec.started 1 {Seq:1 Kind:command Cmd:x Code: Fingerprint:}\n" +
				`exec.output 1 {"seq":1,"type":"stdout","text":"before\n"}` + "\n"
			if !strings.HasSuffix(got, want) || strings.Contains(got, "exec.completed") {
				t.Fatalf("ledger:\n%s\nwant it to end with:\n%s(no exec.completed)", got, want)
			}
		})
	}
}

// failingStore fails the appends that fail returns an error for.
type failingStore struct {
	*memory.Store
	fail func(e events.Entry) error
}

func (s *failingStore) Append(ctx context.Context, e events.Entry) error {
	if s.fail != nil {
		if err := s.fail(e); err != nil {
			return err
		}
	}
	return s.Store.Append(ctx, e)
}

func (s *failingStore) AppendBatch(ctx context.Context, es []events.Entry) error {
	for _, e := range es {
		if s.fail != nil {
			if err := s.fail(e); err != nil {
				return err
			}
		}
	}
	return s.Store.AppendBatch(ctx, es)
}

func TestFakeNoLeakWhenCreatedAppendFails(t *testing.T) {
	f := newFakeServer(t)
	boom := errors.New("disk full")
	store := &failingStore{Store: memory.New(), fail: func(e events.Entry) error {
		if e.Event == events.SandboxCreated {
			return boom
		}
		return nil
	}}
	c, err := New(Options{BaseURL: f.URL, Adapter: store, MaxConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the slot must be free again for the second attempt
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Sandbox(ctx, SandboxOptions{Image: "ubuntu"})
		cancel()
		var se *SandboxError
		if !errors.Is(err, boom) || !errors.As(err, &se) {
			t.Fatalf("Sandbox = %v, want a *SandboxError wrapping the append error", err)
		}
	}
	if n := f.live(); n != 0 {
		t.Fatalf("%d sandboxes left on the server, want 0 (leaked)", n)
	}
	if got := c.sem.inUse(); got != 0 {
		t.Fatalf("slots in use = %d, want 0", got)
	}
}

func TestFakeCloseIdempotentAndCancelsStreams(t *testing.T) {
	f := newFakeServer(t)
	stop := make(chan struct{})
	defer close(stop)
	f.script = misbehave(func(w http.ResponseWriter, fl http.Flusher) {
		select {
		case <-stop:
		case <-time.After(10 * time.Second):
		}
	})
	c := newFakeClient(t, f, nil)
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "ubuntu"})
	if err != nil {
		t.Fatal(err)
	}
	ex := sb.Exec(ctx, "sleep forever")
	var first []byte
	for chunk, err := range ex.Stdout() {
		if err != nil {
			t.Fatal(err)
		}
		first = chunk
		break
	}
	if string(first) != "before\n" {
		t.Fatalf("first chunk = %q", first)
	}
	start := time.Now()
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v: it did not cancel the stream", d)
	}
	if _, err := ex.Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close = %v, want an error wrapping ErrClosed", err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if _, err := sb.Exec(ctx, "echo late").Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Exec after Close = %v, want ErrClosed", err)
	}
	es := rows(t, c, sb)
	closed := 0
	for _, e := range es {
		if e.Event == events.SandboxClosed {
			closed++
		}
	}
	if closed != 1 || es[len(es)-1].Event != events.SandboxClosed {
		t.Fatalf("ledger:\n%s\nwant exactly one sandbox.closed, last", describe(es))
	}
}

func TestFakeConcurrencyCapThroughClient(t *testing.T) {
	f := newFakeServer(t)
	c, err := New(Options{BaseURL: f.URL, Adapter: memory.New(), MaxConcurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := c.Sandbox(ctx, SandboxOptions{Image: "x"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Sandbox(ctx, SandboxOptions{Image: "x"})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Sandbox(short, SandboxOptions{Image: "x"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third Sandbox = %v, want to wait for a slot until ctx ends", err)
	}
	got := make(chan error, 1)
	go func() {
		sb, err := c.Sandbox(ctx, SandboxOptions{Image: "x"})
		if err == nil {
			err = sb.Close(ctx)
		}
		got <- err
	}()
	testenv.Eventually(t, 5*time.Second, func() error {
		if c.sem.waiting() != 1 {
			return errors.New("third creator not waiting")
		}
		return nil
	})
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.sem.inUse(); n != 0 {
		t.Fatalf("slots in use after every Close = %d", n)
	}
}

func TestFakeExecBadOptions(t *testing.T) {
	f := newFakeServer(t)
	c := newFakeClient(t, f, nil)
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	for _, ex := range []*Exec{
		sb.Exec(ctx, ""),
		sb.Exec(ctx, "echo", ExecOptions{}, ExecOptions{}),
		sb.Exec(ctx, "echo", ExecOptions{Timeout: -time.Second}),
		sb.ExecCode(ctx, ""),
	} {
		if _, err := ex.Wait(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("step %d: Wait = %v, want ErrInvalidOptions", ex.Step(), err)
		}
	}
	// Bad calls use up their step numbers but write nothing.
	if got, want := sb.Exec(ctx, "echo ok").Step(), 5; got != want {
		t.Fatalf("next step = %d, want %d", got, want)
	}
	for _, e := range rows(t, c, sb) {
		if e.StepIndex > 0 && e.StepIndex < 5 {
			t.Fatalf("a rejected call wrote %s at step %d", e.Event, e.StepIndex)
		}
	}
}

func TestFakeLifecycleGarbageAndStall(t *testing.T) {
	t.Run("garbage", func(t *testing.T) {
		f := newFakeServer(t)
		f.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte("{not json"))
		})
		c := newFakeClient(t, f, nil)
		_, err := c.Sandbox(context.Background(), SandboxOptions{Image: "x"})
		var se *SandboxError
		if !errors.As(err, &se) || se.Op != "create" {
			t.Fatalf("Sandbox against garbage = %v, want a *SandboxError of create", err)
		}
		if c.sem.inUse() != 0 {
			t.Fatal("slot kept")
		}
	})
	t.Run("stall", func(t *testing.T) {
		f := newFakeServer(t)
		stop := make(chan struct{})
		f.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-stop:
			case <-r.Context().Done():
			}
		})
		defer close(stop)
		c := newFakeClient(t, f, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, err := c.Sandbox(ctx, SandboxOptions{Image: "x"}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Sandbox against a stalled server = %v, want DeadlineExceeded", err)
		}
	})
	t.Run("api error", func(t *testing.T) {
		f := newFakeServer(t)
		f.failCreate = http.StatusConflict
		c := newFakeClient(t, f, nil)
		_, err := c.Sandbox(context.Background(), SandboxOptions{Image: "x"})
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict {
			t.Fatalf("Sandbox = %v, want an *APIError 409", err)
		}
	})
}

// TestFakeOutputMemoryBounded streams 16 MB through Pipe into a slow writer and
// checks that the exec never holds more than its window (plus one group).
func TestFakeOutputMemoryBounded(t *testing.T) {
	f := newFakeServer(t)
	line := strings.Repeat("y", 1023)
	const lines = 16 << 10
	f.script = func(w http.ResponseWriter, fl http.Flusher, cmd string) {
		event(w, fl, map[string]any{"type": "init", "text": "cmd-1"})
		for range lines {
			event(w, fl, map[string]any{"type": "stdout", "text": line})
		}
		event(w, fl, map[string]any{"type": "execution_complete"})
	}
	c := newFakeClient(t, f, nil)
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	ex := sb.Exec(ctx, "big")
	peak, n := 0, 0
	err = ex.Pipe(writerFunc(func(p []byte) (int, error) {
		n += len(p)
		ex.out.mu.Lock()
		peak = max(peak, ex.out.size)
		ex.out.mu.Unlock()
		time.Sleep(50 * time.Microsecond)
		return len(p), nil
	}))
	if err != nil || n != lines*1024 {
		t.Fatalf("Pipe = %d bytes, %v; want %d", n, err, lines*1024)
	}
	if limit := outputWindow + maxGroup; peak > limit {
		t.Fatalf("peak retained output %d bytes, want <= %d", peak, limit)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestFakePauseCancelsStreams(t *testing.T) {
	f := newFakeServer(t)
	stop := make(chan struct{})
	defer close(stop)
	f.script = misbehave(func(w http.ResponseWriter, fl http.Flusher) {
		select {
		case <-stop:
		case <-time.After(10 * time.Second):
		}
	})
	c := newFakeClient(t, f, nil)
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	ex := sb.Exec(ctx, "long")
	for range ex.Stdout() {
		break
	}
	if err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ex.Wait(); !errors.Is(err, ErrPaused) {
		t.Fatalf("Wait after Pause = %v, want an error wrapping ErrPaused", err)
	}
	if _, err := sb.ReadFile(ctx, "/x"); !errors.Is(err, ErrPaused) {
		t.Fatalf("ReadFile while paused = %v, want ErrPaused", err)
	}
}

// TestFakeCheckpointFailures: a checkpoint on a server that ignores Prefer
// (it answers 202 Creating) polls; a snapshot that fails is a *ClientError
// 500, one never Ready by the caller's deadline a *SandboxError naming it,
// a refused one a *SandboxError of create snapshot; none is recorded.
func TestFakeCheckpointFailures(t *testing.T) {
	for _, tt := range []struct {
		state    string
		deadline time.Duration
		check    func(t *testing.T, err error)
	}{
		{"Failed", time.Minute, func(t *testing.T, err error) {
			var ce *ClientError
			if !errors.As(err, &ce) || ce.Status != http.StatusInternalServerError || !strings.Contains(ce.Message, "snap-1") || !errors.Is(err, opensandbox.ErrSnapshotFailed) {
				t.Errorf("err = %v, want a *ClientError 500 naming snap-1", err)
			}
		}},
		{"Creating", 1500 * time.Millisecond, func(t *testing.T, err error) {
			var se *SandboxError
			if !errors.As(err, &se) || se.Op != "wait snapshot snap-1" || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want a *SandboxError of wait snapshot snap-1 wrapping DeadlineExceeded", err)
			}
		}},
		{"", time.Minute, func(t *testing.T, err error) {
			var se *SandboxError
			if !errors.As(err, &se) || se.Op != "create snapshot" || !errors.Is(err, opensandbox.ErrConflict) {
				t.Errorf("err = %v, want a *SandboxError of create snapshot wrapping ErrConflict", err)
			}
		}},
	} {
		t.Run(cmp.Or(tt.state, "refused"), func(t *testing.T) {
			f := newFakeServer(t)
			f.snapState = tt.state
			c := newFakeClient(t, f, nil)
			sb, err := c.Sandbox(context.Background(), SandboxOptions{Image: "x"})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), tt.deadline)
			defer cancel()
			snap, err := sb.Checkpoint(ctx, "tag")
			if snap != "" {
				t.Errorf("Checkpoint = %q, want none", snap)
			}
			tt.check(t, err)
			// The wait asked for leaves time for the polls: none under a
			// 1.5 s deadline.
			f.mu.Lock()
			prefer := f.prefer
			f.mu.Unlock()
			want := "return=representation, wait=10"
			if tt.deadline < 2*time.Second {
				want = "return=representation"
			}
			if len(prefer) != 1 || prefer[0] != want {
				t.Errorf("Prefer of the creates = %q, want [%q]", prefer, want)
			}
			for _, e := range rows(t, c, sb) {
				if e.Event.Is(events.CheckpointCreated) {
					t.Errorf("a failed checkpoint was recorded: %+v", e)
				}
			}
		})
	}
}

func TestFakeCapHoldsFor100Goroutines(t *testing.T) {
	f := newFakeServer(t)
	const max = 4
	c, err := New(Options{BaseURL: f.URL, Adapter: memory.New(), MaxConcurrency: max})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			sb, err := c.Sandbox(ctx, SandboxOptions{Image: "x"})
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := sb.Exec(ctx, "echo hi").Wait(); err != nil {
				t.Error(err)
			}
			if err := sb.Close(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.peak > max || f.peak == 0 {
		t.Fatalf("peak sandboxes alive on the server = %d, want 1..%d", f.peak, max)
	}
	if len(f.sandboxes) != 0 || c.sem.inUse() != 0 {
		t.Fatalf("%d sandboxes and %d slots left", len(f.sandboxes), c.sem.inUse())
	}
}

func TestFakeImageErrors(t *testing.T) {
	for _, c := range []struct {
		reason string
		want   error
	}{
		{"IMAGE_NOT_FOUND", ErrImageNotFound},
		{"IMAGE_UNAUTHORIZED", ErrImageUnauthorized},
		{"IMAGE_PULL_FAILED", ErrImagePullFailed},
	} {
		t.Run(c.reason, func(t *testing.T) {
			f := newFakeServer(t)
			f.failReason = c.reason
			cl := newFakeClient(t, f, nil)
			_, err := cl.Sandbox(context.Background(), SandboxOptions{Image: "registry.example/x:1"})
			if !errors.Is(err, c.want) {
				t.Fatalf("Sandbox = %v, want an error matching %v", err, c.want)
			}
			var se *opensandbox.StateError
			if !errors.As(err, &se) || se.Reason != c.reason || !strings.Contains(se.Message, "registry.example/x:1") {
				t.Errorf("Sandbox = %v, want an *opensandbox.StateError with reason %s naming the image", err, c.reason)
			}
			if errors.Is(err, ErrImageNotFound) && c.want != ErrImageNotFound {
				t.Errorf("%v also matches ErrImageNotFound", err)
			}
		})
	}
	// The default image is DefaultImage.
	f := newFakeServer(t)
	cl := newFakeClient(t, f, nil)
	if _, err := cl.Sandbox(context.Background(), SandboxOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := f.images; len(got) != 1 || got[0] != DefaultImage {
		t.Errorf("images created = %q, want [%q]", got, DefaultImage)
	}
}

// TestFakeCloseUnreachable: a sandbox whose delete fails may still run, so
// its sandbox.closed says unreachable, never a plain close.
func TestFakeCloseUnreachable(t *testing.T) {
	f := newFakeServer(t)
	c := newFakeClient(t, f, nil)
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "ubuntu"})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.failDelete = http.StatusInternalServerError
	f.mu.Unlock()
	var se *SandboxError
	if err := sb.Close(ctx); !errors.As(err, &se) || se.Op != "delete" {
		t.Fatalf("Close = %v, want the delete's *SandboxError", err)
	}
	es := rows(t, c, sb)
	last := es[len(es)-1]
	var p events.SandboxClosedPayload
	if last.Event != events.SandboxClosed || last.Decode(&p) != nil || p.Outcome != events.OutcomeUnreachable {
		t.Errorf("session ends with %s %s, want sandbox.closed with outcome %q", last.Event, last.Payload, events.OutcomeUnreachable)
	}
	if f.live() != 1 {
		t.Errorf("%d sandboxes live on the server, want the one whose delete failed", f.live())
	}
}
