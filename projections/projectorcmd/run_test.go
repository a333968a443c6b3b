package projectorcmd_test

import (
	"context"
	"fmt"
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
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/examples/audit"
	"github.com/alineo-labs/alineo/examples/execstats"
	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/projections/projectorcmd"
	"github.com/alineo-labs/alineo/testenv"
)

func noenv(string) string { return "" }

// run is the command line under test.
var run = projectorcmd.Run

// The example projections, as cmd/projector registers them.
func init() {
	projections.Register(execstats.Definition())
	projections.Register(audit.Definition())
}

// publish appends a small session of n execs to the ledger stream at url.
func publish(t *testing.T, url, id string, n int) {
	t.Helper()
	ctx := context.Background()
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
	now := time.Now().UnixMilli()
	es := []events.Entry{events.New(now, "proj", id, events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: id})}
	for i := 1; i <= n; i++ {
		es = append(es,
			events.New(now, "proj", id, i, events.ExecStarted, events.ExecStartedPayload{Kind: events.KindCommand, Cmd: "true"}),
			events.New(now, "proj", id, i, events.ExecCompleted, events.ExecCompletedPayload{}))
	}
	if err := l.AppendBatch(ctx, es); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRunProjectsAndServesMetrics(t *testing.T) {
	url := testenv.NATS(t)
	db := testenv.SQLitePath(t)
	publish(t, url, "sb1", 3)

	r := testutil.Start(t, run, []string{"--nats", url, "--sqlite", db, "--metrics", "127.0.0.1:0", "--progress", "0"}, noenv)
	store, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	testenv.Eventually(t, 10*time.Second, func() error {
		d, err := store.GetSandboxDetails(ctx, "proj", "sb1")
		if err != nil || d == nil {
			return fmt.Errorf("details: %v %v", d, err)
		}
		if got, want := d.ExecCount, 3; got != want {
			return fmt.Errorf("exec count = %d, want %d", got, want)
		}
		return nil
	})
	var metricsURL string
	testenv.Eventually(t, 5*time.Second, func() error {
		m, err := r.Match(regexp.MustCompile(`metrics on (http://\S+)`))
		if err != nil {
			return err
		}
		metricsURL = m[1]
		return nil
	})
	testenv.Eventually(t, 5*time.Second, func() error {
		resp, err := http.Get(metricsURL)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), `alineo_projector_events_total{consumer="alineo-projector",projection="tables"} 7`) {
			return fmt.Errorf("metrics lack 7 applied events:\n%.2000s", body)
		}
		return nil
	})
	if err := r.Stop(t, 10*time.Second); err != nil {
		t.Fatalf("run: %v", err)
	}

	// verify: the live projection equals a rebuild.
	vout := &testutil.SyncBuffer{}
	if err := run(context.Background(), []string{"verify", "--nats", url, "--sqlite", db}, noenv, vout); err != nil {
		t.Fatalf("verify: %v\n%s", err, vout)
	}
	if !strings.Contains(vout.String(), "verified") {
		t.Errorf("verify output = %q", vout)
	}

	// rebuild into a new file, then verify that one too.
	other := filepath.Join(t.TempDir(), "rebuilt.db")
	rout := &testutil.SyncBuffer{}
	if err := run(context.Background(), []string{"rebuild", "--nats", url, "--sqlite", other}, noenv, rout); err != nil {
		t.Fatalf("rebuild: %v\n%s", err, rout)
	}
	if !strings.Contains(rout.String(), "rebuilt sqlite") || !strings.Contains(rout.String(), ": 7 entries") {
		t.Errorf("rebuild output = %q", rout)
	}
	rs, err := sqlite.Open(other, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ds, err := rs.ListAllSandboxDetails(context.Background(), adapters.ListOptions{})
	if err != nil || len(ds) != 1 {
		t.Fatalf("rebuilt details = %v, %v; want 1 session", ds, err)
	}
}

func TestVerifyDetectsDifference(t *testing.T) {
	url := testenv.NATS(t)
	db := testenv.SQLitePath(t)
	publish(t, url, "sb2", 1)
	// A store that was never projected differs from the stream.
	store, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.ApplyBatch(context.Background(), "other", nil, 0); err != nil {
		t.Fatal(err)
	}
	store.Close()
	err = run(context.Background(), []string{"verify", "--nats", url, "--sqlite", db}, noenv, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("verify = %v, want a difference", err)
	}
}

func TestRunBadArguments(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"run", "extra"}, "unexpected argument"},
		{[]string{"--no-such-flag"}, "not defined"},
	}
	for _, tt := range tests {
		err := run(context.Background(), tt.args, noenv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

// TestRunPostgres projects into Postgres selected by DATABASE_URL.
func TestRunPostgres(t *testing.T) {
	dsn := testenv.Postgres(t)
	url := testenv.NATS(t)
	publish(t, url, "sbpg", 2)
	env := map[string]string{"DATABASE_URL": dsn, "NATS_URL": url}
	getenv := func(k string) string { return env[k] }
	r := testutil.Start(t, run, []string{"--metrics", "", "--progress", "0"}, getenv)
	testenv.Eventually(t, 20*time.Second, func() error {
		vout := &testutil.SyncBuffer{}
		if err := run(context.Background(), []string{"verify"}, getenv, vout); err != nil {
			return err
		}
		if !strings.Contains(vout.String(), "verified postgres: equal to a rebuild of 5 entries") {
			return fmt.Errorf("verify: %s", vout)
		}
		return nil
	})
	if err := r.Stop(t, 30*time.Second); err != nil {
		t.Fatalf("run: %v\n%s", err, r.Out)
	}
	if !strings.Contains(r.Out.String(), "-> postgres") {
		t.Errorf("output = %q, want the postgres store named", r.Out)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres()
	os.Exit(code)
}
