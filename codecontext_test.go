package alineo_test

import (
	"errors"
	"os/exec"
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
