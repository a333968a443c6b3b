package projections_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/bus/bustest"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/testenv"
)

// Environment of the projector helper process (this test binary re-executed).
const (
	helperEnv   = "ALINEO_TEST_PROJECTOR_HELPER"
	helperDB    = "ALINEO_TEST_PROJECTOR_DB"
	helperNATS  = "ALINEO_TEST_PROJECTOR_NATS"
	helperBatch = "ALINEO_TEST_PROJECTOR_BATCH"
)

// TestProjectorHelperProcess is not a test: it is the projector process of
// TestReliabilityProjectorKill, run when helperEnv is set.
func TestProjectorHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process only")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	b, err := bus.Open(ctx, bus.Config{URL: os.Getenv(helperNATS)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: open bus:", err)
		os.Exit(2)
	}
	defer b.Close()
	s, err := sqlite.Open(os.Getenv(helperDB), sqlite.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: open sqlite:", err)
		os.Exit(2)
	}
	defer s.Close()
	batch, _ := strconv.Atoi(os.Getenv(helperBatch))
	p := &projections.Projector{Bus: b, Store: s, BatchSize: batch}
	if err := p.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "helper: run:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

func startHelper(t *testing.T, natsURL, db string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestProjectorHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperNATS+"="+natsURL, helperDB+"="+db, helperBatch+"=500")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start projector process: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		}
	})
	return cmd
}

func loadSize(full, short int) int {
	if testing.Short() || raceEnabled {
		return short
	}
	return full
}

// TestReliabilityProjectorKill SIGKILLs the projector process in the middle of
// a 200k-event load and restarts it: the projection equals a fresh rebuild
// row for row.
func TestReliabilityProjectorKill(t *testing.T) {
	n := loadSize(200_000, 30_000)
	natsURL := testenv.NATS(t)
	b := openBus(t, bus.Config{URL: natsURL})
	l := newLedger(t, b, bus.LedgerConfig{MaxPending: 4096, AckTimeout: time.Minute})
	db := testenv.SQLitePath(t)
	if err := os.MkdirAll(filepath.Dir(db), 0o755); err != nil {
		t.Fatal(err)
	}
	// The parent reads the helper's progress from the same database file.
	watch, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	defer watch.Close()
	ctx := context.Background()
	offset := func() uint64 {
		o, err := watch.Offset(ctx, projections.DefaultConsumer)
		if err != nil {
			return 0
		}
		return o
	}

	// The load: n events over 100 sandboxes, published in the background.
	loadDone := make(chan error, 1)
	go func() {
		const sandboxes = 100
		per := n / sandboxes
		ids := make([]string, sandboxes)
		for i := range ids {
			ids[i] = bustest.ID("kill")
		}
		for k := range per {
			for i, id := range ids {
				var e events.Entry
				if k == 0 {
					e = events.New(time.Now().UnixMilli(), "kill", id, events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: id})
				} else {
					e = events.New(time.Now().UnixMilli(), "kill", id, k, events.ExecOutput, events.NewOutput(k, events.Stdout, []byte("line "+strconv.Itoa(k)+" of "+strconv.Itoa(i))))
				}
				if err := l.Append(ctx, e); err != nil {
					loadDone <- err
					return
				}
			}
		}
		loadDone <- l.Flush(ctx)
	}()

	first := startHelper(t, natsURL, db)
	testenv.Eventually(t, 60*time.Second, func() error {
		if o := offset(); o < uint64(n)/4 {
			return fmt.Errorf("helper offset %d, waiting for %d", o, n/4)
		}
		return nil
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	_, _ = first.Process.Wait()
	killedAt := offset()
	t.Logf("SIGKILLed the projector at offset %d of a %d-event load", killedAt, n)

	second := startHelper(t, natsURL, db)
	if err := <-loadDone; err != nil {
		t.Fatalf("load: %v", err)
	}
	want := lastLedgerSeq(t, b)
	testenv.Eventually(t, 90*time.Second, func() error {
		if o := offset(); o < want {
			return fmt.Errorf("restarted helper offset %d, want %d", o, want)
		}
		return nil
	})
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("projector process exit: %v", err)
	}

	rebuilt := memory.New()
	st, err := projections.Rebuild(ctx, b, rebuilt, nil)
	if err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	if st.Applied != uint64(n) {
		t.Fatalf("rebuild applied %d, want %d", st.Applied, n)
	}
	if err := projections.Verify(ctx, watch, rebuilt); err != nil {
		t.Fatalf("Verify(killed-and-restarted, rebuilt): %v", err)
	}
}

func lastLedgerSeq(t *testing.T, b *bus.Bus) uint64 {
	t.Helper()
	m, err := b.LastMsg(context.Background(), b.LedgerFilter())
	if err != nil {
		t.Fatalf("last ledger message: %v", err)
	}
	return m.Sequence
}
