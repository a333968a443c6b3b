package soak

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
)

// TestRecheckReadsAKeptRun: a run's three NATS stores, left as a soak
// leaves them (a job still queued, a session with no checkpoint, entries
// under their fence), are started again by Recheck, which reads the job's
// status and the stream back and reruns the checks on them.
func TestRecheckReadsAKeptRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	stores := []string{filepath.Join(dir, "nats-1"), filepath.Join(dir, "nats-2"), filepath.Join(dir, "nats-3")}
	for _, s := range stores {
		if err := os.Mkdir(s, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	url, stop, err := startStores(ctx, stores, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.Open(ctx, bus.Config{URL: url, Replicas: Replicas, SetupTimeout: time.Minute})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	q, err := jobs.OpenQueue(ctx, b.JetStream(), jobs.QueueConfig{Replicas: Replicas})
	if err != nil {
		t.Fatal(err)
	}
	spec, job := jobSpec("77", 5)
	st, err := q.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	es := []events.Entry{
		events.New(1, job.Name, "sb-r", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb-r"}),
		events.New(2, job.Name, "sb-r", 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Cmd: job.PreCheckpoint[0]}),
		events.New(3, job.Name, "sb-r", 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1}),
	}
	if err := l.AppendBatch(ctx, es); err != nil {
		t.Fatal(err)
	}
	l.Close()
	b.Close()
	stop()

	rs, err := Recheck(ctx, dir, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(Rechecks) {
		t.Fatalf("%d results, want %d", len(rs), len(Rechecks))
	}
	want := []struct {
		pass   bool
		detail string
	}{
		{false, fmt.Sprintf("%s: queued", job.Name)},
		{false, fmt.Sprintf("%s: no checkpoint %q recorded", job.Name, job.Tag)},
		{true, "3 entries under 1 fences"},
	}
	for i, r := range rs {
		if r.Pass != want[i].pass || !strings.Contains(r.Detail, want[i].detail) {
			t.Errorf("%s: pass %v, %q; want pass %v, %q (job %s)", r.Check, r.Pass, r.Detail, want[i].pass, want[i].detail, st.ID)
		}
	}
	if _, err := Recheck(ctx, t.TempDir(), time.Second); err == nil || !strings.Contains(err.Error(), "no NATS stores") {
		t.Errorf("Recheck of a directory without stores: %v", err)
	}
}

func TestJobNumber(t *testing.T) {
	for name, want := range map[string]struct {
		run string
		n   int
		ok  bool
	}{
		"soak-662709-68": {"662709", 68, true},
		"soak-a-b-3":     {"a-b", 3, true},
		"soak-5":         {"", 0, false},
		"other-1-2":      {"", 0, false},
		"soak-1-x":       {"", 0, false},
	} {
		run, n, ok := jobNumber(name)
		if run != want.run || n != want.n || ok != want.ok {
			t.Errorf("jobNumber(%q) = %q, %d, %v; want %q, %d, %v", name, run, n, ok, want.run, want.n, want.ok)
		}
	}
}
