package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/testenv"
)

func writeSpec(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.json")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const helloJob = `{"name":"hello","image":"host","steps":[
	{"writeFile":{"path":"/root/j/a.txt","content":"alpha"}},
	{"exec":{"command":"cat /root/j/a.txt; echo"}},
	{"exec":{"command":"exit 2","strict":false}}]}`

// TestRunJobEmbedded runs a job with every default embedded but the sandbox
// server (testenv's, so isolation is checked the same way) and finds it in
// the SQLite read model afterwards.
func TestRunJobEmbedded(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "alineo.db")
	env := map[string]string{"OPEN_SANDBOX_URL": testenv.Sandboxd(t)}
	out := &testutil.SyncBuffer{}
	err := run(context.Background(), []string{"run", "--nats-dir", filepath.Join(dir, "nats"), "--sqlite", db, writeSpec(t, helloJob)},
		func(k string) string { return env[k] }, out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	for _, want := range []string{"[hello 2/3] done", "  | alpha", "job hello succeeded: 3 steps", "projected into sqlite"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	store, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ds, err := store.ListSandboxDetails(context.Background(), "hello", adapters.ListOptions{})
	if err != nil || len(ds) != 1 {
		t.Fatalf("details = %v, %v; want one session", ds, err)
	}
	if d := ds[0]; d.Status != adapters.StatusCompleted || d.ExecCount != 2 {
		t.Errorf("session = %+v, want completed with 2 execs", d)
	}
}

func TestRunBadInput(t *testing.T) {
	noenv := func(string) string { return "" }
	tests := []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"fly"}, "unknown command"},
		{[]string{"run"}, "want 1 argument"},
		{[]string{"run", "a", "b"}, "want 1 argument"},
		{[]string{"run", writeSpec(t, `{"name":"x","image":"i","steps":[{"exec":{"cmd":"x"}}]}`)}, `steps[0].exec.cmd: unknown field "cmd"`},
		{[]string{"run", filepath.Join(t.TempDir(), "missing.json")}, "no such file"},
		{[]string{"work", "--log-level", "loud"}, "--log-level"},
	}
	for _, tt := range tests {
		err := run(context.Background(), tt.args, noenv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
	var se *jobs.SpecError
	err := run(context.Background(), []string{"submit", writeSpec(t, `{"name":"x"}`)}, noenv, io.Discard)
	if !errors.As(err, &se) {
		t.Errorf("submit of a bad spec = %v, want a *jobs.SpecError", err)
	}
}

// TestSubmitAndWork: submit publishes to ALINEO_JOBS, a worker runs the job,
// status reports it succeeded, and cancelling the worker drains it.
func TestSubmitAndWork(t *testing.T) {
	natsURL := testenv.NATS(t)
	env := map[string]string{"NATS_URL": natsURL, "OPEN_SANDBOX_URL": testenv.Sandboxd(t)}
	getenv := func(k string) string { return env[k] }
	out := &testutil.SyncBuffer{}
	if err := run(context.Background(), []string{"submit", writeSpec(t, helloJob)}, getenv, out); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out.String())
	if !jobs.ValidID(id) {
		t.Fatalf("submit printed %q, want a job id", id)
	}
	w := testutil.Start(t, run, []string{"work", "--id", "w1"}, getenv)
	testenv.Eventually(t, 30*time.Second, func() error {
		sout := &testutil.SyncBuffer{}
		if err := run(context.Background(), []string{"status", id}, getenv, sout); err != nil {
			return err
		}
		if !strings.Contains(sout.String(), ": succeeded (attempt 1, 3/3 steps") {
			return fmt.Errorf("status: %s", sout)
		}
		return nil
	})
	if err := w.Stop(t, 15*time.Second); err != nil { // the worker drains
		t.Fatalf("work: %v", err)
	}
	if !strings.Contains(w.Out.String(), "executor drained") || !strings.Contains(w.Out.String(), id[:8]+" hello 3/3] done") {
		t.Errorf("worker output:\n%s", w.Out)
	}
	// The job left the work queue.
	b, err := bus.Open(context.Background(), bus.Config{URL: natsURL})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q, err := jobs.OpenQueue(context.Background(), b.JetStream(), jobs.QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := q.Pending(context.Background()); err != nil || n != 0 {
		t.Errorf("pending = %d, %v; want 0", n, err)
	}
}

// TestFlagsAnywhere: flags before the command and after its argument
// ("executor status ID -o json") parse alike.
func TestFlagsAnywhere(t *testing.T) {
	natsURL := testenv.NATS(t)
	noenv := func(string) string { return "" }
	out := &testutil.SyncBuffer{}
	if err := run(context.Background(), []string{"--nats", natsURL, "submit", writeSpec(t, helloJob)}, noenv, out); err != nil {
		t.Fatalf("flags before the command: %v", err)
	}
	id := strings.TrimSpace(out.String())
	out = &testutil.SyncBuffer{}
	if err := run(context.Background(), []string{"status", id, "-o", "json", "--nats", natsURL}, noenv, out); err != nil {
		t.Fatalf("flags after the argument: %v", err)
	}
	var st jobs.Status
	if err := json.Unmarshal([]byte(out.String()), &st); err != nil || st.ID != id || st.State != jobs.StateQueued {
		t.Errorf("status -o json = %+v, %v (%q); want job %s queued", st, err, out, id)
	}
}

// TestWorkMetrics (issue 40 item 8): work --metrics serves the executor's
// metrics (jobs running, steps, takeovers, leases lost) in a Prometheus
// exposition that lints clean, and /healthz.
func TestWorkMetrics(t *testing.T) {
	natsURL := testenv.NATS(t)
	env := map[string]string{"NATS_URL": natsURL, "OPEN_SANDBOX_URL": testenv.Sandboxd(t)}
	getenv := func(k string) string { return env[k] }
	w := testutil.Start(t, run, []string{"work", "--id", "w1", "--metrics", "127.0.0.1:0"}, getenv)
	var base string
	testenv.Eventually(t, 20*time.Second, func() error {
		m, err := w.Match(regexp.MustCompile(`metrics on (http://\S+)/metrics`))
		if err != nil {
			return err
		}
		base = m[1]
		return nil
	})
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != http.StatusOK || !strings.Contains(body, `"ok"`) {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	out := &testutil.SyncBuffer{}
	if err := run(context.Background(), []string{"submit", writeSpec(t, helloJob)}, getenv, out); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		_, body := get("/metrics")
		if !strings.Contains(body, `alineo_executor_steps_total{state="done"} 3`+"\n") || !strings.Contains(body, "alineo_executor_jobs_running 0\n") {
			return fmt.Errorf("the job's 3 steps not yet counted, or the job not yet settled:\n%s", grepLines(body, "alineo_executor_"))
		}
		return nil
	})
	_, body := get("/metrics")
	for _, want := range []string{"alineo_executor_takeovers_total 0\n",
		"alineo_executor_leases_lost_total 0\n", `alineo_executor_steps_total{state="failed"} 0` + "\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grepLines(body, "alineo_executor_"))
		}
	}
	// What promtool check metrics checks, with the same linter.
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("lint: %v", err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "alineo_") {
			t.Errorf("metric %s: %s", p.Metric, p.Text)
		}
	}
	testenv.PromtoolCheck(t, body) // and promtool itself, on the whole exposition
	if err := w.Stop(t, 15*time.Second); err != nil {
		t.Fatalf("work: %v", err)
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(l, prefix) || strings.HasPrefix(l, "# HELP "+prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
