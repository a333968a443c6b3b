package alineo_test

// Behaviour tests against an embedded sandboxd, once per ledger store.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/postgres"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/testenv"
)

// storeKinds opens each ledger store the behaviour tests run against.
var storeKinds = []struct {
	name string
	open func(t *testing.T) adapters.Store
}{
	{"memory", func(t *testing.T) adapters.Store { return memory.New() }},
	{"sqlite", func(t *testing.T) adapters.Store {
		s, err := sqlite.Open(testenv.SQLitePath(t), sqlite.Config{Synchronous: "NORMAL"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"postgres", func(t *testing.T) adapters.Store {
		s, err := postgres.Open(testenv.Postgres(t), postgres.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

func TestMain(m *testing.M) {
	code := m.Run()
	closeExampleServer()
	testenv.StopPostgres()
	os.Exit(code)
}

// env is one test's sandboxd, store and client.
type env struct {
	url    string
	store  adapters.Store
	client *alineo.Client
}

func newEnv(t *testing.T, store adapters.Store, opts ...func(*alineo.Options)) *env {
	t.Helper()
	url := testenv.Sandboxd(t)
	t.Cleanup(func() { store.Close() })
	o := alineo.Options{BaseURL: url, Adapter: store}
	for _, f := range opts {
		f(&o)
	}
	c, err := alineo.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return &env{url: url, store: store, client: c}
}

func forEachStore(t *testing.T, f func(t *testing.T, store adapters.Store)) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) { f(t, k.open(t)) })
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) sandbox(t *testing.T, ctx context.Context, o alineo.SandboxOptions) *alineo.Sandbox {
	t.Helper()
	if o.Image == "" {
		o.Image = "host"
	}
	sb, err := e.client.Sandbox(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb
}

func (e *env) rows(t *testing.T, sb *alineo.Sandbox) []events.Entry {
	t.Helper()
	es, err := e.store.ReadAll(context.Background(), sb.Name(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// liveSandboxes counts the sandboxes the server still runs.
func (e *env) liveSandboxes(t *testing.T, ctx context.Context) int {
	t.Helper()
	page, err := e.client.OpenSandbox().ListSandboxes(ctx, opensandbox.ListSandboxesOptions{
		States: []opensandbox.SandboxState{"Pending", "Running", "Paused", "Pausing", "Resuming"}, PageSize: 200})
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Items)
}

// summary renders entries as "event step payload" lines, leaving out the
// fingerprint of exec.started.
// describeStarted renders an exec.started payload without its fingerprint;
// an interactive one's cwd and env follow.
func describeStarted(sp events.ExecStartedPayload) string {
	p := fmt.Sprintf("{Seq:%d Kind:%s Cmd:%s Code:%s Fingerprint:}", sp.Seq, sp.Kind, sp.Cmd, sp.Code)
	if sp.Interactive {
		p += fmt.Sprintf(" interactive cwd %q env %v", sp.Cwd, sp.Env)
	}
	return p
}

func summary(es []events.Entry) string {
	var b strings.Builder
	for _, e := range es {
		p := canonical(e.Payload)
		if e.Event == events.ExecStarted {
			var sp events.ExecStartedPayload
			_ = e.Decode(&sp)
			if want := events.Fingerprint(sp.Kind, sp.Text()); sp.Fingerprint != want {
				p = "BAD FINGERPRINT " + sp.Fingerprint
			} else {
				p = describeStarted(sp)
			}
		}
		fmt.Fprintf(&b, "%s %d %s\n", e.Event, e.StepIndex, p)
	}
	return b.String()
}

func TestExecShapes(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{})
		const script = "for i in 1 2 3; do echo out$i; echo err$i >&2; done"
		const wantOut, wantErr = "out1\nout2\nout3\n", "err1\nerr2\nerr3\n"

		res, err := sb.Exec(ctx, script).Wait()
		if err != nil || res.Stdout != wantOut || res.Stderr != wantErr || res.ExitCode != 0 {
			t.Fatalf("Wait = %+v, %v", res, err)
		}

		var piped bytes.Buffer
		if err := sb.Exec(ctx, script).Pipe(&piped); err != nil || piped.String() != wantOut {
			t.Fatalf("Pipe wrote %q, %v; want %q", piped.String(), err, wantOut)
		}

		var out, errOut []string
		ex := sb.Exec(ctx, script)
		for chunk, err := range ex.Stdout() {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(chunk))
		}
		for chunk, err := range ex.Stderr() { // a second reader, after the end: from the first chunk
			if err != nil {
				t.Fatal(err)
			}
			errOut = append(errOut, string(chunk))
		}
		// A chunk is one or more whole lines.
		if got := strings.Join(out, ""); got != wantOut || len(out) == 0 || len(out) > 3 {
			t.Fatalf("Stdout chunks = %q, want the lines of %q", out, wantOut)
		}
		if got := strings.Join(errOut, ""); got != wantErr || len(errOut) == 0 || len(errOut) > 3 {
			t.Fatalf("Stderr chunks = %q, want the lines of %q", errOut, wantErr)
		}

		// Several readers at once, each from the first chunk.
		ex = sb.Exec(ctx, "for i in $(seq 1 200); do echo line$i; done")
		var wg sync.WaitGroup
		got := make([]string, 4)
		for i := range got {
			wg.Go(func() {
				var b bytes.Buffer
				if i == 0 {
					r, err := ex.Wait()
					if err != nil {
						t.Error(err)
					}
					got[i] = r.Stdout
					return
				}
				if err := ex.Pipe(&b); err != nil {
					t.Error(err)
				}
				got[i] = b.String()
			})
		}
		wg.Wait()
		var want strings.Builder
		for i := 1; i <= 200; i++ {
			fmt.Fprintf(&want, "line%d\n", i)
		}
		for i, g := range got {
			if g != want.String() {
				t.Errorf("reader %d got %d bytes, want %d", i, len(g), want.Len())
			}
		}
	})
}

func TestStrictAndNonStrict(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{})

		res, err := sb.Exec(ctx, "echo partial; exit 42").Wait()
		var ce *alineo.CommandError
		if !errors.As(err, &ce) || ce.ExitCode != 42 || ce.SandboxID != sb.ID() || ce.Command != "echo partial; exit 42" || ce.Stdout != "partial\n" {
			t.Fatalf("strict Wait err = %#v", err)
		}
		if res.ExitCode != 42 || res.Stdout != "partial\n" {
			t.Fatalf("strict Wait result = %+v, want exit 42 with its output", res)
		}
		if err := sb.Exec(ctx, "exit 3").Pipe(&bytes.Buffer{}); !errors.As(err, &ce) || ce.ExitCode != 3 {
			t.Fatalf("strict Pipe = %v, want *CommandError 3", err)
		}
		res, err = sb.Exec(ctx, "false", alineo.ExecOptions{Strict: new(false)}).Wait()
		if err != nil || res.ExitCode != 1 {
			t.Fatalf("non-strict Wait = %+v, %v; want exit 1, nil", res, err)
		}
		// exec.completed is in the ledger before the strict error is seen.
		es := e.rows(t, sb)
		var codes []int
		for _, en := range es {
			if en.Event == events.ExecCompleted {
				var p events.ExecCompletedPayload
				_ = en.Decode(&p)
				codes = append(codes, p.ExitCode)
			}
		}
		if want := []int{42, 3, 1}; !slices.Equal(codes, want) {
			t.Fatalf("exec.completed exit codes = %v, want %v", codes, want)
		}
	})
}

