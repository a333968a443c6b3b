package projectorcmd_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// readmeMain returns the main.go of a user's projector that the README shows.
func readmeMain(t *testing.T, root string) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- projector main.go")
	if !ok {
		t.Fatal("README.md has no <!-- projector main.go --> block")
	}
	_, rest, _ = strings.Cut(rest, "```go\n")
	code, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		t.Fatal("README.md's projector main.go block does not end")
	}
	return code
}

// moduleRoot is the directory of this module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// TestUserModule (issue 40 item 1): the README's main.go, in a module of
// its own outside this repository (a replace directive points at it), builds
// into a projector that lists its projection, rebuilds it from a recorded
// stream (the seed-schema ledger fixture, published to NATS) into rows equal
// to the recorded execs, and names both modules' versions.
func TestUserModule(t *testing.T) {
	root := moduleRoot(t)
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := ""
	for line := range strings.SplitSeq(string(goMod), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			goVersion = v
		}
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": fmt.Sprintf("module example.com/myprojector\n\ngo %s\n\nrequire github.com/alineo-labs/alineo v0.0.0-00010101000000-000000000000\n\n"+
			"replace github.com/alineo-labs/alineo => %s\n", goVersion, root),
		"main.go": readmeMain(t, root),
	}
	// This module's sums are the user module's too: the same dependencies.
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files["go.sum"] = string(sum)
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "myprojector")
	args := []string{"build", "-mod=mod", "-o", bin}
	if raceEnabled {
		args = append(args, "-race") // the dependencies are compiled so already
	}
	build := exec.Command("go", append(args, ".")...)
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of a user's projector module: %v\n%s", err, out)
	}

	want := publishFixture(t)
	url := want.url
	db := filepath.Join(dir, "results.db")
	runBin := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "NATS_URL=", "DATABASE_URL=", "PGHOST=", "PGDATABASE=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("myprojector %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := runBin("list"); !strings.Contains(out, "exec-results") || !strings.Contains(out, "tables") {
		t.Errorf("list = %q, want exec-results and tables", out)
	}
	if out := runBin("--version"); !strings.Contains(out, "example.com/myprojector") || !strings.Contains(out, "github.com/alineo-labs/alineo") {
		t.Errorf("--version = %q, want both modules", out)
	}
	out := runBin("--projection", "exec-results", "rebuild", "--nats", url, "--sqlite", db)
	if !strings.Contains(out, fmt.Sprintf("(exec-results): %d entries", len(want.execs))) {
		t.Errorf("rebuild printed %q, want %d entries", out, len(want.execs))
	}
	conn, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rows, err := conn.Query(`SELECT name, sandbox_id, exit_code FROM exec_results ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var name, id string
		var code int
		if err := rows.Scan(&name, &id, &code); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s/%s=%d", name, id, code))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want.execs) {
		t.Errorf("exec_results = %q\nwant the recorded execs %q", got, want.execs)
	}
	if !slices.Contains(got, "ci-job/sbx-a1=1") {
		t.Errorf("exec_results = %q, want ci-job's failed exec (exit 1)", got)
	}
}

// recorded is a stream published from a recorded ledger.
type recorded struct {
	url   string
	execs []string // name/sandbox=exit of every exec.completed, in stream order
}

// publishFixture publishes the seed-schema ledger fixture's sessions to a
// fresh NATS server, each session's entries in their recorded order.
func publishFixture(t *testing.T) recorded {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(testenv.Fixture(t, "seed-schema-ledger.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sessions, err := store.ListAllSandboxDetails(ctx, adapters.ListOptions{})
	if err != nil || len(sessions) == 0 {
		t.Fatalf("fixture sessions = %v, %v", sessions, err)
	}
	rec := recorded{url: testenv.NATS(t)}
	b, err := bus.Open(ctx, bus.Config{URL: rec.url})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, s := range sessions {
		es, err := store.ReadAll(ctx, s.Name, s.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		for i := range es {
			es[i].Seq = 0
			if es[i].Event.Canonical() == events.ExecCompleted {
				var p events.ExecCompletedPayload
				if err := json.Unmarshal(es[i].Payload, &p); err != nil {
					t.Fatal(err)
				}
				rec.execs = append(rec.execs, fmt.Sprintf("%s/%s=%d", es[i].Name, es[i].SandboxID, p.ExitCode))
			}
		}
		if err := l.AppendBatch(ctx, es); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return rec
}
