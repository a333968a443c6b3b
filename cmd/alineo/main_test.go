package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/api/apitest"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/internal/usage"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/testenv"
)

const token = "cli-token"

func envOf(e *apitest.Env) func(string) string {
	m := map[string]string{"ALINEO_API_URL": e.URL, "ALINEO_API_TOKEN": e.Token}
	return func(k string) string { return m[k] }
}

// cli runs the CLI to its end and returns its output.
func runCLI(t *testing.T, getenv func(string) string, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(context.Background(), args, getenv, &out); err != nil {
		t.Fatalf("alineo %q: %v\n%s", args, err, out.String())
	}
	return out.String()
}

func TestSandboxesAndShow(t *testing.T) {
	e := apitest.New(t, token)
	e.Session("build", "sb1", 2, true)
	e.Session("build", "sb2", 1, false)
	e.Session("deploy", "sb3", 1, false)
	e.WaitProjected()
	getenv := envOf(e)

	out := runCLI(t, getenv, "sandboxes")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "NAME") {
		t.Fatalf("table = %q, want a header and 3 rows", out)
	}
	// Aligned: every row's STATUS column starts where the header's does.
	col := strings.Index(lines[0], "STATUS")
	for _, l := range lines[1:] {
		if len(l) < col || (l[col:] != "running" && l[col:] != "completed") {
			t.Errorf("row %q: status not at column %d", l, col)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("colour on a non-terminal: %q", out)
	}

	var ds []adapters.SandboxDetails
	if err := json.Unmarshal([]byte(runCLI(t, getenv, "sandboxes", "-o", "json", "--status", "running")), &ds); err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 {
		t.Errorf("running = %+v, want 2", ds)
	}
	out = runCLI(t, getenv, "sandboxes", "-o", "jsonl", "--name", "build")
	if n := strings.Count(out, "\n"); n != 2 {
		t.Errorf("jsonl = %q, want 2 lines", out)
	}
	if out := runCLI(t, getenv, "sandboxes", "-o", "json", "--name", "nobody"); strings.TrimSpace(out) != "[]" {
		t.Errorf("empty list as json = %q, want []", out)
	}

	var d adapters.SandboxDetails
	if err := json.Unmarshal([]byte(runCLI(t, getenv, "show", "build", "sb1", "-o", "json")), &d); err != nil {
		t.Fatal(err)
	}
	if d.Status != adapters.StatusCompleted || d.ExecCount != 2 {
		t.Errorf("show = %+v, want completed with 2 execs", d)
	}
	if out := runCLI(t, getenv, "show", "build", "sb1"); !strings.Contains(out, "status:") || !strings.Contains(out, "completed") {
		t.Errorf("show table = %q", out)
	}
	var buf bytes.Buffer
	err := run(context.Background(), []string{"show", "build", "nope"}, getenv, &buf)
	if err == nil || usage.Code(err) != 1 || !strings.Contains(err.Error(), "not_found") {
		t.Errorf("show unknown = %v, want a not_found error (exit 1)", err)
	}
	// A wrong token says how to set it.
	bad := func(k string) string {
		if k == "ALINEO_API_TOKEN" {
			return "wrong"
		}
		return getenv(k)
	}
	if err := run(context.Background(), []string{"sandboxes"}, bad, &buf); err == nil || !strings.Contains(err.Error(), "ALINEO_API_TOKEN") {
		t.Errorf("wrong token = %v, want a hint naming ALINEO_API_TOKEN", err)
	}
	// Flags beat the variables.
	if out := runCLI(t, func(string) string { return "" }, "sandboxes", "--url", e.URL, "--token", token, "-o", "jsonl"); strings.Count(out, "\n") != 3 {
		t.Errorf("--url/--token: %q", out)
	}
}

