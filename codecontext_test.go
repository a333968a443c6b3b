package alineo_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
)

func TestCodeContextPython(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "notebook"})
		py, err := sb.CreateCodeContext(ctx, "python", alineo.CodeContextOptions{Cwd: "/tmp"})
		if err != nil {
			t.Fatal(err)
		}
		if py.ID() == "" || py.Language() != "python" {
			t.Fatalf("context = %q, %q", py.ID(), py.Language())
		}
		if _, err := py.Run(ctx, "import os\nx = 41").Wait(); err != nil {
			t.Fatal(err)
		}
		res, err := py.Run(ctx, "print(x + 1)\nprint('a')\nprint('b', os.getcwd())").Wait()
		if err != nil || res.Stdout != "42\na\nb /tmp\n" {
			t.Fatalf("stateful run = %+v, %v; want 42, a, b /tmp on their lines", res, err)
		}
		res, err = py.Run(ctx, "raise ValueError('boom')", alineo.CodeOptions{Strict: new(false)}).Wait()
		if err != nil || res.ExitCode != 1 {
			t.Fatalf("exception = %+v, %v; want exit 1", res, err)
		}
		var ce *alineo.CommandError
		if _, err := py.Run(ctx, "1/0").Wait(); !errors.As(err, &ce) || ce.ExitCode != 1 {
			t.Fatalf("strict exception = %v, want a *CommandError of exit 1", err)
		}
		// The state survived the exceptions.
		if res, err := py.Run(ctx, "print(x)").Wait(); err != nil || res.Stdout != "41\n" {
			t.Fatalf("after exceptions = %+v, %v", res, err)
		}
		list, err := sb.CodeContexts(ctx, "python")
		if err != nil || len(list) != 1 || list[0].ID() != py.ID() {
			t.Fatalf("CodeContexts = %v, %v", list, err)
		}

		// Recorded as execs: code, output with its newlines, exit code.
		var got []string
		stdout := "" // the chunks' cut is the ledger's choice: joined per exec
		for _, en := range e.rows(t, sb) {
			switch en.Event {
			case events.ExecStarted:
				var p events.ExecStartedPayload
				_ = en.Decode(&p)
				if p.Kind != events.KindCode {
					t.Fatalf("exec.started = %+v, want kind code", p)
				}
				got = append(got, "start "+p.Code)
			case events.ExecOutput:
				var p events.ExecOutputPayload
				_ = en.Decode(&p)
				if p.Type == events.Stdout {
					stdout += p.Text
				}
			case events.ExecCompleted:
				var p events.ExecCompletedPayload
				_ = en.Decode(&p)
				if stdout != "" {
					got = append(got, "out "+stdout)
				}
				stdout = ""
				got = append(got, "exit "+string(rune('0'+p.ExitCode)))
			}
		}
		joined := strings.Join(got, "|")
		if !strings.Contains(joined, "start print(x + 1)\nprint('a')\nprint('b', os.getcwd())|out 42\na\nb /tmp\n|exit 0") ||
			!strings.Contains(joined, "start 1/0|exit 1") {
			t.Fatalf("ledger = %q", joined)
		}

		if err := py.Close(ctx); err != nil {
			t.Fatal(err)
		}
		var se *alineo.SandboxError
		if _, err := py.Run(ctx, "print(x)").Wait(); !errors.As(err, &se) || !errors.Is(err, opensandbox.ErrNotFound) {
			t.Fatalf("run in a deleted context = %v, want a *SandboxError wrapping ErrNotFound", err)
		}
		if err := py.Close(ctx); !errors.Is(err, opensandbox.ErrNotFound) {
			t.Fatalf("second Close = %v, want ErrNotFound", err)
		}
	})
}

