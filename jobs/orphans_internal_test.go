package jobs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/testenv"
)

// tagged lists the sandboxes on the server tagged with job id that are not
// terminated.
func tagged(t *testing.T, c *alineo.Client, id string) []string {
	t.Helper()
	p, err := c.OpenSandbox().ListSandboxes(context.Background(), opensandbox.ListSandboxesOptions{
		Metadata: map[string]string{MetaJob: id}, PageSize: 200})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sb := range p.Items {
		if sb.Status.State != opensandbox.StateTerminated {
			ids = append(ids, sb.ID)
		}
	}
	return ids
}

// TestTakeoverEndsUnrecordedSandbox: attempt 1 of a job created its sandbox
// and was SIGKILLed before recording it in the job's status (found by the
// 30-minute soak: 6 sandboxes left Running). The attempt that takes the job
// over finds it by its tag and ends it: deleted on the server, its session
// closed in the ledger. Without the sweep the sandbox stays Running.
func TestTakeoverEndsUnrecordedSandbox(t *testing.T) {
	ctx := context.Background()
	b, q := testQueue(t, QueueConfig{AckWait: 2 * time.Second})
	l, client := sdkOn(t, b, "")
	spec := Spec{Name: "orphan", Image: "host", Steps: []Step{{Exec: &ExecStep{Command: "echo hi"}}}}
	st, err := q.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}

	// Attempt 1: delivered, status claimed, sandbox created as the Runner
	// creates it (tagged), then the process dies: no ack, no SandboxID.
	fetchJob(t, q)
	if _, err := q.update(ctx, st.ID, func(s *Status) { s.State, s.Attempt, s.Worker = StateRunning, 1, "dead" }); err != nil {
		t.Fatal(err)
	}
	dead, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: spec.Name, Metadata: JobMetadata(st.ID, 1, spec.Name)})
	if err != nil {
		t.Fatal(err)
	}
	orphan := dead.ID() // never closed: the handle dies with its process
	if got := tagged(t, client, st.ID); !slices.Contains(got, orphan) {
		t.Fatalf("tagged sandboxes %v lack the orphan %s", got, orphan)
	}

	// Attempt 2, after the lease ran out.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &Worker{Queue: q, Client: client, Ledger: l, ID: "w2"}
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	testenv.Eventually(t, 60*time.Second, func() error {
		s, err := q.Status(ctx, st.ID)
		if err != nil || s.State != StateSucceeded {
			return fmt.Errorf("status %+v, %v", s, err)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := tagged(t, client, st.ID); len(got) != 0 {
		t.Errorf("sandboxes of the job left on the server: %v", got)
	}
	if _, err := client.OpenSandbox().GetSandbox(ctx, orphan); err == nil {
		if sb, _ := client.OpenSandbox().GetSandbox(ctx, orphan); sb != nil && sb.Status.State != opensandbox.StateTerminated {
			t.Errorf("orphan %s is %s, want deleted", orphan, sb.Status.State)
		}
	}
	es, err := l.ReadAll(ctx, spec.Name, orphan)
	if err != nil {
		t.Fatal(err)
	}
	if !closed(es) {
		t.Errorf("the orphan's session does not end with sandbox.closed: %d entries", len(es))
	} else if p := string(es[len(es)-1].Payload); !strings.Contains(p, st.ID) || !strings.Contains(p, `"w2"`) {
		t.Errorf("sandbox.closed payload %s, want job %s by w2", p, st.ID)
	}
}

// TestRunnerTagsCreatedAndResumedSandboxes: Runner.Metadata is on the
// server for the sandbox Run creates and for the one the default Resume
// restores.
func TestRunnerTagsCreatedAndResumedSandboxes(t *testing.T) {
	ctx := context.Background()
	client, err := alineo.New(alineo.Options{BaseURL: testenv.Sandboxd(t), Adapter: memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{Name: "tags", Image: "host", Steps: []Step{
		{Exec: &ExecStep{Command: "echo one"}}, {Checkpoint: &CheckpointStep{Tag: "c"}}, {Exec: &ExecStep{Command: "echo two"}}}}
	var cp *Checkpoint
	check := func(md map[string]string) func(context.Context, *alineo.Sandbox) error {
		return func(ctx context.Context, sb *alineo.Sandbox) error {
			got, err := client.OpenSandbox().GetSandbox(ctx, sb.ID())
			if err != nil {
				return err
			}
			for k, v := range md {
				if got.Metadata[k] != v {
					return fmt.Errorf("sandbox %s metadata %v, want %s=%s", sb.ID(), got.Metadata, k, v)
				}
			}
			return nil
		}
	}
	md1 := JobMetadata("job1", 1, spec.Name)
	r := &Runner{Client: client, Metadata: md1, OnSandbox: check(md1),
		OnCheckpoint: func(_ context.Context, c Checkpoint) error { cp = &c; return nil }}
	if _, err := r.Run(ctx, spec, nil); err != nil {
		t.Fatalf("created: %v", err)
	}
	if cp == nil {
		t.Fatal("no checkpoint")
	}
	md2 := JobMetadata("job1", 2, cp.Name)
	r = &Runner{Client: client, Metadata: md2, OnSandbox: check(md2)}
	if _, err := r.Run(ctx, spec, cp); err != nil {
		t.Fatalf("resumed: %v", err)
	}
}

// A sweep ends only what earlier attempts tagged: an attempt that stalled
// past its lease and then finished must not end the sandbox of the attempt
// that took its job over.
func TestSweepKeepsLaterAttempts(t *testing.T) {
	ctx := context.Background()
	client, err := alineo.New(alineo.Options{BaseURL: testenv.Sandboxd(t), Adapter: memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	const job = "0123456789abcdef0123456789abcdef"
	var ids []string
	for _, attempt := range []int{1, 2, 3} {
		sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: "sweep", Metadata: JobMetadata(job, attempt, "sweep")})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close(ctx)
		ids = append(ids, sb.ID())
	}
	w := &Worker{Client: client}
	ended, err := w.sweep(ctx, job, 3, "taken over") // attempt 2 finishing: 1 and 2 are its or earlier
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ended)
	want := slices.Sorted(slices.Values(ids[:2]))
	if !slices.Equal(ended, want) {
		t.Errorf("ended %v, want attempts 1 and 2: %v", ended, want)
	}
	if got := tagged(t, client, job); !slices.Equal(got, ids[2:]) {
		t.Errorf("left %v, want attempt 3's %v", got, ids[2:])
	}
}
