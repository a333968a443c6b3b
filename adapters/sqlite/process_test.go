package sqlite_test

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

const helperEnv = "ALINEO_SQLITE_HELPER_PATH"

// TestHelperProcess is the child of TestProcessesStartAtOnce: one process
// appending one session to the shared file.
func TestHelperProcess(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("the child process of TestProcessesStartAtOnce")
	}
	s := open(t, path)
	id := os.Getenv(helperEnv + "_ID")
	if err := s.Append(t.Context(), created(1, "proc", id)); err != nil {
		t.Fatal(err)
	}
	for j := range 30 {
		e := events.New(int64(2+j), "proc", id, 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1})
		if err := s.Append(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProcessesStartAtOnce starts several processes on one new file in a new
// folder at the same moment: creating the folder, migrating and switching to
// WAL must all survive the race.
func TestProcessesStartAtOnce(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in a child")
	}
	path := testenv.SQLitePath(t)
	const procs = 4
	var wg sync.WaitGroup
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), helperEnv+"="+path, fmt.Sprintf("%s_ID=p%d", helperEnv, i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for i := range procs {
		if errs[i] != nil {
			t.Fatalf("process %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	s := open(t, path)
	all, err := s.ListAllSandboxDetails(t.Context(), adapters.ListOptions{})
	if err != nil || len(all) != procs {
		t.Fatalf("ListAllSandboxDetails = %+v, %v; want %d sessions", all, err, procs)
	}
	for _, d := range all {
		if d.ExecCount != 30 {
			t.Fatalf("session %s: ExecCount %d, want 30", d.SandboxID, d.ExecCount)
		}
	}
}