func TestLedgerRowsOfEachOperation(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		sb, err := e.client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: "rows", RunID: "run-7",
			Resources: alineo.Resources{CPU: "500m", Memory: "256Mi"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Exec(ctx, "echo one; sleep 0.3; echo two >&2").Wait(); err != nil { // stdout and stderr are separate pipes
			t.Fatal(err)
		}
		if _, err := sb.ExecCode(ctx, "echo code").Wait(); err != nil {
			t.Fatal(err)
		}
		if err := sb.WriteFile(ctx, "/tmp/f", []byte("x")); err != nil { // file operations write nothing
			t.Fatal(err)
		}
		if err := sb.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Exec(ctx, "echo paused").Wait(); !errors.Is(err, alineo.ErrPaused) { // step 3, nothing written
			t.Fatalf("Exec while paused = %v, want ErrPaused", err)
		}
		if err := sb.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Exec(ctx, "exit 5", alineo.ExecOptions{Strict: new(false)}).Wait(); err != nil {
			t.Fatal(err)
		}
		if err := sb.Close(ctx); err != nil {
			t.Fatal(err)
		}
		got := summary(e.rows(t, sb))
		want := `sandbox.created -1 {"image":"host","resources":{"cpu":"500m","memory":"256Mi"},"runId":"run-7","sandboxId":"` + sb.ID() + `"}
exec.started 1 {Seq:1 Kind:command Cmd:echo one; sleep 0.3; echo two >&2 Code: Fingerprint:}
exec.output 1 {"seq":1,"text":"one\n","type":"stdout"}
exec.output 1 {"seq":1,"text":"two\n","type":"stderr"}
exec.completed 1 {"exitCode":0,"seq":1}
exec.started 2 {Seq:2 Kind:code Cmd: Code:echo code Fingerprint:}
exec.output 2 {"seq":2,"text":"code\n","type":"stdout"}
exec.completed 2 {"exitCode":0,"seq":2}
sandbox.paused -1 
sandbox.resumed -1 
exec.started 4 {Seq:4 Kind:command Cmd:exit 5 Code: Fingerprint:}
exec.completed 4 {"exitCode":5,"seq":4}
sandbox.closed -1 
`
		if got != want {
			t.Fatalf("ledger:\n%s\nwant:\n%s", got, want)
		}
		d, err := e.client.Sandboxes().Get(ctx, "rows", sb.ID())
		if err != nil || d == nil || d.Status != adapters.StatusCompleted || d.ExecCount != 3 || d.RunID != "run-7" {
			t.Fatalf("details = %+v, %v; want completed, 3 execs, run-7", d, err)
		}
	})
}

func TestConcurrentExecsKeepOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{})
		const n, lines = 8, 50
		var wg sync.WaitGroup
		for g := range n {
			wg.Go(func() {
				cmd := fmt.Sprintf("for i in $(seq 1 %d); do echo g%d-$i; done", lines, g)
				if _, err := sb.Exec(ctx, cmd).Wait(); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		es := e.rows(t, sb)
		type state struct {
			started, completed bool
			next               int
			prefix             string
		}
		steps := map[int]*state{}
		lastStarted := 0
		for i, en := range es {
			if i > 0 && (en.Ts < es[i-1].Ts || en.Seq <= es[i-1].Seq) {
				t.Fatalf("entry %d out of (ts, seq) order", i)
			}
			if en.StepIndex < 1 {
				continue
			}
			st := steps[en.StepIndex]
			switch en.Event {
			case events.ExecStarted:
				if st != nil || en.StepIndex != lastStarted+1 {
					t.Fatalf("exec.started of step %d after step %d", en.StepIndex, lastStarted)
				}
				lastStarted = en.StepIndex
				steps[en.StepIndex] = &state{started: true, next: 1}
			case events.ExecOutput:
				var p events.ExecOutputPayload
				_ = en.Decode(&p)
				if st == nil || st.completed {
					t.Fatalf("step %d output outside started..completed", en.StepIndex)
				}
				for line := range strings.Lines(p.Text) { // a row holds one or more lines
					g, i, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "-")
					if !ok || (st.prefix != "" && st.prefix != g) || i != fmt.Sprint(st.next) {
						t.Fatalf("step %d output %q, want line %d of one command", en.StepIndex, line, st.next)
					}
					st.prefix = g
					st.next++
				}
			case events.ExecCompleted:
				if st == nil || st.next != lines+1 {
					t.Fatalf("step %d completed early", en.StepIndex)
				}
				st.completed = true
			}
		}
		if len(steps) != n {
			t.Fatalf("%d steps recorded, want %d", len(steps), n)
		}
	})
}