// TestEventsFollow: events -f prints the history, then new events live, and
// after the connection drops resumes with Last-Event-ID: nothing lost or
// repeated.
func TestEventsFollow(t *testing.T) {
	e := apitest.New(t, token)
	e.Session("svc", "sbf", 1, false)
	e.Session("other", "sbo", 1, false)
	e.WaitProjected()
	getenv := envOf(e)

	out := runCLI(t, getenv, "events", "svc", "sbf")
	if n := strings.Count(out, "\n"); n != 5 || !strings.Contains(out, "$ echo 1") || !strings.Contains(out, "exit 0") {
		t.Errorf("events = %q, want a header and 4 rows", out)
	}
	var es []events.Entry
	if err := json.Unmarshal([]byte(runCLI(t, getenv, "events", "svc", "sbf", "-o", "json")), &es); err != nil || len(es) != 4 {
		t.Fatalf("events json: %d, %v", len(es), err)
	}

	follow := testutil.Start(t, run, []string{"events", "svc", "sbf", "-f", "-o", "jsonl"}, getenv)
	buf := follow.Out
	seqs := func() []uint64 {
		var out []uint64
		for l := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
			var en events.Entry
			if json.Unmarshal([]byte(l), &en) == nil {
				if en.Name != "svc" {
					t.Errorf("followed an event of another session: %s", l)
				}
				out = append(out, en.Seq)
			}
		}
		return out
	}
	waitN := func(n int) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, func() error {
			if got := len(seqs()); got != n {
				return fmt.Errorf("%d events followed, want %d: %s", got, n, buf.String())
			}
			return nil
		})
	}
	waitN(4)
	e.Publish("svc", "sbf", events.New(0, "", "", 2, events.ExecStarted, events.ExecStartedPayload{Kind: events.KindCommand, Cmd: "echo live"}))
	waitN(5)
	e.Server.CloseClientConnections() // the drop
	e.Publish("svc", "sbf", events.New(0, "", "", 2, events.ExecCompleted, events.ExecCompletedPayload{ExitCode: 3}))
	e.Publish("svc", "sbf", events.New(0, "", "", events.SandboxLevel, events.SandboxClosed, nil))
	waitN(7)
	got := seqs()
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Errorf("sequences not increasing (lost or repeated): %v", got)
		}
	}
	// The session's sandbox.closed ended it.
	if err := follow.Wait(t, 10*time.Second); err != nil {
		t.Errorf("events -f ended with %v, want nil at the session's close", err)
	}
}

// TestEventsFollowEndsAtClose (issue 40 item 6): events -f ends when the
// session closes, at once for a session closed already; --keep follows on
// until Ctrl-C.
func TestEventsFollowEndsAtClose(t *testing.T) {
	e := apitest.New(t, token)
	e.Session("done", "sbd", 1, true)
	e.Session("live", "sbl", 1, false)
	e.Session("kept", "sbk", 1, false)
	e.WaitProjected()
	getenv := envOf(e)

	closedAlready := testutil.Start(t, run, []string{"events", "done", "sbd", "-f"}, getenv)
	if err := closedAlready.Wait(t, 10*time.Second); err != nil || !strings.Contains(closedAlready.Out.String(), "sandbox.closed") {
		t.Errorf("events -f of a closed session = %v, %q; want its events and an end", err, closedAlready.Out)
	}

	live := testutil.Start(t, run, []string{"events", "live", "sbl", "-f", "-o", "jsonl"}, getenv)
	kept := testutil.Start(t, run, []string{"events", "kept", "sbk", "-f", "--keep", "-o", "jsonl"}, getenv)
	for _, r := range []*testutil.Run{live, kept} {
		testenv.Eventually(t, 10*time.Second, func() error {
			if n := strings.Count(r.Out.String(), "\n"); n != 4 {
				return fmt.Errorf("%d events followed, want 4: %s", n, r.Out)
			}
			return nil
		})
	}
	e.Publish("live", "sbl", events.New(0, "", "", events.SandboxLevel, events.SandboxClosed, nil))
	e.Publish("kept", "sbk", events.New(0, "", "", events.SandboxLevel, events.SandboxClosed, nil))
	if err := live.Wait(t, 10*time.Second); err != nil {
		t.Errorf("events -f ended with %v, want nil at the close", err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(kept.Out.String(), "sandbox.closed") {
			return fmt.Errorf("--keep has not printed the close yet: %s", kept.Out)
		}
		return nil
	})
	// Still following after the close: what comes next on the id is printed.
	e.Publish("kept", "sbk", events.New(0, "", "", events.SandboxLevel, events.CredentialRevoked, events.CredentialPayload{Name: "tok"}))
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(kept.Out.String(), "credential.revoked") {
			return fmt.Errorf("--keep stopped following: %s", kept.Out)
		}
		return nil
	})
	if kept.Returned() {
		t.Error("events -f --keep ended at the close")
	}
	if err := kept.Stop(t, 10*time.Second); err != nil {
		t.Errorf("events -f --keep ended with %v, want nil on Ctrl-C", err)
	}
}

