package audit_test

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/audit"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

const killEnv = "ALINEO_AUDIT_KILL_PATH"

// TestKillHelper is the child of TestKillBetweenAppends: it appends to three
// sessions from three goroutines, alone and in batches, until it is killed.
func TestKillHelper(t *testing.T) {
	path := os.Getenv(killEnv)
	if path == "" {
		t.Skip("the child process of TestKillBetweenAppends")
	}
	s, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("s%d", g)
			for i := 1; ; i++ {
				out := events.New(time.Now().UnixMilli(), "kill", id, i, events.ExecOutput, events.NewOutput(i, events.Stdout, []byte("chunk\n")))
				done := events.New(time.Now().UnixMilli(), "kill", id, i, events.ExecCompleted, events.ExecCompletedPayload{Seq: i})
				var err error
				if i%2 == 0 {
					err = s.AppendBatch(t.Context(), []events.Entry{out, done})
				} else if err = s.Append(t.Context(), out); err == nil {
					err = s.Append(t.Context(), done)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestKillBetweenAppends kills a process appending to a SQLite ledger at
// random moments (SIGKILL: no Close, no flush), then resumes the sessions
// from another Store: every chain holds, each entry having committed with
// its hash and its session's head.
func TestKillBetweenAppends(t *testing.T) {
	if os.Getenv(killEnv) != "" {
		t.Skip("in a child")
	}
	path := filepath.Join(t.TempDir(), "kill.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows := func() int {
		var n int
		_ = db.QueryRow(`SELECT count(*) FROM alineo_events`).Scan(&n)
		return n
	}
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), killEnv+"="+path)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		before := rows()
		testenv.Eventually(t, 20*time.Second, func() error {
			if n := rows(); n < before+200 {
				return fmt.Errorf("%d rows, want %d", n, before+200)
			}
			return nil
		})
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		// Resume: another writer continues every session.
		s, err := sqlite.Open(path, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		for g := range 3 {
			e := events.New(time.Now().UnixMilli(), "kill", fmt.Sprintf("s%d", g), events.SandboxLevel, events.SandboxResumed, nil)
			if err := s.Append(t.Context(), e); err != nil {
				t.Fatal(err)
			}
		}
		res, err := audit.Verify(t.Context(), s, audit.Filter{}, audit.Options{})
		s.Close()
		if err != nil || len(res.Sessions) != 3 {
			t.Fatalf("round %d, after a kill at %d rows and a resume: %+v, %v", round, res.Entries, res, err)
		}
		for _, ss := range res.Sessions {
			if ss.State != audit.Chained || ss.Unchained != 0 {
				t.Fatalf("round %d: %s", round, ss)
			}
		}
	}
}