func TestCloseIdempotentAndCancelsStreams(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{})
		ex := sb.Exec(ctx, "echo started; sleep 30")
		for chunk, err := range ex.Stdout() {
			if err != nil || string(chunk) != "started\n" {
				t.Fatalf("first chunk %q, %v", chunk, err)
			}
			break
		}
		start := time.Now()
		if err := sb.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("Close took %v", d)
		}
		if _, err := ex.Wait(); !errors.Is(err, alineo.ErrClosed) {
			t.Fatalf("Wait after Close = %v, want ErrClosed", err)
		}
		var ece *alineo.ExecConnectionError
		if _, err := ex.Wait(); !errors.As(err, &ece) {
			t.Fatalf("Wait after Close = %T, want *ExecConnectionError", err)
		}
		if err := sb.Close(ctx); err != nil {
			t.Fatalf("second Close = %v", err)
		}
		got := summary(e.rows(t, sb))
		if !strings.HasSuffix(got, "exec.output 1 {\"seq\":1,\"text\":\"started\\n\",\"type\":\"stdout\"}\nsandbox.closed -1 \n") {
			t.Fatalf("ledger:\n%s\nwant the recorded chunk kept, no exec.completed, one sandbox.closed last", got)
		}
		if n := e.liveSandboxes(t, ctx); n != 0 {
			t.Fatalf("%d sandboxes live after Close", n)
		}
	})
}

// failingStore fails every append of one event.
type failingStore struct {
	adapters.Store
	event events.Event
}

var errInjected = errors.New("injected append failure")

func (s failingStore) Append(ctx context.Context, e events.Entry) error {
	if e.Event == s.event {
		return errInjected
	}
	return s.Store.Append(ctx, e)
}

func (s failingStore) AppendBatch(ctx context.Context, es []events.Entry) error {
	for _, e := range es {
		if e.Event == s.event {
			return errInjected
		}
	}
	return s.Store.AppendBatch(ctx, es)
}

func TestNoContainerLeakWhenCreatedAppendFails(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, failingStore{Store: store, event: events.SandboxCreated}, func(o *alineo.Options) { o.MaxConcurrency = 1 })
		ctx := testCtx(t)
		for range 2 { // the slot is free again for the second attempt
			_, err := e.client.Sandbox(ctx, alineo.SandboxOptions{Image: "host"})
			var se *alineo.SandboxError
			if !errors.Is(err, errInjected) || !errors.As(err, &se) || se.SandboxID == "" {
				t.Fatalf("Sandbox = %v, want a *SandboxError naming the sandbox, wrapping the append error", err)
			}
		}
		if n := e.liveSandboxes(t, ctx); n != 0 {
			t.Fatalf("%d sandboxes left on the server: leaked", n)
		}
	})
}

func TestFileOperations(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{})
		other := e.sandbox(t, ctx, alineo.SandboxOptions{})
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(sb.CreateDirectory(ctx, "/workspace/src"))
		content := []byte("hello\x00\xff world\n")
		must(sb.WriteFile(ctx, "/workspace/src/a.ts", content))
		got, err := sb.ReadFile(ctx, "/workspace/src/a.ts")
		must(err)
		if !bytes.Equal(got, content) {
			t.Fatalf("ReadFile = %q, want %q", got, content)
		}
		fi, err := sb.GetFileInfo(ctx, "/workspace/src/a.ts")
		must(err)
		if fi.Type != "file" || fi.Size != int64(len(content)) {
			t.Fatalf("GetFileInfo = %+v", fi)
		}
		must(sb.WriteFile(ctx, "/workspace/src/b.txt", []byte("old old")))
		found, err := sb.SearchFiles(ctx, "*.ts", "/workspace")
		must(err)
		if !slices.Equal(found, []string{"/workspace/src/a.ts"}) {
			t.Fatalf("SearchFiles = %q", found)
		}
		must(sb.ReplaceInFiles(ctx, alineo.Replacement{Path: "/workspace/src/b.txt", Old: "old", New: "new"}))
		if got, _ := sb.ReadFile(ctx, "/workspace/src/b.txt"); string(got) != "new new" {
			t.Fatalf("after ReplaceInFiles: %q", got)
		}
		must(sb.MoveFile(ctx, "/workspace/src/b.txt", "/workspace/src/c.txt"))
		list, err := sb.ListDirectory(ctx, "/workspace/src")
		must(err)
		var names []string
		for _, fi := range list {
			names = append(names, fi.Path)
		}
		if !slices.Equal(names, []string{"/workspace/src/a.ts", "/workspace/src/c.txt"}) {
			t.Fatalf("ListDirectory = %q", names)
		}
		must(sb.Transfer(ctx, "/workspace/src/a.ts", other))
		if got, err := other.ReadFile(ctx, "/workspace/src/a.ts"); err != nil || !bytes.Equal(got, content) {
			t.Fatalf("transferred file = %q, %v", got, err)
		}
		must(sb.DeleteFile(ctx, "/workspace/src/a.ts"))
		if _, err := sb.GetFileInfo(ctx, "/workspace/src/a.ts"); !errors.Is(err, opensandbox.ErrNotFound) {
			t.Fatalf("GetFileInfo after delete = %v, want ErrNotFound", err)
		}
		var apiErr *alineo.APIError
		if _, err := sb.ReadFile(ctx, "/nope"); !errors.As(err, &apiErr) || apiErr.Status != 404 {
			t.Fatalf("ReadFile of a missing file = %v, want *APIError 404", err)
		}
		must(sb.DeleteDirectory(ctx, "/workspace"))
		if _, err := sb.ListDirectory(ctx, "/workspace"); err == nil {
			t.Fatal("ListDirectory after DeleteDirectory succeeded")
		}
		for _, en := range e.rows(t, sb) {
			if en.StepIndex != events.SandboxLevel {
				t.Fatalf("file operations wrote %s", en.Event)
			}
		}
	})
}

