package soak

import (
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/testenv"
)

// TestVerifyCatchesAProjectorThatSkippedABatch runs the check's collector
// (the projector binary's verify) on real tables: equal to the stream it
// passes; with the rows of one batch missing, as a projector that skipped
// it would leave them, it fails.
func TestVerifyCatchesAProjectorThatSkippedABatch(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/projector")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "projector")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/alineo-labs/alineo/cmd/projector")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build projector: %v\n%s", err, out)
	}
	url := testenv.NATS(t)
	b, err := bus.Open(ctx, bus.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, id := range []string{"v-1", "v-2"} {
		es := []events.Entry{events.New(1, "verify", id, events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: id})}
		for i := 1; i <= 3; i++ {
			es = append(es, events.New(2, "verify", id, i, events.ExecStarted, events.ExecStartedPayload{Seq: i, Cmd: "true"}),
				events.New(3, "verify", id, i, events.ExecCompleted, events.ExecCompletedPayload{Seq: i}))
		}
		if err := l.AppendBatch(ctx, es); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rm.db")
	store, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := &projections.Projector{Bus: b, Store: store, BatchWait: 10 * time.Millisecond}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()
	if err := poll(context.Background(), "projected", time.Minute, 20*time.Millisecond, func() (bool, error) {
		return p.Progress().Offset >= l.LastSeq(), nil
	}); err != nil {
		t.Fatal(err)
	}
	stop()
	<-done
	store.Close()

	if v := runVerify(ctx, bin, nil, url, "--sqlite", path); v != "" {
		t.Fatalf("verify of complete tables: %s", v)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM alineo_events WHERE sandbox_id = 'v-2' AND step_idx = 2`); err != nil {
		t.Fatal(err)
	}
	v := runVerify(ctx, bin, nil, url, "--sqlite", path)
	if v == "" || !strings.Contains(v, "differs") {
		t.Fatalf("verify of tables missing a batch: %q, want it to fail naming the difference", v)
	}
	r := results(&Observation{Verify: v})[Checks[3].Name]
	if r.Pass {
		t.Fatal("the verify check passed on tables missing a batch")
	}
	t.Logf("check: %s", r.Detail)
}