// TestTail: tail follows the whole stream, filtered by --event.
func TestTail(t *testing.T) {
	e := apitest.New(t, token)
	getenv := envOf(e)
	tail := testutil.Start(t, run, []string{"tail", "--event", "exec.started"}, getenv)
	buf := tail.Out
	testenv.Eventually(t, 10*time.Second, func() error {
		e.Session("a", "sba", 1, true)
		if !strings.Contains(buf.String(), "$ echo 1") {
			return fmt.Errorf("tail: %q", buf.String())
		}
		return nil
	})
	e.Session("b", "sbb", 1, false)
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(buf.String(), "b/sbb") {
			return fmt.Errorf("tail: %q", buf.String())
		}
		return nil
	})
	if strings.Contains(buf.String(), "exec.completed") || strings.Contains(buf.String(), "sandbox.created") {
		t.Errorf("tail --event exec.started printed other events: %q", buf.String())
	}
	if err := tail.Stop(t, 30*time.Second); err != nil {
		t.Errorf("tail ended with %v", err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"tail", "--event", "exec.nope"}, getenv, &out); err == nil {
		t.Error("tail with an unknown event succeeded")
	}
}

// TestFlagsAnywhere: the flags every command takes work before the
// command, and a command's own flags after its arguments.
func TestFlagsAnywhere(t *testing.T) {
	e := apitest.New(t, token)
	e.Session("build", "sb1", 2, true)
	e.WaitProjected()
	noenv := func(string) string { return "" }
	var d adapters.SandboxDetails
	out := runCLI(t, noenv, "--url", e.URL, "--token="+e.Token, "show", "build", "sb1", "-o", "json")
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.SandboxID != "sb1" {
		t.Fatalf("show with the flags before it = %+v, %v (%q)", d, err, out)
	}
	out = runCLI(t, noenv, "-o", "jsonl", "sandboxes", "--url", e.URL, "--name", "build", "--token", e.Token)
	if n := strings.Count(out, "\n"); n != 1 {
		t.Errorf("sandboxes with flags on both sides = %q, want 1 line", out)
	}
}