func TestBashScriptAndQuoting(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{})
		script := `set -euo pipefail
name="world"
greet() { echo "hello, $1"; }
greet "$name" | tr a-z A-Z
echo 'single '"'"'quoted'"'"' $HOME \n'
false | true
echo done`
		res, err := sb.Exec(ctx, script, alineo.ExecOptions{Shell: "/bin/bash"}).Wait()
		if want := "HELLO, WORLD\nsingle 'quoted' $HOME \\n\n"; err == nil || !strings.HasPrefix(res.Stdout, want) {
			t.Fatalf("pipefail script = %+v, %v; want it to stop at the failing pipe after %q", res, err, want)
		}
		if res.ExitCode != 1 {
			t.Fatalf("exit = %d, want 1", res.ExitCode)
		}
		res, err = sb.Exec(ctx, `printf '%s|' "a b" 'c"d' "e'f" \$x`).Wait()
		// Exact bytes: printf wrote no newline (the line format added one).
		if err != nil || res.Stdout != `a b|c"d|e'f|$x|` {
			t.Fatalf("quoting = %q, %v", res.Stdout, err)
		}
		res, err = sb.Exec(ctx, "echo \"$GREETING\" from $(pwd)", alineo.ExecOptions{Cwd: "/tmp", Env: map[string]string{"GREETING": "hi 'there'"}, Shell: "/bin/sh"}).Wait()
		if err != nil || res.Stdout != "hi 'there' from /tmp\n" {
			t.Fatalf("env and cwd = %q, %v", res.Stdout, err)
		}
	})
}