func TestCodeContextNodeAndBadInput(t *testing.T) {
	e := newEnv(t, memory.New())
	ctx := testCtx(t)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "js"})
	var oe *alineo.OptionError
	if _, err := sb.CreateCodeContext(ctx, " "); !errors.As(err, &oe) {
		t.Fatalf("empty language = %v, want an *OptionError", err)
	}
	var se *alineo.SandboxError
	// sandboxd serves python and javascript without Jupyter; others need it.
	if _, err := sb.CreateCodeContext(ctx, "cobol"); !errors.As(err, &se) || !errors.Is(err, opensandbox.ErrNotImplemented) {
		t.Fatalf("unknown language = %v, want a *SandboxError wrapping ErrNotImplemented", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed: the host image has no javascript interpreter")
	}
	js, err := sb.CreateCodeContext(ctx, "javascript")
	if err != nil {
		t.Fatal(err)
	}
	defer js.Close(ctx)
	if _, err := js.Run(ctx, "var y = 2").Wait(); err != nil {
		t.Fatal(err)
	}
	if res, err := js.Run(ctx, "console.log(y * 21)\nconsole.log('z')").Wait(); err != nil || res.Stdout != "42\nz\n" {
		t.Fatalf("node run = %+v, %v", res, err)
	}
	if _, err := js.Run(ctx, "y", alineo.CodeOptions{ContextID: "other"}).Wait(); !errors.As(err, &oe) {
		t.Fatalf("run naming another context = %v, want an *OptionError", err)
	}
	py, err := sb.CreateCodeContext(ctx, "python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := py.Run(ctx, "print(y)", alineo.CodeOptions{Strict: new(false)}).Wait(); err != nil {
		t.Fatal(err) // a NameError: contexts do not share state
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := js.Close(ctx); !errors.Is(err, alineo.ErrClosed) {
		t.Fatalf("Close after the sandbox's = %v, want ErrClosed", err)
	}
}

// TestCodeContextTellsWhatHappened follows CodeContext.Run's doc: an
// exception is exit code 1 (a *CommandError when strict), with its name,
// value and traceback in the typed error, the result and on stderr; an
// expression's value is the result's Value. Both are recorded (as the
// TypeScript SDK records execd's events: exec.output of type "result" and
// "error"), so a resumed handle replays them.
func TestCodeContextTellsWhatHappened(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		var cc commandCounter
		e := newEnv(t, store, cc.options)
		ctx := testCtx(t)
		sb := e.sandbox(t, ctx, alineo.SandboxOptions{Name: "told"})
		py, err := sb.CreateCodeContext(ctx, "python")
		if err != nil {
			t.Fatal(err)
		}
		type outcome struct {
			res alineo.ExecResult
			err error
		}
		calls := []struct {
			code string
			opts alineo.CodeOptions
		}{
			{"x = 20\nx * 2 + 2", alineo.CodeOptions{}},
			{"print('side')\n'a' + 'b'", alineo.CodeOptions{}},
			{"def f():\n    raise ValueError('boom')\nf()", alineo.CodeOptions{}},
			{"raise KeyError('k')", alineo.CodeOptions{Strict: new(false)}},
			{"import sys\nsys.exit(3)", alineo.CodeOptions{Strict: new(false)}},
			{"print(x)", alineo.CodeOptions{}},
		}
		run := func(c *alineo.CodeContext) []outcome {
			var got []outcome
			for _, call := range calls {
				res, err := c.Run(ctx, call.code, call.opts).Wait()
				got = append(got, outcome{res, err})
			}
			return got
		}
		live := run(py)

		check := func(what string, got []outcome) {
			t.Helper()
			if r := got[0]; r.err != nil || r.res.Value != "42" || r.res.Stdout != "" || r.res.Exception != nil {
				t.Errorf("%s: expression = %+v, %v; want Value 42 and no output", what, r.res, r.err)
			}
			if r := got[1]; r.err != nil || r.res.Value != "'ab'" || r.res.Stdout != "side\n" {
				t.Errorf("%s: print then expression = %+v, %v; want stdout side, Value 'ab'", what, r.res, r.err)
			}
			r := got[2]
			var ce *alineo.CommandError
			var x *alineo.Exception
			if !errors.As(r.err, &ce) || ce.ExitCode != 1 || ce.Exception == nil || !errors.As(r.err, &x) || x != ce.Exception {
				t.Fatalf("%s: strict exception = %v, want a *CommandError of exit 1 wrapping the *Exception", what, r.err)
			}
			if x.Name != "ValueError" || x.Value != "boom" || len(x.Traceback) == 0 || r.res.Exception == nil ||
				r.res.Exception.Name != x.Name || r.res.Exception.Value != x.Value || !slices.Equal(r.res.Exception.Traceback, x.Traceback) {
				t.Errorf("%s: exception = %+v, result's %+v", what, x, r.res.Exception)
			}
			tb := strings.Join(x.Traceback, "")
			if !strings.HasPrefix(r.res.Stderr, "Traceback (most recent call last):\n") || !strings.Contains(r.res.Stderr, "in f\n") ||
				!strings.HasSuffix(r.res.Stderr, "ValueError: boom\n") || r.res.Stderr != tb || ce.Stderr != r.res.Stderr {
				t.Errorf("%s: stderr = %q, CommandError.Stderr = %q; want the traceback %q", what, r.res.Stderr, ce.Stderr, tb)
			}
			if !strings.Contains(ce.Error(), "ValueError: boom") {
				t.Errorf("%s: error message %q does not name the exception", what, ce.Error())
			}
			if r := got[3]; r.err != nil || r.res.ExitCode != 1 || r.res.Exception == nil || r.res.Exception.Name != "KeyError" ||
				!strings.HasSuffix(r.res.Stderr, "KeyError: 'k'\n") {
				t.Errorf("%s: non-strict exception = %+v, %v; want exit 1, KeyError, no error", what, r.res, r.err)
			}
			if r := got[4]; r.err != nil || r.res.ExitCode != 3 || r.res.Exception == nil || r.res.Exception.Name != "SystemExit" {
				t.Errorf("%s: sys.exit(3) = %+v, %v; want exit 3", what, r.res, r.err)
			}
			if r := got[5]; r.err != nil || r.res.Stdout != "20\n" || r.res.Value != "" || r.res.Exception != nil {
				t.Errorf("%s: after the exceptions = %+v, %v", what, r.res, r.err)
			}
		}
		check("live", live)

		// Pipe streams the traceback to stderr, and ends with the error.
		var stdout, stderr strings.Builder
		err = py.Run(ctx, "1/0").Pipe(&stdout, &stderr)
		var ce *alineo.CommandError
		if !errors.As(err, &ce) || ce.Exception == nil || ce.Exception.Name != "ZeroDivisionError" ||
			!strings.HasSuffix(stderr.String(), "ZeroDivisionError: division by zero\n") {
			t.Fatalf("Pipe = %v, stderr %q; want a ZeroDivisionError", err, stderr.String())
		}

		// Recorded as the TypeScript SDK records execd's events.
		var recorded []string
		for _, en := range e.rows(t, sb) {
			if en.Event != events.ExecOutput {
				continue
			}
			var p struct {
				Type    string
				Results map[string]any
				Error   *opensandbox.ExecError
			}
			if err := json.Unmarshal(en.Payload, &p); err != nil {
				t.Fatal(err)
			}
			switch p.Type {
			case "result":
				recorded = append(recorded, fmt.Sprintf("%d result %v", en.StepIndex, p.Results["text"]))
			case "error":
				recorded = append(recorded, fmt.Sprintf("%d error %s %s traceback %t", en.StepIndex, p.Error.EName, p.Error.EValue, len(p.Error.Traceback) > 0))
			}
		}
		want := []string{"1 result 42", "2 result 'ab'", "3 error ValueError boom traceback true", "4 error KeyError 'k' traceback true",
			"5 error SystemExit 3 traceback true", "7 error ZeroDivisionError division by zero traceback true"}
		if !slices.Equal(recorded, want) {
			t.Fatalf("recorded result and error rows:\n%s\nwant\n%s", strings.Join(recorded, "\n"), strings.Join(want, "\n"))
		}

		// A resumed handle replays all of it, without reaching execd.
		if _, err := sb.Checkpoint(ctx, "told"); err != nil {
			t.Fatal(err)
		}
		r, err := e.client.Resume(ctx, sb.ID(), alineo.ResumeOptions{Name: sb.Name()})
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, r)
		before := cc.n.Load()
		var replayed []outcome
		for _, call := range calls {
			res, err := r.ExecCode(ctx, call.code, alineo.CodeOptions{Language: "python", Strict: call.opts.Strict}).Wait()
			replayed = append(replayed, outcome{res, err})
		}
		if n := cc.n.Load() - before; n != 0 {
			t.Fatalf("replay sent %d runs to execd, want 0", n)
		}
		check("replayed", replayed)
	})
}
