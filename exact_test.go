package alineo_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
)

// TestExactOutputRecorded: against sandboxd (which has the exact-output
// extension) the ledger and the result hold every byte as the command wrote
// it; against the line format (a server without the extension) the lossy
// reconstruction stays.
func TestExactOutputRecorded(t *testing.T) {
	e := newEnv(t, memory.New())
	ctx := testCtx(t)
	sb := e.sandbox(t, ctx, alineo.SandboxOptions{})
	ledgerBytes := func(ex *alineo.Exec) []byte {
		var b bytes.Buffer
		for _, en := range e.rows(t, sb) {
			if en.Event == events.ExecOutput && en.StepIndex == ex.Step() {
				var p events.ExecOutputPayload
				if err := en.Decode(&p); err != nil {
					t.Fatal(err)
				}
				b.Write(p.Bytes())
			}
		}
		return b.Bytes()
	}
	for _, tc := range []struct {
		name, cmd, exact, lines string
	}{
		{"unterminated", `printf 'abc'`, "abc", "abc\n"},
		{"carriage returns", `printf 'a\rb\r\nc\n'`, "a\rb\r\nc\n", "a\nb\nc\n"},
		{"not utf-8", `printf 'x\377y'`, "x\xffy", "x\xffy\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, lines := range []bool{false, true} {
				alineo.SetLineOutput(sb, lines)
				want := tc.exact
				if lines {
					want = tc.lines
				}
				ex := sb.Exec(ctx, tc.cmd)
				res, err := ex.Wait()
				if err != nil {
					t.Fatal(err)
				}
				if res.Stdout != want {
					t.Errorf("lines=%v: stdout = %q, want %q", lines, res.Stdout, want)
				}
				if got := ledgerBytes(ex); string(got) != want {
					t.Errorf("lines=%v: ledger = %q, want %q", lines, got, want)
				}
			}
			alineo.SetLineOutput(sb, false)
		})
	}
	// A 5 MiB line gains no newline at execd's 4 MiB cut.
	ex := sb.Exec(ctx, `head -c 5242880 /dev/zero | tr '\0' x`)
	res, err := ex.Wait()
	if err != nil || len(res.Stdout) != 5<<20 || strings.Contains(res.Stdout, "\n") {
		t.Errorf("5 MiB line: %d bytes, newline at %d, %v", len(res.Stdout), strings.Index(res.Stdout, "\n"), err)
	}
	// Python code keeps its newlines, in the result and in the ledger.
	py := sb.ExecCode(ctx, "print('a')\nprint('b')", alineo.CodeOptions{Language: "python"})
	res, err = py.Wait()
	if err != nil || res.Stdout != "a\nb\n" {
		t.Errorf("python stdout = %q, %v; want \"a\\nb\\n\"", res.Stdout, err)
	}
	if got := ledgerBytes(py); string(got) != "a\nb\n" {
		t.Errorf("python ledger = %q", got)
	}
}