// TestLargeOutputRecordedExactly prints 10 MB (2 MB under -race) of lines
// holding every byte but the line terminators, invalid UTF-8 and NUL included,
// and reassembles them from the ledger.
func TestLargeOutputRecordedExactly(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{})
		rng := rand.New(rand.NewPCG(1, 2))
		var want bytes.Buffer
		size := 10 << 20
		if raceEnabled {
			size = 2 << 20
		}
		for want.Len() < size {
			line := make([]byte, 1+rng.IntN(2000))
			for i := range line {
				b := byte(rng.IntN(256))
				if b == '\n' || b == '\r' {
					b = 0xfe
				}
				line[i] = b
			}
			want.Write(line)
			want.WriteByte('\n')
		}
		if err := sb.WriteFile(ctx, "/tmp/big.bin", want.Bytes()); err != nil {
			t.Fatal(err)
		}
		var piped bytes.Buffer
		ex := sb.Exec(ctx, "cat /tmp/big.bin")
		if err := ex.Pipe(&piped); err != nil {
			t.Fatal(err)
		}
		var ledger bytes.Buffer
		for _, en := range e.rows(t, sb) {
			if en.Event == events.ExecOutput && en.StepIndex == ex.Step() {
				var p events.ExecOutputPayload
				if err := en.Decode(&p); err != nil {
					t.Fatal(err)
				}
				ledger.Write(p.Bytes())
			}
		}
		if !bytes.Equal(piped.Bytes(), ledger.Bytes()) {
			t.Errorf("piped %d bytes, but the ledger holds %d", piped.Len(), ledger.Len())
		}
		if i := firstDiff(ledger.Bytes(), want.Bytes()); i >= 0 {
			t.Fatalf("ledger holds %d bytes, want %d exactly; first difference at byte %d: got %q, want %q", ledger.Len(), want.Len(), i,
				ledger.Bytes()[i:min(i+40, ledger.Len())], want.Bytes()[i:min(i+40, want.Len())])
		}
		// A reader that comes after the end gets everything too (from the ledger).
		res, err := ex.Wait()
		if err != nil || res.Stdout != want.String() {
			t.Fatalf("late Wait: %d bytes, %v", len(res.Stdout), err)
		}
	})
}

func TestSandboxesHistory(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		a, err := e.client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: "job"})
		if err != nil {
			t.Fatal(err)
		}
		b := e.sandbox(t, ctx, alineo.SandboxOptions{Image: "host", Name: "other"})
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		all, err := e.client.Sandboxes().List(ctx, alineo.ListOptions{})
		if err != nil || len(all) != 2 {
			t.Fatalf("List = %+v, %v", all, err)
		}
		running, err := e.client.Sandboxes().List(ctx, alineo.ListOptions{Status: adapters.StatusRunning})
		if err != nil || len(running) != 1 || running[0].SandboxID != b.ID() {
			t.Fatalf("List running = %+v, %v", running, err)
		}
		named, err := e.client.Sandboxes().ListByName(ctx, "job", alineo.ListOptions{})
		if err != nil || len(named) != 1 || named[0].SandboxID != a.ID() || named[0].Status != adapters.StatusCompleted {
			t.Fatalf("ListByName = %+v, %v", named, err)
		}
		if err := e.client.Sandboxes().Delete(ctx, "job", a.ID()); err != nil {
			t.Fatal(err)
		}
		if d, err := e.client.Sandboxes().Get(ctx, "job", a.ID()); err != nil || d != nil {
			t.Fatalf("Get after Delete = %+v, %v; want nil", d, err)
		}
		if d, err := e.client.Sandboxes().Get(ctx, "other", b.ID()); err != nil || d == nil {
			t.Fatalf("Get other = %+v, %v", d, err)
		}
	})
}

func TestProxyAndMetrics(t *testing.T) {
	e := newEnv(t, memory.New())
	ctx := testCtx(t)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{})
	p, err := sb.Proxy(ctx, 8000)
	if err != nil || !strings.HasPrefix(p.URL, "http") {
		t.Fatalf("Proxy = %+v, %v", p, err)
	}
	m, err := sb.Metrics(ctx)
	if err != nil || m.Timestamp.IsZero() {
		t.Fatalf("Metrics = %+v, %v", m, err)
	}
}

// canonical re-encodes a JSON payload with sorted keys and no spaces, the way
// every store returns it (Postgres JSONB reorders keys).
func canonical(raw []byte) string {
	if raw == nil {
		return ""
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "BAD JSON " + string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// firstDiff returns the index of the first byte where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func TestExecTimeoutKills(t *testing.T) {
	e := newEnv(t, memory.New())
	ctx := testCtx(t)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{})
	start := time.Now()
	res, err := sb.Exec(ctx, "echo before; sleep 20", alineo.ExecOptions{Timeout: 300 * time.Millisecond}).Wait()
	var ce *alineo.CommandError
	if !errors.As(err, &ce) || ce.ExitCode != -1 || res.Stdout != "before\n" {
		t.Fatalf("Wait = %+v, %v; want a *CommandError with exit -1 after the output", res, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v: the timeout did not kill the command", d)
	}
}