func TestJobs(t *testing.T) {
	e := apitest.New(t, token)
	getenv := envOf(e)
	dir := t.TempDir()
	file := filepath.Join(dir, "job.json")
	if err := os.WriteFile(file, []byte(`{"name":"cli-job","image":"ubuntu:22.04","steps":[{"exec":{"command":"true"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(runCLI(t, getenv, "job", "submit", file))
	if !jobs.ValidID(id) {
		t.Fatalf("job submit printed %q, want a job id", id)
	}
	out := runCLI(t, getenv, "jobs")
	if !strings.Contains(out, id) || !strings.Contains(out, "cli-job") || !strings.Contains(out, "queued") {
		t.Errorf("jobs = %q, want the submitted job queued", out)
	}
	var sts []jobs.Status
	if err := json.Unmarshal([]byte(runCLI(t, getenv, "jobs", "-o", "json")), &sts); err != nil || len(sts) != 1 || sts[0].ID != id {
		t.Errorf("jobs json = %+v, %v", sts, err)
	}
	var st jobs.Status
	if err := json.Unmarshal([]byte(runCLI(t, getenv, "job", "status", id, "-o", "json")), &st); err != nil || st.Name != "cli-job" {
		t.Errorf("job status = %+v, %v", st, err)
	}
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`{"name":"x","image":"i","steps":[{"exec":{"comand":"x"}}]}`), 0o644)
	var buf bytes.Buffer
	if err := run(context.Background(), []string{"job", "submit", bad}, getenv, &buf); err == nil || strings.Count(err.Error(), "steps[0].exec.comand") != 1 {
		t.Errorf("bad spec = %v, want the offending path, once", err)
	}
	_ = os.WriteFile(bad, []byte("{\n  \"name\": \"x\",\n  \"image\" \"i\"\n}"), 0o644)
	if err := run(context.Background(), []string{"job", "submit", bad}, getenv, &buf); err == nil || !strings.Contains(err.Error(), bad+": job spec: line 3, column 11: not valid JSON") {
		t.Errorf("spec with a syntax error = %v, want its file, line and column", err)
	}
}

func TestHelpAndUsageErrors(t *testing.T) {
	noenv := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"-h"}, 0, []string{"usage: alineo", "\n  sandboxes ", "\n  show ", "\n  events ", "\n  tail ", "\n  jobs ", "\n  job submit "}},
		{[]string{"--help"}, 0, []string{"tail"}},
		{[]string{"help"}, 0, []string{"tail"}},
		{[]string{"events", "-h"}, 0, []string{"usage: alineo events", "-f", "-url", "-token", "-o"}},
		{[]string{"sandboxes", "--help"}, 0, []string{"-status", "-run-id"}},
		{nil, 2, nil},
		{[]string{"nope"}, 2, nil},
		{[]string{"show", "onlyname"}, 2, nil},
		{[]string{"sandboxes", "--nope"}, 2, nil},
		{[]string{"sandboxes", "-o", "yaml"}, 2, nil},
		{[]string{"job", "frob", "x"}, 2, nil},
		{[]string{"sandboxes", "--url", "ftp://x"}, 2, nil},
		{[]string{"--url", "ftp://x", "sandboxes"}, 2, nil},
		{[]string{"--version"}, 0, []string{"alineo "}},
		{[]string{"version"}, 0, []string{"alineo "}},
		{[]string{"events", "--version"}, 0, []string{"alineo "}},
		{[]string{"-o", "json"}, 2, nil},
	} {
		var out bytes.Buffer
		err := run(context.Background(), tc.args, noenv, &out)
		if got := usage.Code(err); got != tc.code {
			t.Errorf("run(%q): exit %d (%v), want %d", tc.args, got, err, tc.code)
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("run(%q) printed %q, want %q", tc.args, out.String(), w)
			}
		}
	}
}

// TestEventsActor: the events table has an ACTOR column ("-" for none), and
// the JSON output carries each entry's actor.
func TestEventsActor(t *testing.T) {
	e := apitest.New(t, token)
	getenv := envOf(e)
	es := []events.Entry{
		events.New(0, "", "", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sbact"}),
		events.New(0, "", "", 1, events.ExecStarted, events.ExecStartedPayload{Kind: events.KindCommand, Cmd: "make"}),
		events.New(0, "", "", 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1}),
	}
	es[1].Actor, es[2].Actor = "zoë via executor-12345678901", "zoë via executor-12345678901"
	e.Publish("ci", "sbact", es...)
	e.WaitProjected()
	out := runCLI(t, getenv, "events", "ci", "sbact")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "ACTOR") {
		t.Fatalf("events table:\n%s", out)
	}
	if !strings.Contains(lines[1], " - ") || !strings.Contains(lines[2], "zoë via executor-1234…") {
		t.Errorf("events table rows lack the actor:\n%s", out)
	}
	var got []events.Entry
	if err := json.Unmarshal([]byte(runCLI(t, getenv, "events", "ci", "sbact", "-o", "json")), &got); err != nil || len(got) != 3 {
		t.Fatalf("events -o json = %v, %v", got, err)
	}
	for i := range got {
		if got[i].Actor != es[i].Actor {
			t.Errorf("entry %d: actor %q, want %q", i, got[i].Actor, es[i].Actor)
		}
	}
}
